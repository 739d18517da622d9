package demo

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed policies.yml
var policiesYAML []byte

//go:embed modules
var modules embed.FS

// ErrNotBuilt: the binary was built without the example modules.
var ErrNotBuilt = errors.New("the example policies were not embedded in this binary (build with `make build`, which runs `make policies demo-modules` first)")

// Prefix is the builtin:// name prefix of the embedded examples.
const Prefix = "examples/"

// Policies is the embedded default policies.yml.
func Policies() []byte { return policiesYAML }

// Module returns an embedded example module by builtin name, e.g.
// "examples/capabilities-drop".
func Module(name string) ([]byte, error) {
	base, ok := strings.CutPrefix(name, Prefix)
	if !ok || base == "" || strings.ContainsAny(base, "/\\.") {
		return nil, fmt.Errorf("no embedded module %q (embedded: %s)", name, strings.Join(Names(), ", "))
	}
	b, err := modules.ReadFile("modules/" + base + ".wasm")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("builtin://%s: %w", name, ErrNotBuilt)
	}
	return b, err
}

// Names lists the embedded modules.
func Names() []string {
	entries, _ := modules.ReadDir("modules")
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".wasm"); ok {
			out = append(out, Prefix+n)
		}
	}
	sort.Strings(out)
	return out
}

// Request is a sample request for `tollgate serve --demo`.
type Request struct {
	Title  string
	Path   string
	Body   string
	Expect string
}

// Requests are the sample requests, one per example policy.
func Requests() []Request {
	return []Request{
		{Title: "a Pod without an owner label", Path: "/validate/required-labels", Expect: "rejected",
			Body: review("demo-1", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"app":"nginx"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}`)},
		{Title: "a Pod that adds NET_ADMIN", Path: "/validate/capabilities-drop", Expect: "mutated (BPF dropped)",
			Body: review("demo-2", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"owner":"me"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.27","securityContext":{"capabilities":{"add":["NET_ADMIN"]}}}]}}`)},
		{Title: "a raw request by alice", Path: "/validate_raw/raw-validation", Expect: "accepted",
			Body: `{"request":{"user":"alice","action":"delete","resource":"pods/nginx"}}`},
	}
}

func review(uid, object string) string {
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + uid +
		`","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
		`"name":"nginx","namespace":"default","operation":"CREATE","userInfo":{"username":"demo"},"object":` + object + `}}`
}
