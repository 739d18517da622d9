package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestJSONNotHTMLEscaped: run, bench -o json and inspect -o json write `<`,
// `>` and `&` as they are, as kwctl does (e2e tests written for kwctl grep
// for the literal text), not as Go's default \u003c, \u003e and \u0026.
func TestJSONNotHTMLEscaped(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	settings := write("settings.json", `{"required_labels":["a<b&c>"]}`)
	req := ex("wasi-required-labels/testdata/pod-missing-app.json")

	out, err := tollgate(t, "", "run", ex("wasi-required-labels/policy.wasm"), "-r", req, "-s", settings)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"uid":"d1563a31-00ca-5ced-9eeb-411d4d96dd59","allowed":false,"status":{"message":"bad lacks the required labels: a<b&c>"}}` + "\n"
	if out != want {
		t.Fatalf("run printed\n%q\nwant\n%q", out, want)
	}
	out, err = tollgate(t, "", "run", ex("wasi-required-labels/policy.wasm"), "-r", req, "-s", settings, "-o", "json")
	if err != nil || !strings.Contains(out, "\n  \"status\": {\n    \"message\": \"bad lacks the required labels: a<b&c>\"\n  }\n}\n") {
		t.Fatalf("run -o json: %v\n%s", err, out)
	}

	// bench -o json: the module's path is in the report.
	raw := testfixture.File(t, "examples/wasi-required-labels/policy.wasm")
	mod := write("x<&>.wasm", string(raw))
	out, err = tollgate(t, "", "bench", mod, "-r", req, "-s", settings, "--count", "3", "--warmup", "1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `x<&>.wasm"`) || strings.Contains(out, `\u00`) {
		t.Fatalf("bench -o json escapes the module path:\n%s", out)
	}

	// inspect -o json: metadata text.
	md := write("metadata.yml", "rules:\n- {apiGroups: [''], apiVersions: [v1], resources: [pods], operations: [CREATE]}\nmutating: false\nexecutionMode: wasi\n"+
		"annotations:\n  io.kubewarden.policy.description: \"existing ingress <foo.bar.com> & more\"\n")
	annotated := filepath.Join(dir, "annotated.wasm")
	if out, err := tollgate(t, "", "annotate", ex("wasi-required-labels/policy.raw.wasm"), "-m", md, "-o", annotated); err != nil {
		t.Fatalf("annotate: %v %s", err, out)
	}
	out, err = tollgate(t, "", "inspect", annotated, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"io.kubewarden.policy.description": "existing ingress <foo.bar.com> & more"`) {
		t.Fatalf("inspect -o json:\n%s", out)
	}
}
