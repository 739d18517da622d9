package config

import (
	"errors"
	"strings"
	"testing"
)

func TestHostCapabilities(t *testing.T) {
	pols, warns, err := ParsePolicies("policies.yml", []byte(`
absent: {module: file:///a.wasm}
none: {module: file:///a.wasm, hostCapabilities: []}
null: {module: file:///a.wasm, hostCapabilities: null}
some: {module: file:///a.wasm, hostCapabilities: ["kubernetes/*", "net/v1/dns_lookup_host"]}
g:
  expression: a() && b()
  message: no
  hostCapabilities: ["oci/*"]
  policies:
    a: {module: file:///a.wasm}
    b: {module: file:///a.wasm, hostCapabilities: ["*"]}
`))
	if err != nil || len(warns) != 0 {
		t.Fatalf("%v %q", err, warns)
	}
	got := map[string][]string{}
	for _, p := range pols {
		if p.Group != nil {
			for _, m := range p.Group.Members {
				got[p.ID+"/"+m.Name] = m.HostCapabilities
			}
			continue
		}
		got[p.ID] = p.HostCapabilities
	}
	for id, want := range map[string]string{"absent": "<nil>", "null": "<nil>", "none": "", "some": "kubernetes/*,net/v1/dns_lookup_host", "g/a": "oci/*", "g/b": "*"} {
		s := "<nil>"
		if got[id] != nil {
			s = strings.Join(got[id], ",")
		}
		if s != want {
			t.Errorf("%s: hostCapabilities %q, want %q", id, s, want)
		}
	}
	_, _, err = ParsePolicies("policies.yml", []byte("p: {module: file:///a.wasm, hostCapabilities: \"*\"}\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hostCapabilities") {
		t.Fatalf("a string instead of a list: %v", err)
	}
}
