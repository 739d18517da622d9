package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestRunWasi runs the standard-Go WASI example (executionMode wasi in its
// metadata) and the misbehaving fixture through run and bench.
func TestRunWasi(t *testing.T) {
	mod := ex("wasi-required-labels/policy.wasm")
	settings := ex("wasi-required-labels/testdata/settings.json")
	out, err := tollgate(t, "", "run", mod, "-r", ex("wasi-required-labels/testdata/pod-labelled.json"), "-s", settings)
	if err != nil || !strings.Contains(out, `"allowed":true`) {
		t.Fatalf("accept: %v %s", err, out)
	}
	out, err = tollgate(t, "", "run", mod, "-e", "wasi", "-r", ex("wasi-required-labels/testdata/pod-missing-app.json"), "-s", settings)
	if err != nil || !strings.Contains(out, `"allowed":false`) || !strings.Contains(out, "bad lacks the required labels: app") {
		t.Fatalf("reject: %v %s", err, out)
	}
	_, err = tollgate(t, "", "run", mod, "-r", ex("wasi-required-labels/testdata/pod-labelled.json"), "-s", ex("wasi-required-labels/testdata/settings-empty.json"))
	if err == nil || !strings.Contains(err.Error(), "required_labels must list at least one label") {
		t.Fatalf("bad settings: %v", err)
	}
	_, err = tollgate(t, "", "run", mod, "--execution-mode", "kubewarden-wapc", "-r", ex("wasi-required-labels/testdata/pod-labelled.json"), "-s", settings)
	if err == nil || !strings.Contains(err.Error(), "different from the one reported inside of the policy's metadata (wasi)") {
		t.Fatalf("contradiction: %v", err)
	}
	_, err = tollgate(t, "", "run", mod, "-e", "gatekeeper", "-r", ex("wasi-required-labels/testdata/pod-labelled.json"), "-s", settings)
	if err == nil || !strings.Contains(err.Error(), "(gatekeeper) is different") {
		t.Fatalf("gatekeeper: %v", err)
	}

	bad := testfixture.Path("test/testdata/policies/wasi-misbehave/policy.wasm")
	req := ex("wasi-required-labels/testdata/pod-labelled.json")
	out, err = tollgate(t, "", "run", bad, "-r", req, "--settings-json", `{"behaviour":"panic"}`)
	if err != nil || !strings.Contains(out, `"code":500`) || !strings.Contains(out, "assignment to entry in nil map") {
		t.Fatalf("panic: %v %s", err, out)
	}
	_, err = tollgate(t, "", "run", bad, "-r", req, "--timeout", "300ms", "--settings-json", `{"behaviour":"loop"}`)
	if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Fatalf("loop: %v", err)
	}
	_, err = tollgate(t, "", "run", bad, "-r", req, "--settings-json", `{"behaviour":"big"}`)
	if err == nil || !strings.Contains(err.Error(), "output exceeds its limit") {
		t.Fatalf("big: %v", err)
	}

	annotated := filepath.Join(t.TempDir(), "policy.wasm")
	if out, err := tollgate(t, "", "annotate", ex("wasi-required-labels/policy.raw.wasm"), "-m", ex("wasi-required-labels/metadata.yml"), "-o", annotated); err != nil {
		t.Fatalf("annotate: %v %s", err, out)
	}
	out, err = tollgate(t, "", "inspect", annotated)
	if err != nil || !strings.Contains(out, "Execution mode:          wasi") || !strings.Contains(out, "Protocol version:        Unknown") {
		t.Fatalf("inspect: %v %s", err, out)
	}

	out, err = tollgate(t, "", "bench", mod, "-r", req, "-s", settings, "--count", "20", "--warmup", "2")
	if err != nil || !strings.Contains(out, "accepted=true") || !strings.Contains(out, "start:") {
		t.Fatalf("bench: %v %s", err, out)
	}
}
