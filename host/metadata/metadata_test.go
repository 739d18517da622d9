package metadata

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

const good = `
rules:
- apiGroups: [""]
  apiVersions: ["v1"]
  resources: ["pods"]
  operations: ["CREATE", "UPDATE"]
mutating: true
contextAware: false
executionMode: kubewarden-wapc
annotations:
  io.kubewarden.policy.title: capabilities-drop
  io.kubewarden.policy.source: https://example.com/src
`

func emptyModule() []byte { return append([]byte{}, wasmbin.Magic...) }

// parse decodes and validates a metadata.yml: Decode, then Validate.
func parse(name string, data []byte) (*Metadata, error) {
	m, err := Decode(name, data)
	if err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

func TestAnnotateReadRoundTrip(t *testing.T) {
	md, err := parse("metadata.yml", []byte("protocolVersion: v1\n"+good))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Annotate(emptyModule(), md, "# Usage\nhello")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(out)
	if err != nil || got == nil {
		t.Fatalf("Read: %v %v", got, err)
	}
	if !got.Mutating || got.Title() != "capabilities-drop" || got.Annotations[AnnotationUsage] != "# Usage\nhello" {
		t.Fatalf("round trip lost fields: %+v", got)
	}
	if got.ContextAware == nil || *got.ContextAware {
		t.Fatalf("legacy contextAware must round-trip: %+v", got.ContextAware)
	}
	if !got.BackgroundAuditEnabled() || got.Mode() != ExecutionModeWapc || got.IsRaw() {
		t.Fatalf("defaults: %+v", got)
	}
	// Annotating again replaces the section rather than adding a second one.
	again, err := Annotate(out, md, "")
	if err != nil {
		t.Fatal(err)
	}
	secs, _ := wasmbin.Sections(again)
	if len(secs) != 1 {
		t.Fatalf("want one custom section, got %d", len(secs))
	}
}

func TestReadUnannotated(t *testing.T) {
	md, err := Read(emptyModule())
	if err != nil || md != nil {
		t.Fatalf("want nil metadata and no error, got %v %v", md, err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no protocol version", good, `protocolVersion: must be "v1"`},
		{"unknown field", "protocolVersion: v1\nmutatin: true\n", `unknown field "mutatin"`},
		{"bad operation", "protocolVersion: v1\nrules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [PATCH]}\n", `rules[0].operations: unknown operation "PATCH"`},
		{"star with others", "protocolVersion: v1\nrules:\n- {apiGroups: ['*', apps], apiVersions: [v1], resources: [pods], operations: [CREATE]}\n", `rules[0].apiGroups: no other value`},
		{"empty list", "protocolVersion: v1\nrules:\n- {apiGroups: [], apiVersions: [v1], resources: [pods], operations: [CREATE]}\n", `rules[0].apiGroups: must not be empty`},
		{"bad mode", "protocolVersion: v1\nexecutionMode: rust\n", `executionMode: unknown value "rust"`},
		{"bad policy type", "protocolVersion: v1\npolicyType: weird\n", `policyType: unknown value "weird"`},
		{"not yaml", "protocolVersion: [", "metadata.yml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse("metadata.yml", []byte(tt.in))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "metadata.yml") {
				t.Fatalf("want ErrInvalid naming the file and %q, got %v", tt.want, err)
			}
		})
	}
}

func TestReadCorruptSection(t *testing.T) {
	m, _ := wasmbin.SetCustomSection(emptyModule(), SectionName, []byte("{not json"))
	if _, err := Read(m); !errors.Is(err, ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("protocolVersion: v1\n" + good))
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := parse("f", b)
		if err == nil {
			if _, err := Annotate(emptyModule(), md, ""); err != nil {
				t.Fatalf("valid metadata does not annotate: %v", err)
			}
		}
	})
}
