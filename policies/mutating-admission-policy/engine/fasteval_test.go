package engine

import (
	"context"
	"strings"
	"testing"
)

// TestFastPathTaken: the successful evaluations of the common policies are
// answered by the fast path, without a rerun on the exact path (check, in
// every other test, shows the two agree; this shows the fast one is used).
// Each case reads different variables of the lazy activation.
func TestFastPathTaken(t *testing.T) {
	for _, c := range []struct {
		name, settings string
		r              req
		mutated        bool
	}{
		{"label apply configuration", policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'team': 'payments'}}}"}`), req{object: pod}, true},
		{"sidecar JSONPatch with a match condition", sidecarJSONPatch, req{object: pod}, true},
		{"match condition false", sidecarJSONPatch, req{object: podWithSidecar}, false},
		{"sidecar apply configuration", policyWith(`
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: 'mesh-proxy', image: 'mesh/proxy:v1.0.0', restartPolicy: 'Always'}]}}"}`), req{object: pod}, true},
		{"request, namespaceObject and oldObject", policy("", labelFromRequest, ""), req{object: deployment}, true},
		{"variables", policy(`  variables:
  - {name: base, expression: "object.spec.replicas"}
  - {name: doubled, expression: "variables.base * 2"}`, `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: variables.doubled}]"}`, ""), req{object: deployment}, true},
		{"params", policy("  paramKind: {apiVersion: v1, kind: ConfigMap}", `
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {params.metadata.name: params.data.v}}}"}`,
			"binding: {paramRef: {name: a}}\nparams:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: default}, data: {v: \"1\"}}"), req{object: deployment}, true},
		{"authorizer", policy("", `
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'allowed': string(authorizer.group('apps').resource('deployments').namespace('default').check('delete').allowed())}}]"}`, ""), req{object: deployment}, true},
		{"chained mutations", policy("", setReplicas5+`
  - patchType: JSONPatch
    jsonPatch: {expression: "[JSONPatch{op: 'replace', path: '/spec/replicas', value: object.spec.replicas * 2}]"}
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'r': string(object.spec.replicas)}}}"}`, ""), req{object: deployment}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := compile(t, c.settings)
			res, err := e.Evaluate(context.Background(), c.r.build(t))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Accepted || (res.Object != nil) != c.mutated {
				t.Fatalf("accepted=%v message=%q object=%s, want mutated=%v", res.Accepted, res.Message, res.Object, c.mutated)
			}
			if n := e.Fallbacks(); n != 0 {
				t.Fatalf("%d evaluation(s) fell back to the exact path", n)
			}
			if n := e.declines.Load(); n != 0 {
				t.Fatalf("%d mutation(s) declined by fastApply or applyJSONPatchOps", n)
			}
		})
	}
	t.Run("an evaluation error falls back", func(t *testing.T) {
		e := compile(t, policy("", failingMutation, ""))
		res, err := e.Evaluate(context.Background(), req{object: deployment}.build(t))
		if err != nil {
			t.Fatal(err)
		}
		if res.Accepted || e.Fallbacks() != 1 {
			t.Fatalf("accepted=%v fallbacks=%d, want a rejection from the exact path", res.Accepted, e.Fallbacks())
		}
	})
}

// TestFastMatchEvaluatesEveryCondition: the apiserver evaluates all match
// conditions before looking at them, so conditions after a false one that
// exhaust the match-conditions budget make the match an error (rejected
// with failurePolicy Fail), not a non-match. The fast path must not stop at
// the false one.
func TestFastMatchEvaluatesEveryCondition(t *testing.T) {
	list := "[" + strings.TrimSuffix(strings.Repeat("1,", 60), ",") + "]"
	heavy := list + ".all(x, " + list + ".all(y, " + list + ".all(z, z == 1)))"
	settings := policy("  matchConditions:\n  - {name: never, expression: 'false'}\n"+
		"  - {name: h1, expression: '"+heavy+"'}\n  - {name: h2, expression: '"+heavy+"'}\n"+
		"  - {name: h3, expression: '"+heavy+"'}\n  - {name: h4, expression: '"+heavy+"'}\n  failurePolicy: Fail", setReplicas5, "")
	check(t, compile(t, settings), req{object: deployment}, want{reject: "running out of cost budget"})
}
