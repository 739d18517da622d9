package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

const podApply = `"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}]`

func assign(name, location, params string, extra ...string) string {
	ex := ""
	if len(extra) > 0 {
		ex = "," + strings.Join(extra, ",")
	}
	return `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"` + name + `"},"spec":{` +
		podApply + `,"location":` + q(location) + `,"parameters":` + params + ex + `}}`
}

func q(s string) string { return string(fastjson.AppendQuoteMinimal(nil, s)) }

func settings(ms ...string) []byte {
	return []byte(`{"mutators":[` + strings.Join(ms, ",") + `]}`)
}

const pod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"web"}},"spec":{"replicas":1,"containers":[{"name":"a","image":"nginx:1","ports":[{"containerPort":80}]},{"name":"b","image":"busybox"}]}}`

func mustEqualJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	g, err := jsonv.Parse(got, jsonv.IntsPreserved)
	if err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, got)
	}
	w, err := jsonv.Parse([]byte(want), jsonv.IntsPreserved)
	if err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if !jsonv.SameJSON(g, w) {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestMutate(t *testing.T) {
	podReq := func(obj string) Request {
		return Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: "default", Name: "p", Object: []byte(obj)}
	}
	tests := []struct {
		name     string
		mutators []string
		req      Request
		want     string // "" = unchanged
		wantErr  string
	}{
		{
			name:     "assign glob sets every container",
			mutators: []string{assign("pull", "spec.containers[name: *].imagePullPolicy", `{"assign":{"value":"Always"}}`)},
			req:      podReq(pod),
			want:     strings.Replace(strings.Replace(pod, `"image":"nginx:1",`, `"image":"nginx:1","imagePullPolicy":"Always",`, 1), `"image":"busybox"`, `"image":"busybox","imagePullPolicy":"Always"`, 1),
		},
		{
			name:     "assign keyed element missing is appended",
			mutators: []string{assign("side", "spec.containers[name: c].image", `{"assign":{"value":"x"}}`)},
			req:      podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[]}}`),
			want:     `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}}`,
		},
		{
			name:     "glob never creates (not even the empty list)",
			mutators: []string{assign("g", "spec.containers[name: *].image", `{"assign":{"value":"x"}}`)},
			req:      podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`),
		},
		{
			name:     "same value is no change",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":1}}`)},
			req:      podReq(pod),
		},
		{
			name:     "pathTests MustNotExist skips",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3},"pathTests":[{"subPath":"spec.replicas","condition":"MustNotExist"}]}`)},
			req:      podReq(pod),
		},
		{
			name:     "pathTests MustExist skips when missing",
			mutators: []string{assign("r", "spec.foo.bar", `{"assign":{"value":3},"pathTests":[{"subPath":"spec.foo","condition":"MustExist"}]}`)},
			req:      podReq(pod),
		},
		{
			name:     "shape mismatch is an error",
			mutators: []string{assign("bad", "spec.containers.image", `{"assign":{"value":"x"}}`)},
			req:      podReq(pod),
			wantErr:  "mismatch between path entry (type: object) and received object (type: []interface {})",
		},
		{
			name:     "fromMetadata namespace",
			mutators: []string{assign("ns", "spec.ns", `{"assign":{"fromMetadata":{"field":"namespace"}}}`)},
			req:      podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`),
			want:     `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"ns":"default"}}`,
		},
		{
			name: "assignmetadata adds only",
			mutators: []string{`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata","metadata":{"name":"l"},"spec":{"location":"metadata.labels.app","parameters":{"assign":{"value":"other"}}}}`,
				`{"apiVersion":"mutations.gatekeeper.sh/v1beta1","kind":"AssignMetadata","metadata":{"name":"m"},"spec":{"location":"metadata.annotations.\"example.com/x\"","parameters":{"assign":{"value":"y"}}}}`},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"web"}}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"app":"web"},"annotations":{"example.com/x":"y"}}}`,
		},
		{
			name: "modifyset prune leaves empty list",
			mutators: []string{`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"s"},"spec":{` + podApply +
				`,"location":"spec.args","parameters":{"operation":"prune","values":{"fromList":["a",1]}}}}`},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"args":["a",1.0]}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"args":[1]}}`,
		},
		{
			name: "modifyset merge appends missing",
			mutators: []string{`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"s"},"spec":{` + podApply +
				`,"location":"spec.args","parameters":{"values":{"fromList":["a","b",2]}}}}`},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"args":["b",2]}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"args":["b",2,"a"]}}`,
		},
		{
			name: "assignimage",
			mutators: []string{`{"apiVersion":"mutations.gatekeeper.sh/v1alpha1","kind":"AssignImage","metadata":{"name":"i"},"spec":{` + podApply +
				`,"location":"spec.containers[name:*].image","parameters":{"assignDomain":"my.io:5000","assignTag":":v2"}}}`},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"localhost:1/x/y@sha256:abc"}]}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a","image":"my.io:5000/x/y:v2"}]}}`,
		},
		{
			name: "merge then prune converges on an empty list",
			mutators: []string{`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"add"},"spec":{` + podApply +
				`,"location":"spec.args","parameters":{"values":{"fromList":["x"]}}}}`,
				`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"rm"},"spec":{` + podApply +
					`,"location":"spec.args","parameters":{"operation":"prune","values":{"fromList":["x"]}}}}`},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"args":[]}}`,
		},
		{
			name:     "DELETE is not mutated",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`)},
			req:      Request{Operation: "DELETE", Kind: GVK{"", "v1", "Pod"}, Object: []byte(pod)},
		},
		{
			name:     "gatekeeper service account untouched",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`)},
			req:      Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Username: GatekeeperServiceAccount, Object: []byte(pod)},
		},
		{
			name:     "applyTo version must match the object",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`)},
			req:      podReq(strings.Replace(pod, `"apiVersion":"v1"`, `"apiVersion":"v2"`, 1)),
		},
		{
			name: "schema conflict disables both, others apply",
			mutators: []string{assign("a", "spec.containers[name: x].image", `{"assign":{"value":"i"}}`),
				assign("b", "spec.containers[image: y].name", `{"assign":{"value":"n"}}`),
				assign("c", "spec.other", `{"assign":{"value":"o"}}`)},
			req:  podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`),
			want: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"other":"o"}}`,
		},
		{
			name:     "namespace restored, not patched",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`)},
			req:      Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: "ns1", Object: []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{}}`)},
			want:     `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"replicas":3}}`,
		},
		{
			name:     "namespaces glob excludes",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`, `"match":{"excludedNamespaces":["kube-*"]}`)},
			req:      Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: "kube-system", Object: []byte(pod)},
		},
		{
			name:     "invalid label selector fails the request",
			mutators: []string{assign("r", "spec.replicas", `{"assign":{"value":3}}`, `"match":{"labelSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}`)},
			req:      podReq(pod),
			wantErr:  "failed to run Match criteria",
		},
		{
			name:     "name glob on generateName",
			mutators: []string{assign("r", "spec.x", `{"assign":{"value":3}}`, `"match":{"name":"web-*"}`)},
			req:      podReq(`{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"web-"},"spec":{}}`),
			want:     `{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"web-"},"spec":{"x":3}}`,
		},
		{
			name:     "object without kind",
			mutators: []string{assign("r", "spec.x", `{"assign":{"value":3}}`)},
			req:      podReq(`{"apiVersion":"v1","metadata":{}}`),
			wantErr:  "Object 'Kind' is missing",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile(settings(tc.mutators...))
			if err != nil {
				t.Fatal(err)
			}
			got, changed, err := s.Mutate(tc.req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if changed {
					t.Fatalf("changed: %s", got)
				}
				return
			}
			if !changed {
				t.Fatal("not changed")
			}
			mustEqualJSON(t, got, tc.want)
		})
	}
}

