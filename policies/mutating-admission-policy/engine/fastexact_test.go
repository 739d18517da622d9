package engine

import (
	"context"
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The fast path against the exact path on random objects: whatever the
// object, both must give the same Result (the same mutated object, the same
// rejection, or both unchanged). The other tests pin chosen cases; this one
// throws randomly filled Pods and Deployments at a set of policies.

var fastExactPolicies = []string{
	policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`),
	sidecarJSONPatch,
	policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: 'mesh-proxy', image: 'mesh/proxy:v1.0.0', restartPolicy: 'Always'}]}}"}`),
	policy("", setReplicas5, ""),
	policy("", labelFromRequest, ""),
	policy(`  variables:
  - {name: nlabels, expression: "has(object.metadata.labels) ? size(object.metadata.labels) : 0"}`, `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'labels': string(variables.nlabels)}}]"}`, ""),
	policyWith(`
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('example.com/x~y'), value: 'v'}]"}`),
	policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: 'app', env: [Object.spec.template.spec.containers.env{name: 'A', value: 'b'}]}]}}}}"}`),
	policyWith(`
  - patchType: JSONPatch
    jsonPatch: {expression: "object.spec.?containers.orValue([]).size() > 0 ? [JSONPatch{op: 'replace', path: '/spec/containers/0/image', value: 'x:1'}, JSONPatch{op: 'test', path: '/spec/containers/0/image', value: 'x:1'}] : []"}`),
}

// randomRequest is a Pod or Deployment CREATE whose object is randomly
// filled from seed.
func randomRequest(t testing.TB, seed int64) req {
	filler := newObjectFiller().NilChance(0.4).MaxDepth(7).RandSource(rand.NewSource(seed))
	var obj runtime.Object
	if seed%2 == 0 {
		p := &corev1.Pod{}
		filler.Fill(p)
		p.APIVersion, p.Kind = "v1", "Pod"
		obj = p
	} else {
		d := &appsv1.Deployment{}
		filler.Fill(d)
		d.APIVersion, d.Kind = "apps/v1", "Deployment"
		obj = d
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return req{object: string(b)}
}

// fastExactStats counts the outcomes, to show the random objects exercise
// the fast path (not only its fallbacks).
type fastExactStats struct{ mutated, rejected, unchanged, fallbacks, declines int }

func checkFastMatchesExact(t *testing.T, settings string, r req, stats *fastExactStats) {
	t.Helper()
	e := compile(t, settings)
	exact := *e
	exact.exactOnly = true
	got, errFast := e.Evaluate(context.Background(), r.build(t))
	want, errExact := exact.Evaluate(context.Background(), r.build(t))
	if (errFast == nil) != (errExact == nil) {
		t.Fatalf("errors differ: fast %v, exact %v", errFast, errExact)
	}
	if stats != nil && got != nil {
		switch {
		case !got.Accepted:
			stats.rejected++
		case got.Object != nil:
			stats.mutated++
		default:
			stats.unchanged++
		}
		stats.fallbacks += int(e.Fallbacks())
		stats.declines += int(e.declines.Load())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path\n  %+v (object %s)\nexact path\n  %+v (object %s)\nrequest object %s", got, objectOf(got), want, objectOf(want), r.object)
	}
}

func objectOf(r *Result) string {
	if r == nil {
		return ""
	}
	return string(r.Object)
}

func TestFastPathMatchesExactOnRandomObjects(t *testing.T) {
	n := int64(60)
	if testing.Short() {
		n = 10
	}
	var stats fastExactStats
	for seed := int64(0); seed < n; seed++ {
		r := randomRequest(t, seed)
		for _, p := range fastExactPolicies {
			checkFastMatchesExact(t, p, r, &stats)
		}
	}
	t.Logf("%+v", stats)
	// Most evaluations must be answered by the fast path itself.
	if total := stats.mutated + stats.rejected + stats.unchanged; stats.mutated < total/3 || stats.fallbacks > total/2 {
		t.Fatalf("the random objects mostly miss the fast path: %+v", stats)
	}
}

func FuzzFastPathMatchesExact(f *testing.F) {
	for seed := int64(0); seed < 4; seed++ {
		f.Add(seed, uint8(seed))
	}
	f.Fuzz(func(t *testing.T, seed int64, policy uint8) {
		checkFastMatchesExact(t, fastExactPolicies[int(policy)%len(fastExactPolicies)], randomRequest(t, seed), nil)
	})
}
