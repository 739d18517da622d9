package engine

import (
	"os"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
)

func TestDisjointPaths(t *testing.T) {
	for _, c := range []struct {
		a, b     string
		disjoint bool
	}{
		{"spec.containers[name: *].imagePullPolicy", "spec.containers[name: checkout].args", true},
		{"spec.containers[name: a].image", "spec.containers[name: b].image", true},
		{"spec.containers[name: a].image", "spec.containers[name: a].image", false},
		{"spec.containers[name: *].image", "spec.containers[name: a].image", false},
		{"spec.containers[name: a].image", "spec.containers[image: x].image", false}, // both may select one element
		{"spec.containers[name: a]", "spec.containers[name: a].image", false},        // one inside the other
		{"spec.containers", "spec.containers[name: a].args", false},
		{"spec.list[n: 1].x", `spec.list[n: "1"].x`, true}, // int64 1 and "1" never select the same element
		{"spec.list[n: 1].x", "spec.list[n: 1].y", true},
		{"spec.a", "spec.a.b", false},
		{"metadata.labels.a", "metadata.labels.b", true},
		{"spec.x", "spec[name: x].y", true}, // a key and a list element
	} {
		pa, err := parser.Parse(c.a)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := parser.Parse(c.b)
		if err != nil {
			t.Fatal(err)
		}
		if got := disjointPaths(pa, pb); got != c.disjoint || disjointPaths(pb, pa) != c.disjoint {
			t.Errorf("disjointPaths(%s, %s) = %v, want %v", c.a, c.b, got, c.disjoint)
		}
	}
}

// TestFastLoopAgrees runs mutator sets whose locations are disjoint (the
// loop then trusts the mutators' change tracking and encodes nothing) both
// ways: as compiled, and with the loop forced to encode and compare the
// object as before. The answers must be the same, including the cases the
// fast loop decides differently: a write that changes the type of a number
// only (no change as JSON), changes in a second iteration (the original is
// read again), a set that does not converge.
func TestFastLoopAgrees(t *testing.T) {
	podReq := func(obj string) Request {
		return Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: "default", Name: "p", Object: []byte(obj)}
	}
	meta := func(name, location, value string) string {
		return `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata","metadata":{"name":"` + name +
			`"},"spec":{"location":"` + location + `","parameters":{"assign":{"value":"` + value + `"}}}}`
	}
	bench, err := os.ReadFile("../testdata/settings-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	realPod, err := os.ReadFile("../../../test/testdata/reviews/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	top, err := jsonv.RawFields(realPod)
	if err != nil {
		t.Fatal(err)
	}
	rf, err := jsonv.RawFields(top["request"])
	if err != nil {
		t.Fatal(err)
	}
	podNS := strings.Trim(string(rf["namespace"]), `"`)
	nsPod := strings.Replace(pod, `"metadata":{"name":"p",`, `"metadata":{"name":"p","namespace":"default",`, 1)
	if nsPod == pod {
		t.Fatal("pod has changed: no namespace added")
	}
	for _, c := range []struct {
		name     string
		settings []byte
		req      Request
		disjoint bool
		changed  bool
	}{
		{"bench settings on the 5 KB Pod", bench, Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: podNS, Object: rf["object"]}, true, true},
		{"two disjoint assigns", settings(
			assign("pull", "spec.containers[name: *].imagePullPolicy", `{"assign":{"value":"Always"}}`),
			assign("img", "spec.containers[name: b].image", `{"assign":{"value":"alpine"}}`)), podReq(pod), true, true},
		{"int to float only", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`),
			assign("img", "spec.containers[name: b].image", `{"assign":{"value":"busybox"}}`)), podReq(pod), true, false},
		{"int to float and a real change", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`),
			assign("img", "spec.containers[name: b].image", `{"assign":{"value":"alpine"}}`)), podReq(pod), true, true},
		{"second iteration: a label set by AssignMetadata selects an Assign", settings(
			assign("sel", "spec.selected", `{"assign":{"value":true}}`, `"match":{"labelSelector":{"matchLabels":{"tier":"gold"}}}`),
			meta("tier", "metadata.labels.tier", "gold")), podReq(pod), true, true},
		{"second iteration, and the first changes numbers' types only", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`, `"match":{"labelSelector":{"matchLabels":{"app":"web"}}}`),
			assign("sel", "spec.selected", `{"assign":{"value":true}}`, `"match":{"labelSelector":{"matchLabels":{"tier":"gold"}}}`),
			meta("tier", "metadata.labels.tier", "gold")), podReq(pod), true, true},
		// The request namespace already the object's: "changed" from the
		// mutators' flags (first iteration only) or the original read again.
		{"namespaced: int to float only", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`),
			assign("img", "spec.containers[name: b].image", `{"assign":{"value":"busybox"}}`)), podReq(nsPod), true, false},
		{"namespaced: a real change", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`),
			assign("img", "spec.containers[name: b].image", `{"assign":{"value":"alpine"}}`)), podReq(nsPod), true, true},
		{"namespaced: second iteration", settings(
			assign("sel", "spec.selected", `{"assign":{"value":true}}`, `"match":{"labelSelector":{"matchLabels":{"tier":"gold"}}}`),
			meta("tier", "metadata.labels.tier", "gold")), podReq(nsPod), true, true},
		{"namespaced: second iteration and a number's type", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`, `"match":{"labelSelector":{"matchLabels":{"app":"web"}}}`),
			assign("sel", "spec.selected", `{"assign":{"value":true}}`, `"match":{"labelSelector":{"matchLabels":{"tier":"gold"}}}`),
			meta("tier", "metadata.labels.tier", "gold")), podReq(nsPod), true, true},
		{"namespaced: a second iteration that undoes nothing, and no change as JSON", settings(
			assign("r", "spec.replicas", `{"assign":{"value":1}}`, `"match":{"labelSelector":{"matchLabels":{"app":"web"}}}`)),
			podReq(nsPod), true, false},
		{"not converging", settings(version("a", "v2", "v3"), version("b", "v1", "v2"), version("c", "v3", "v1")),
			podReq(pod), false, false},
		{"writes that undo each other (not disjoint)", settings(
			assign("a", "spec.containers[name: b].image", `{"assign":{"value":"alpine"}}`),
			assign("b", "spec.containers[name: b].image", `{"assign":{"value":"busybox"}}`)), podReq(pod), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := Compile(c.settings)
			if err != nil {
				t.Fatal(err)
			}
			if s.disjoint != c.disjoint {
				t.Fatalf("disjoint = %v, want %v", s.disjoint, c.disjoint)
			}
			slow := *s
			slow.disjoint = false
			var sc Scratch
			req := c.req
			req.Scratch = &sc
			got, changed, err := s.Mutate(req)
			if encoded := sc.bufs[0] != nil; encoded == c.disjoint {
				t.Fatalf("the loop encoded the object: %v, want %v", encoded, !c.disjoint)
			}
			want, wantChanged, wantErr := slow.Mutate(c.req)
			if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("err = %v, the encoding loop's %v", err, wantErr)
			}
			if changed != wantChanged || changed != c.changed {
				t.Fatalf("changed = %v, the encoding loop's %v, want %v", changed, wantChanged, c.changed)
			}
			if changed {
				mustEqualJSON(t, got, string(want))
			}
		})
	}
}