func TestCompileRefuses(t *testing.T) {
	tests := []struct{ name, mutator, want string }{
		{"metadata root", assign("m", "metadata.labels.x", `{"assign":{"value":"x"}}`), "can't change metadata"},
		{"trailing dot", assign("m", "spec.x.", `{"assign":{"value":"x"}}`), "trailing separators are forbidden"},
		{"glob last", assign("m", "spec.containers[name: *]", `{"assign":{"value":{"name":"x"}}}`), "can't append to a globbed list"},
		{"list without name", assign("m", "[name: x]", `{"assign":{"value":"x"}}`), "expected field name or eof"},
		{"two lists", assign("m", "spec.c[name: x][name: y]", `{"assign":{"value":"x"}}`), "unexpected token"},
		{"bare glob", assign("m", "spec.c[*]", `{"assign":{"value":"x"}}`), "expected keyField"},
		{"key change", assign("m", "spec.c[name: x].name", `{"assign":{"value":"x"}}`), "changing the item key is not allowed"},
		{"no value", assign("m", "spec.x", `{"assign":{}}`), "assign must set one of"},
		{"external data", assign("m", "spec.x", `{"assign":{"externalData":{"provider":"p"}}}`), "externalData is not supported"},
		{"bad fromMetadata", assign("m", "spec.x", `{"assign":{"fromMetadata":{"field":"uid"}}}`), "field uid is not recognized"},
		{"condition enum", assign("m", "spec.x", `{"assign":{"value":1},"pathTests":[{"subPath":"spec","condition":"Maybe"}]}`), "Unsupported value"},
		{"must after mustnot", assign("m", "spec.x.y", `{"assign":{"value":1},"pathTests":[{"subPath":"spec.x","condition":"MustNotExist"},{"subPath":"spec","condition":"MustExist"}]}`), "conflicting path test conditions"},
		{"subpath not prefix", assign("m", "spec.x", `{"assign":{"value":1},"pathTests":[{"subPath":"status","condition":"MustExist"}]}`), "not a prefix"},
		{"missing applyTo", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"m"},"spec":{"location":"spec.x","parameters":{"assign":{"value":1}}}}`, "applyTo required for Assign mutator m"},
		{"assignimage v1", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignImage","metadata":{"name":"m"},"spec":{}}`, "not served in version"},
		{"unknown kind", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignAll","metadata":{"name":"m"}}`, "unknown mutator kind"},
		{"assignmetadata non-string", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata","metadata":{"name":"m"},"spec":{"location":"metadata.labels.a","parameters":{"assign":{"value":1}}}}`, "must be a string"},
		{"assignmetadata spec path", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata","metadata":{"name":"m"},"spec":{"location":"spec.a","parameters":{"assign":{"value":"1"}}}}`, "invalid location for assignmetadata"},
		{"modifyset keyed", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"m"},"spec":{` + podApply + `,"location":"spec.c[name: x]"}}`, "cannot be a keyed list"},
		{"image bad tag", `{"apiVersion":"mutations.gatekeeper.sh/v1alpha1","kind":"AssignImage","metadata":{"name":"m"},"spec":{` + podApply + `,"location":"spec.image","parameters":{"assignTag":"latest"}}}`, "must be a valid docker image tag"},
		{"image domain-like path", `{"apiVersion":"mutations.gatekeeper.sh/v1alpha1","kind":"AssignImage","metadata":{"name":"m"},"spec":{` + podApply + `,"location":"spec.image","parameters":{"assignPath":"a.b/c"}}}`, "assignDomain must be set"},
		{"operation DELETE", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"m"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"],"operations":["DELETE"]}],"location":"spec.x","parameters":{"assign":{"value":1}}}}`, "Unsupported value"},
		{"namespace pattern", assign("m", "spec.x", `{"assign":{"value":1}}`, `"match":{"namespaces":["Kube"]}`), "should match"},
		{"long name", assign(strings.Repeat("a", 64), "spec.x", `{"assign":{"value":1}}`), "maximum name length is 63 characters"},
		{"int key object", assign("m", "spec.ports[port: 80]", `{"assign":{"value":{"port":80}}}`), "adding object to list with different key"},
		{"location type", `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"m"},"spec":{` + podApply + `,"location":5}}`, "spec.location"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(settings(tc.mutator))
			if err == nil || !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "mutators[0]") {
				t.Fatalf("err does not name the mutator: %v", err)
			}
		})
	}
}

// version moves apiVersion from one version of Pod to another.
func version(name, from, to string) string {
	return `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"` + name + `"},"spec":{` +
		`"applyTo":[{"groups":[""],"versions":["` + from + `"],"kinds":["Pod"]}],"location":"apiVersion","parameters":{"assign":{"value":"` + to + `"}}}}`
}

// TestNotConverging: a mutator set whose iterations alternate between two
// objects: a (v2->v3), b (v1->v2), c (v3->v1) turn v1 into v2 and v2 into v1.
func TestNotConverging(t *testing.T) {
	s, err := Compile(settings(version("a", "v2", "v3"), version("b", "v1", "v2"), version("c", "v3", "v1")))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Mutate(Request{Operation: "CREATE", Kind: GVK{"", "v1", "Pod"}, Namespace: "ns", Object: []byte(pod)})
	if !errors.Is(err, ErrNotConverging) || !strings.Contains(err.Error(), "Assign/a, Assign/c") ||
		!strings.Contains(err.Error(), "after 4 iterations") {
		t.Fatalf("err = %v", err)
	}
}
