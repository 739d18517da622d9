package jsonengine

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
)

// TestNullsFollowTheRequest: the mutated object's null members are those of
// the request's object, as package engine gives them (its typed encoding
// then nulls.Prune), compared with the nulls kept (outcome drops them): a
// `creationTimestamp: null` the typed encoding omits stays, so that the
// host's patch does not remove it. test/mapdiff compares the host's patches
// with Kubernetes' plugin's on the module.
func TestNullsFollowTheRequest(t *testing.T) {
	podNulls := strings.Replace(podYAML, "metadata: {name: web,", "metadata: {creationTimestamp: null, annotations: null, finalizers: [], name: web,", 1)
	podNulls = strings.Replace(podNulls, "resources: {limits: {cpu: 1000m}}", "resources: {limits: null, requests: {}}\n    securityContext: null\n    command: []", 1)
	podNulls += "  dnsConfig: null\n  nodeSelector: {}\nstatus: {}\n"
	deployNulls := strings.Replace(deploymentYAML, `creationTimestamp: "2026-01-02T03:04:05+01:00"`, "creationTimestamp: null", 1)
	deployNulls = strings.Replace(deployNulls, "metadata: {labels: {app: api}}", "metadata: {creationTimestamp: null, labels: {app: api}}", 1)
	widgetNulls := strings.Replace(widgetYAML, "metadata: {name: w,", "metadata: {creationTimestamp: null, labels: null, name: w,", 1)
	objects := map[string]string{"pod": podNulls, "deployment": deployNulls, "widget": widgetNulls}
	for name, settings := range map[string]string{
		"apply":     policyYAML("", ac(`Object{metadata: Object.metadata{labels: {"added": "yes"}}}`)),
		"jsonpatch": policyYAML("", jp(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"a": "b"}}]`)),
	} {
		data, err := yaml.YAMLToJSON([]byte(settings))
		if err != nil {
			t.Fatal(err)
		}
		ref, err := engine.Compile(data)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Compile(data)
		if err != nil {
			t.Fatal(err)
		}
		for kind, obj := range objects {
			req := admissionRequest(t, testRequest{op: "CREATE", object: obj})
			want, err := ref.Evaluate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Evaluate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if want.Object == nil || !strings.Contains(string(req.Object), `"creationTimestamp":null`) {
				t.Fatalf("%s on %s: the case does not test what it says: %s", name, kind, want.Object)
			}
			var w, g any
			_ = json.Unmarshal(want.Object, &w)
			if err := json.Unmarshal(got.Object, &g); err != nil || !reflect.DeepEqual(w, g) {
				t.Errorf("%s on %s:\npackage engine: %s\njsonengine:     %s", name, kind, want.Object, got.Object)
			}
		}
	}
}
