package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestEntryWrittenAndRead: what MarshalPolicies writes, ParsePolicies reads
// back to the same policy; the presence rules of Entry hold (an empty list
// is written, a nil one is not; a group's message always is); HTML
// characters are escaped only by an escaping encoder.
func TestEntryWrittenAndRead(t *testing.T) {
	yes, timeout := true, int32(3)
	entries := map[string]Entry{
		"p": {NamespacedName: &NamespacedName{Namespace: "ns", Name: "p"}, Module: "registry://r/p:v1", PolicyMode: ModeMonitor,
			AllowedToMutate: &yes, Settings: json.RawMessage(`{"expr":"a && b < c"}`), ContextAwareResources: []ContextAwareResource{},
			HostCapabilities: []string{}, TimeoutEvalSeconds: &timeout},
		"g": {Expression: "a()", Policies: map[string]Entry{"a": {Module: "builtin://x", HostCapabilities: []string{"*"}}}},
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
        "hostCapabilities": [
          "*"
        ],
        "module": "builtin://x"
      }
    }
  },
  "p": {
    "allowedToMutate": true,
    "contextAwareResources": [],
    "hostCapabilities": [],
    "module": "registry://r/p:v1",
    "namespacedName": {
      "Name": "p",
      "Namespace": "ns"
    },
    "policyMode": "monitor",
    "settings": {
      "expr": "a \u0026\u0026 b \u003c c"
    },
    "timeoutEvalSeconds": 3
  }
}
`
	if string(b) != want {
		t.Fatalf("written:\n%s\nwant:\n%s", b, want)
	}
	pols, _, err := ParsePolicies("p.yml", b)
	if err != nil || len(pols) != 2 {
		t.Fatalf("read back: %v %v", pols, err)
	}
	p := pols[1]
	if p.ID != "p" || p.Mode != ModeMonitor || !p.AllowedToMutate || p.HostCapabilities == nil || len(p.HostCapabilities) != 0 ||
		p.Timeout.Seconds() != 3 || !sameJSON(p.Settings, `{"expr":"a && b < c"}`) {
		t.Fatalf("read back %+v", p)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(entries["p"]); err != nil || !strings.Contains(buf.String(), `"a && b < c"`) {
		t.Fatalf("not escaping: %s %v", buf.String(), err)
	}
}

// TestSourcesWrittenAndRead: MarshalSources writes what ParseSources reads.
func TestSourcesWrittenAndRead(t *testing.T) {
	pemData := "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	in := Sources{InsecureSources: []string{"a:5000", "b"}, SourceAuthorities: map[string][]Certificate{
		"r:5500": {{Data: []byte(pemData)}, {Path: "/etc/ca.pem"}}}}
	b, err := MarshalSources(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseSources("s.yml", b)
	if err != nil {
		t.Fatal(err)
	}
	certs := out.SourceAuthorities["r:5500"]
	if strings.Join(out.InsecureSources, ",") != "a:5000,b" || len(certs) != 2 || string(certs[0].Data) != pemData || certs[1].Path != "/etc/ca.pem" {
		t.Fatalf("read back %+v from\n%s", out, b)
	}
	if b, _ := MarshalSources(Sources{}); string(b) != "{\n  \"insecure_sources\": [],\n  \"source_authorities\": {}\n}\n" {
		t.Fatalf("empty: %s", b)
	}
}

func sameJSON(a []byte, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && fmtJSON(x) == fmtJSON(y)
}

func fmtJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
