package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestShadowParsed: a policy's shadow takes module and/or settings, a
// group's expression and/or members; what it omits is the serving version's.
func TestShadowParsed(t *testing.T) {
	pols, warns, err := ParsePolicies("p.yml", []byte(`
both:
  module: registry://r/p:v1
  settings: {labels: [owner]}
  shadow:
    module: registry://r/p:v2
    settings: {labels: [owner, cost-center]}
settings-only:
  module: registry://r/p:v1
  policyMode: monitor
  settings: {labels: [owner]}
  timeoutEvalSeconds: 2
  shadow:
    settings: {labels: [owner, cost-center]}
module-only:
  module: registry://r/p:v1
  settings: {labels: [owner]}
  shadow: {module: registry://r/p:v2}
none:
  module: registry://r/p:v1
  shadow: null
g:
  expression: a() && b()
  hostCapabilities: ["oci/*"]
  policies:
    a: {module: builtin://a, settings: {x: 1}}
    b: {module: builtin://b}
  shadow:
    expression: a() && c()
    policies:
      a: {settings: {x: 2}}
      c: {module: builtin://c}
`))
	if err != nil || len(warns) != 0 {
		t.Fatalf("err %v, warnings %v", err, warns)
	}
	byID := map[string]Policy{}
	for _, p := range pols {
		byID[p.ID] = p
	}
	if sh := byID["both"].Shadow; sh == nil || sh.Module != "registry://r/p:v2" || string(sh.Settings) != `{"labels":["owner","cost-center"]}` {
		t.Errorf("both: %+v", sh)
	}
	so := byID["settings-only"]
	if sh := so.ShadowPolicy(); sh == nil || sh.Module != "registry://r/p:v1" || string(sh.Settings) != `{"labels":["owner","cost-center"]}` ||
		sh.Mode != ModeMonitor || sh.Timeout.Seconds() != 2 || sh.ID != "settings-only" || sh.Shadow != nil {
		t.Errorf("settings-only: %+v", sh)
	}
	if sh := byID["module-only"].Shadow; sh == nil || sh.Module != "registry://r/p:v2" || string(sh.Settings) != `{"labels":["owner"]}` {
		t.Errorf("module-only: %+v", sh)
	}
	none := byID["none"]
	if none.Shadow != nil || none.ShadowPolicy() != nil {
		t.Errorf("shadow: null gave %+v", byID["none"].Shadow)
	}
	g := byID["g"]
	if g.Group.Expression != "a() && b()" || len(g.Group.Members) != 2 || string(g.Group.Members[0].Settings) != `{"x":1}` {
		t.Fatalf("the serving group changed: %+v", g.Group)
	}
	sg := g.ShadowPolicy().Group
	if sg.Expression != "a() && c()" || sg.Expr == nil || len(sg.Members) != 3 {
		t.Fatalf("shadow group %+v", sg)
	}
	a, b, c := sg.Members[0], sg.Members[1], sg.Members[2]
	if a.Name != "a" || a.Module != "builtin://a" || string(a.Settings) != `{"x":2}` || strings.Join(a.HostCapabilities, ",") != "oci/*" {
		t.Errorf("shadow member a %+v", a)
	}
	if b.Name != "b" || b.Module != "builtin://b" || string(b.Settings) != "{}" {
		t.Errorf("shadow member b %+v", b)
	}
	if c.Name != "c" || c.Module != "builtin://c" || string(c.Settings) != "{}" || strings.Join(c.HostCapabilities, ",") != "oci/*" {
		t.Errorf("shadow member c %+v", c)
	}
}

