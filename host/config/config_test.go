package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParsePoliciesFixture(t *testing.T) {
	data, err := os.ReadFile("testdata/policies.yml")
	if err != nil {
		t.Fatal(err)
	}
	pols, warns, err := ParsePolicies("policies.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Errorf("warnings: %v", warns)
	}
	var ids []string
	for _, p := range pols {
		ids = append(ids, p.ID)
	}
	if got := strings.Join(ids, ","); got != "group-policy,namespace-validate,no-settings,psp-capabilities" {
		t.Fatalf("ids = %s", got)
	}
	g, ns, none, psp := pols[0], pols[1], pols[2], pols[3]
	if !psp.AllowedToMutate || psp.Mode != ModeProtect || string(psp.Settings) != `{"allowed_capabilities":["CHOWN"],"required_drop_capabilities":["NET_ADMIN"]}` {
		t.Errorf("psp = %+v settings %s", psp, psp.Settings)
	}
	if ns.Mode != ModeMonitor || ns.Timeout != 5*time.Second || ns.Message != "namespace is not allowed" ||
		len(ns.ContextAwareResources) != 1 || ns.ContextAwareResources[0] != (ContextAwareResource{"v1", "Namespace"}) {
		t.Errorf("ns = %+v", ns)
	}
	if want := `{"count":3,"nested":{"a":[1,true,"x"]},"nothing":null,"ratio":0.5,"valid_namespace":"valid"}`; string(ns.Settings) != want {
		t.Errorf("ns settings = %s, want %s", ns.Settings, want)
	}
	if string(none.Settings) != "{}" || none.IsGroup() {
		t.Errorf("no-settings = %+v", none)
	}
	if !g.IsGroup() || g.Group.Expr == nil || len(g.Group.Members) != 3 || g.Group.Members[0].Name != "reject_latest" ||
		g.Group.Members[1].Timeout != 3*time.Second || g.Message != "the image is not signed" {
		t.Errorf("group = %+v", g.Group)
	}
}

func TestParsePoliciesErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // substrings that must all appear
	}{
		{"syntax", "a: [", []string{"p.yml", "malformed YAML"}},
		{"top level list", "- a", []string{"p.yml:1", "top level must be a map"}},
		{"slash in id", "a/b: {module: x}", []string{`"a/b"`, "must not contain '/'"}},
		{"dot id", "'.': {module: x}", []string{"p.yml:1", `policy "."`, "field id", `must not be "." or ".."`}},
		{"dot-dot id", "'..': {module: x}", []string{"p.yml:1", `policy ".."`, "field id", "could never be reached"}},
		{"space in id", "'a b': {module: x}", []string{`policy "a b"`, "URL path segment", `not ' '`}},
		{"percent in id", "a%41: {module: x}", []string{`policy "a%41"`, "URL path segment", `not '%'`}},
		{"query in id", "'a?b': {module: x}", []string{`policy "a?b"`, `not '?'`}},
		{"fragment in id", "'a#b': {module: x}", []string{`policy "a#b"`, `not '#'`}},
		{"newline in id", "\"a\\nb\": {module: x}", []string{"URL path segment", `not '\n'`}},
		{"non-ASCII id", "é: {module: x}", []string{"URL path segment", `not 'é'`}},
		{"missing module", "a: {settings: {}}", []string{`policy "a"`, "field module", "missing"}},
		{"bad mode", "a: {module: x, policyMode: audit}", []string{`policy "a"`, "field policyMode", `value "audit"`, "protect or monitor"}},
		{"bad mutate", "a: {module: x, allowedToMutate: yes please}", []string{"field allowedToMutate", `"yes please"`}},
		{"bad timeout", "a: {module: x, timeoutEvalSeconds: -1}", []string{"field timeoutEvalSeconds", `"-1"`}},
		{"string timeout", "a: {module: x, timeoutEvalSeconds: soon}", []string{"field timeoutEvalSeconds", `"soon"`}},
		{"settings list", "a: {module: x, settings: [1]}", []string{"field settings", "must be a map"}},
		{"settings inf", "a: {module: x, settings: {v: .inf}}", []string{"field settings", "no JSON representation"}},
		{"bad resources", "a: {module: x, contextAwareResources: [{kind: Pod}]}", []string{"contextAwareResources[0]", "apiVersion and kind"}},
		{"group without expression", "g: {policies: {a: {module: x}}}", []string{`policy "g"`, "field expression", "missing"}},
		{"group bad expression", "g: {expression: 'a() &&', policies: {a: {module: x}}}", []string{"field expression", `"a() &&"`, "unexpected end"}},
		{"group unknown member", "g: {expression: 'a() || b()', policies: {a: {module: x}}}", []string{"calls b()"}},
		{"group member mutates", "g: {expression: 'a()', policies: {a: {module: x, allowedToMutate: true}}}", []string{`member "a"`, "field allowedToMutate", "groups do not mutate"}},
		{"group with module", "g: {module: x, expression: 'a()', policies: {a: {module: x}}}", []string{"not `module`"}},
		{"group bad member name", "g: {expression: 'a()', policies: {a-b: {module: x}, a: {module: y}}}", []string{`"a-b"`, "identifier"}},
		{"two errors reported", "a: {policyMode: x}\nb: {module: ''}", []string{`policy "a"`, `policy "b"`, "must not be empty"}},
		{"duplicate id", "a: {module: x}\na: {module: y}", []string{"duplicate policy id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pols, _, err := ParsePolicies("p.yml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error; policies %+v", pols)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrSyntax) {
				t.Errorf("error %v wraps neither ErrInvalid nor ErrSyntax", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParsePoliciesWarnings(t *testing.T) {
	_, warns, err := ParsePolicies("p.yml", []byte("a: {module: x, frobnicate: 1}\ng: {expression: 'b()', policies: {b: {module: x}, c: {module: y}}}"))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(warns, "\n")
	if !strings.Contains(all, `unknown field "frobnicate"`) || !strings.Contains(all, `member "c": member is not used`) {
		t.Fatalf("warnings = %s", all)
	}
}

// TestParsePoliciesEmpty: an empty policies.yml (what a watcher reads between an editor's
// truncation and its write) is an error naming the file; `{}` is the file of no policies.
// Before, an empty file parsed as no policies, and a reload adopted it.
func TestParsePoliciesEmpty(t *testing.T) {
	for _, in := range []string{"", "\n \n", "# nothing\n", "~", "null\n", "---\n"} {
		pols, _, err := ParsePolicies("p.yml", []byte(in))
		if !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), "p.yml: ") || !strings.Contains(err.Error(), "{}") || pols != nil {
			t.Errorf("%q: %v %v, want ErrEmpty", in, pols, err)
		}
	}
	for _, in := range []string{"{}", "{}\n# none yet\n"} {
		pols, _, err := ParsePolicies("p.yml", []byte(in))
		if err != nil || len(pols) != 0 {
			t.Errorf("%q: %v %v, want no policies", in, pols, err)
		}
	}
}

// TestParseSourcesEmpty: an empty sources.yml is an error naming the file, not "no sources"
// (which dropped every CA and insecure source of a file caught half-written); `{}` is none.
func TestParseSourcesEmpty(t *testing.T) {
	for _, in := range []string{"", "# none\n", "~\n"} {
		if _, err := ParseSources("s.yml", []byte(in)); !errors.Is(err, ErrEmptySources) || !strings.Contains(err.Error(), "s.yml: ") {
			t.Errorf("%q: %v, want ErrEmptySources", in, err)
		}
	}
	if src, err := ParseSources("s.yml", []byte("{}")); err != nil || len(src.InsecureSources) != 0 {
		t.Errorf("{}: %+v %v", src, err)
	}
}

func TestAliasBomb(t *testing.T) {
	y := `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
`
	_, _, err := ParsePolicies("p.yml", []byte("p:\n  module: x\n  settings:\n"+indent(y)))
	if err == nil {
		t.Fatal("alias bomb accepted")
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

func TestParseSources(t *testing.T) {
	src, err := ParseSources("s.yml", []byte(`
insecure_sources: ["localhost:5000", "registry.local"]
source_authorities:
  "registry.example.com:5500":
    - type: Path
      path: /opt/ca.pem
    - type: Data
      data: |
        -----BEGIN CERTIFICATE-----
        MIIB
        -----END CERTIFICATE-----
    - /opt/other.pem
`))
	if err != nil {
		t.Fatal(err)
	}
	certs := src.SourceAuthorities["registry.example.com:5500"]
	if len(src.InsecureSources) != 2 || len(certs) != 3 || certs[0].Path != "/opt/ca.pem" || !strings.Contains(string(certs[1].Data), "MIIB") || certs[2].Path != "/opt/other.pem" {
		t.Fatalf("sources = %+v", src)
	}
	for _, bad := range []struct{ in, want string }{
		{"insecure_sources: localhost", "insecure_sources"},
		{"source_authorities: {h: [{type: Blob}]}", `field source_authorities.h[0].type: value "Blob"`},
		{"source_authorities: {h: [{type: Data, data: nope}]}", "PEM"},
		{"registries: []", "unknown field"},
	} {
		if _, err := ParseSources("s.yml", []byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err %v, want %q", bad.in, err, bad.want)
		}
	}
}

func TestPrecedence(t *testing.T) {
	newFS := func() (*Options, *pflag.FlagSet) {
		o := Defaults()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		o.AddFlags(fs)
		return &o, fs
	}
	file := []byte("port: 4000\nworkers: 3\npolicy-timeout: 7s\nlog-level: debug\n")
	env := map[string]string{"TOLLGATE_WORKERS": "5", "TOLLGATE_POLICY_TIMEOUT": "9s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	o, fs := newFS()
	if err := fs.Parse([]string{"--policy-timeout=1s"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplySources(fs, lookup, "server.yml", file); err != nil {
		t.Fatal(err)
	}
	// flag > env > file > default
	if o.PolicyTimeout != time.Second || o.Workers != 5 || o.Port != 4000 || o.LogLevel != "debug" || o.ReadinessProbePort != 8081 {
		t.Fatalf("options = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}

	_, fs = newFS()
	err := ApplySources(fs, func(string) (string, bool) { return "", false }, "server.yml", []byte("prot: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "server.yml: field prot") {
		t.Fatalf("unknown option: %v", err)
	}
	_, fs = newFS()
	err = ApplySources(fs, func(k string) (string, bool) { return "many", k == "TOLLGATE_WORKERS" }, "", nil)
	if err == nil || !strings.Contains(err.Error(), `TOLLGATE_WORKERS: value "many"`) {
		t.Fatalf("bad env: %v", err)
	}
}

func TestValidateOptions(t *testing.T) {
	o := Defaults()
	o.Workers = 0
	o.CertFile = "c.pem"
	o.LogFmt = "xml"
	o.PoliciesEndpoint = "everywhere"
	err := o.Validate()
	for _, w := range []string{"--workers=0", "--cert-file=c.pem", "--log-fmt=xml", "--policies-endpoint=everywhere: invalid configuration: must be probe, webhook or off"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not name %s", err, w)
		}
	}
}

func TestLoad(t *testing.T) {
	o := Defaults()
	o.PoliciesPath = "testdata/policies.yml"
	cfg, err := Load(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfg.Policy("no-settings"); !ok || p.Module != "https://example.com/policy.wasm" || cfg.Embedded {
		t.Fatalf("cfg %+v", cfg)
	}
	o.PoliciesPath = ""
	cfg, err = Load(o, []byte("x: {module: builtin://x}"))
	if err != nil || !cfg.Embedded || len(cfg.Policies) != 1 {
		t.Fatalf("embedded: %+v %v", cfg, err)
	}
	o.PoliciesPath = "testdata/missing.yml"
	if _, err := Load(o, nil); err == nil || !strings.Contains(err.Error(), "missing.yml") {
		t.Fatalf("missing file: %v", err)
	}
}

func FuzzParsePolicies(f *testing.F) {
	seed, _ := os.ReadFile("testdata/policies.yml")
	f.Add(seed)
	f.Add([]byte("a: {module: x, settings: {k: [1, 2.5, null, true, {x: y}]}}"))
	f.Add([]byte("g: {expression: 'a() && !b()', policies: {a: {module: x}, b: {module: y}}}"))
	f.Add([]byte("a: &x {module: m}\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pols, _, err := ParsePolicies("fuzz.yml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrSyntax) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		for _, p := range pols {
			if p.ID == "" || strings.Contains(p.ID, "/") {
				t.Fatalf("bad id %q", p.ID)
			}
			if len(p.Settings) == 0 || p.Settings[0] != '{' {
				t.Fatalf("settings not an object: %s", p.Settings)
			}
			if p.IsGroup() == (p.Module != "") {
				t.Fatalf("policy %q: group=%v module=%q", p.ID, p.IsGroup(), p.Module)
			}
		}
	})
}

func FuzzParseSources(f *testing.F) {
	f.Add([]byte("insecure_sources: [a]\nsource_authorities: {h: [{type: Path, path: /x}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseSources("fuzz.yml", data)
	})
}

// TestParsePoliciesIDsAsPathSegments: every character a path segment holds
// unescaped is accepted in an id, dots included when the id is more than "."
// or "..".
func TestParsePoliciesIDsAsPathSegments(t *testing.T) {
	ids := []string{"a.b", "...", ".hidden", "Pod_Privileged-v1~2", "a:b@c", "!$&()*+,;="}
	var doc strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&doc, "%q: {module: x}\n", id)
	}
	pols, _, err := ParsePolicies("p.yml", []byte(doc.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(pols) != len(ids) {
		t.Fatalf("%d policies, want %d", len(pols), len(ids))
	}
}
