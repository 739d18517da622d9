package mapdiff_test

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// realistic is request.object of the AdmissionReview test/testdata/reviews/file:
// the objects of the size and shape clusters send (issue 24: the MAP figures
// must come from real objects, not the examples).
func realistic(file string) string {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "reviews", file))
	if err != nil {
		panic(err)
	}
	var rv struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(b, &rv); err != nil || len(rv.Request.Object) == 0 {
		panic("test/testdata/reviews/" + file + ": no request.object")
	}
	return string(rv.Request.Object)
}

// realisticPod is the 5 KB Pod (three containers with env, probes, volume
// mounts, resources and securityContexts).
var realisticPod = realistic("pod.json")

// labelApply is the benchmarks' label-adding apply configuration.
var labelApply = apply(`Object{metadata: Object.metadata{labels: {"team": "payments"}}}`)

// settingsOf is the settings of the case named name.
func settingsOf(name string) string {
	for _, c := range cases {
		if c.name == name {
			return c.settings
		}
	}
	panic("no case " + name)
}

func init() {
	cases = append(cases,
		dcase{"realistic objects, label apply configuration", mkPolicy("realistic-label", "", labelApply), []dreq{
			{name: "Pod 5 KB", op: "CREATE", object: realisticPod, expect: `"team":"payments"`},
			{name: "Pod 5 KB update", op: "UPDATE", object: realisticPod, oldObject: realisticPod, expect: `"team":"payments"`},
			{name: "Deployment", op: "CREATE", object: realistic("deployment.json"), expect: `"team":"payments"`},
			{name: "Service", op: "CREATE", object: realistic("service.json"), expect: `"team":"payments"`},
			{name: "ConfigMap 50 KB", op: "CREATE", object: realistic("configmap-50k.json"), expect: `"team":"payments"`},
		}},
		dcase{"realistic objects, sidecar JSONPatch", settingsOf("sidecar JSONPatch with matchCondition"), []dreq{
			{name: "Pod 5 KB", op: "CREATE", object: realisticPod},
		}},
		dcase{"realistic objects, sidecar apply configuration", settingsOf("sidecar apply configuration without args"), []dreq{
			{name: "Pod 5 KB", op: "CREATE", object: realisticPod, expect: "mesh-proxy"},
		}},
		dcase{"realistic objects, sidecar JSONPatch for any Pod", sidecarAnyPod, []dreq{
			{name: "Pod 5 KB", op: "CREATE", object: realisticPod, expect: "mesh-proxy"},
			{name: "example Pod", op: "CREATE", object: pod, expect: "mesh-proxy"},
		}},
	)
}

// sidecarAnyPod is the sidecar JSONPatch written for Pods without
// initContainers too (policies/mutating-admission-policy/testdata): the
// documented example is refused on the 5 KB Pod, as by Kubernetes.
var sidecarAnyPod = func() string {
	b, err := os.ReadFile(filepath.Join("..", "..", "policies", "mutating-admission-policy", "testdata", "sidecar-any-pod-settings.yml"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()