// TestShadowErrors: each bad shadow is refused with the file, line, policy,
// field and value at fault.
func TestShadowErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "p:\n  module: x\n  shadow: {}", []string{"p.yml:3", `policy "p"`, "field shadow", "value <map>", "module and/or settings"}},
		{"scalar", "p:\n  module: x\n  shadow: v2", []string{"p.yml:3", "field shadow", `value "v2"`, "must be a map"}},
		{"empty module", "p:\n  module: x\n  shadow:\n    module: ''", []string{"p.yml:4", "field shadow.module", `value ""`, "must not be empty"}},
		{"module list", "p:\n  module: x\n  shadow:\n    module: [a]", []string{"p.yml:4", "field shadow.module", "value <list>", "must be a string"}},
		{"settings list", "p:\n  module: x\n  shadow:\n    settings: [1]", []string{"p.yml:4", "field shadow.settings", "value <list>", "must be a map"}},
		{"mode in shadow", "p:\n  module: x\n  shadow:\n    policyMode: monitor", []string{"p.yml:4", "field shadow.policyMode", "not allowed in a shadow"}},
		{"timeout in shadow", "p:\n  module: x\n  shadow: {module: y, timeoutEvalSeconds: 3}", []string{"p.yml:3", "field shadow.timeoutEvalSeconds", "not allowed"}},
		{"expression on a policy", "p:\n  module: x\n  shadow: {expression: a()}", []string{"field shadow.expression", "a policy's shadow has module and/or settings"}},
		{"module on a group", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow: {module: y}", []string{"p.yml:4", `policy "g"`, "field shadow.module", "expression and/or policies"}},
		{"group bad expression", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    expression: a() ||", []string{"p.yml:5", "field shadow.expression", `value "a() ||"`}},
		{"group expression calls a stranger", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    expression: a() && b()", []string{"p.yml:5", "field shadow.expression", "calls b()"}},
		{"new member without module", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    policies:\n      b: {settings: {x: 1}}", []string{"p.yml:6", `member "b"`, "field shadow.policies.b.module", "missing"}},
		{"member grants", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    policies:\n      a: {hostCapabilities: []}", []string{"p.yml:6", `member "a"`, "field shadow.policies.a.hostCapabilities", "not allowed in a shadow"}},
		{"member settings", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    policies:\n      a:\n        settings: 3", []string{"p.yml:7", `member "a"`, "field shadow.policies.a.settings", `value "3"`}},
		{"duplicate member", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    policies:\n      a: {module: y}\n      a: {module: z}", []string{"p.yml:7", "field shadow.policies", `value "a"`, "duplicate member"}},
		{"bad member name", "g:\n  expression: a()\n  policies: {a: {module: x}}\n  shadow:\n    policies:\n      a-b: {module: y}", []string{"p.yml:6", "field shadow.policies", `value "a-b"`, "identifier"}},
		{"reported with the serving errors", "p:\n  module: ''\n  shadow: {module: ''}", []string{"p.yml:2", "field module", "p.yml:3", "field shadow.module"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pols, _, err := ParsePolicies("p.yml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("no error; policies %+v", pols)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestShadowWarnings: an unknown field of a shadow is ignored with a warning
// naming the line, as elsewhere in the file.
func TestShadowWarnings(t *testing.T) {
	_, warns, err := ParsePolicies("p.yml", []byte("p:\n  module: x\n  shadow:\n    module: y\n    frobnicate: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(warns, "\n"); !strings.Contains(all, `p.yml:5: policy "p": unknown field "frobnicate" in shadow ignored`) {
		t.Fatalf("warnings = %s", all)
	}
}

// TestShadowWrittenAndRead: an Entry's Shadow is written with only what it
// gives and read back to the same candidate.
func TestShadowWrittenAndRead(t *testing.T) {
	entries := map[string]Entry{
		"p": {Module: "registry://r/p:v1", Settings: json.RawMessage(`{"labels":["owner"]}`),
			Shadow: &EntryShadow{Settings: json.RawMessage(`{"labels":["owner","cost-center"]}`)}},
		"m": {Module: "registry://r/p:v1", Shadow: &EntryShadow{Module: "registry://r/p:v2&<"}},
		"g": {Expression: "a()", Policies: map[string]Entry{"a": {Module: "builtin://x"}},
			Shadow: &EntryShadow{Expression: "a() && b()", Policies: map[string]EntryShadow{
				"a": {Settings: json.RawMessage(`{"x":1}`)}, "b": {Module: "builtin://y"}}}},
	}
	b, err := MarshalPolicies(entries)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "g": {
    "expression": "a()",
    "message": "",
    "policies": {
      "a": {
        "module": "builtin://x"
      }
    },
    "shadow": {
      "expression": "a() \u0026\u0026 b()",
      "policies": {
        "a": {
          "settings": {
            "x": 1
          }
        },
        "b": {
          "module": "builtin://y"
        }
      }
    }
  },
  "m": {
    "module": "registry://r/p:v1",
    "shadow": {
      "module": "registry://r/p:v2\u0026\u003c"
    }
  },
  "p": {
    "module": "registry://r/p:v1",
    "settings": {
      "labels": [
        "owner"
      ]
    },
    "shadow": {
      "settings": {
        "labels": [
          "owner",
          "cost-center"
        ]
      }
    }
  }
}
`
	if string(b) != want {
		t.Fatalf("written:\n%s\nwant:\n%s", b, want)
	}
	pols, warns, err := ParsePolicies("p.yml", b)
	if err != nil || len(warns) != 0 || len(pols) != 3 {
		t.Fatalf("read back: %v %v %v", pols, warns, err)
	}
	g, m, p := pols[0], pols[1], pols[2]
	if sg := g.ShadowPolicy().Group; sg.Expression != "a() && b()" || len(sg.Members) != 2 || string(sg.Members[0].Settings) != `{"x":1}` ||
		sg.Members[0].Module != "builtin://x" || sg.Members[1].Module != "builtin://y" {
		t.Errorf("group shadow read back %+v", sg)
	}
	if m.Shadow.Module != "registry://r/p:v2&<" || string(m.Shadow.Settings) != "{}" {
		t.Errorf("module shadow read back %+v", m.Shadow)
	}
	if p.Shadow.Module != "registry://r/p:v1" || string(p.Shadow.Settings) != `{"labels":["owner","cost-center"]}` {
		t.Errorf("settings shadow read back %+v", p.Shadow)
	}
}
