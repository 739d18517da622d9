package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// wasmOptCase is one evaluation of an example that scripts/build-policies.sh
// also builds the way Kubewarden's CI does (wasm-opt.args: policy.opt.wasm).
type wasmOptCase struct {
	dir, request, settings string // settings: a file in testdata, or "" for none
}

var wasmOptCases = []wasmOptCase{
	// The standard-Go WASI example: go build -gcflags=all="-B " -ldflags="-w -s", wasm-opt --all-features -Oz.
	{"wasi-required-labels", "pod-missing-app.json", "settings.json"},
	{"wasi-required-labels", "pod-labelled.json", "settings.json"},
	// The standard-Go waPC example (c-shared), same flags.
	{"go-image-registries", "pod-denied.json", "settings.json"},
	{"go-image-registries", "pod-latest.json", "settings-always-pull.json"},
	{"go-image-registries", "pod-allowed.json", "settings.json"},
	// A TinyGo example (-target=wasi, as Kubewarden builds), through wasm-opt.
	{"capabilities-drop", "pod-adds-capabilities.json", ""},
	{"capabilities-drop", "pod-no-capabilities.json", ""},
	// The opa and gatekeeper execution modes (opa build -t wasm), through wasm-opt.
	{"opa-required-labels", "pod-labelled.json", "settings.json"},
	{"opa-required-labels", "pod-missing-owner.json", "settings.json"},
	{"gatekeeper-allowed-registries", "pod-allowed.json", "settings.json"},
	{"gatekeeper-allowed-registries", "pod-disallowed.json", "settings.json"},
}

// wasmOptExamples are the examples with a wasm-opt.args file, and the
// settings policies.yml gives each in the serve part of the test.
var wasmOptExamples = map[string]string{
	"wasi-required-labels": "settings.json", "go-image-registries": "settings.json", "capabilities-drop": "",
	"opa-required-labels": "settings.json", "gatekeeper-allowed-registries": "settings.json",
}

func (c wasmOptCase) args(module string) []string {
	a := []string{"run", ex(c.dir + "/" + module), "-r", ex(c.dir + "/testdata/" + c.request)}
	if c.settings != "" {
		a = append(a, "-s", ex(c.dir+"/testdata/"+c.settings))
	}
	return a
}

// TestWasmOptBuildsAnswerAlike: the wasm-opt --all-features -Oz builds
// (binaryen 116, typed function references in their code) give the same bytes
// as the plain builds in run, the same verdict in bench, and the same
// AdmissionReview from serve's webhook over HTTPS, in the four execution
// modes (kubewarden-wapc, wasi, opa, gatekeeper).
func TestWasmOptBuildsAnswerAlike(t *testing.T) {
	for dir := range wasmOptExamples {
		plain := testfixture.File(t, "examples/"+dir+"/policy.wasm")
		opt := testfixture.File(t, "examples/"+dir+"/policy.opt.wasm")
		if bytes.Equal(plain, opt) {
			t.Fatalf("%s: policy.opt.wasm is policy.wasm: not optimized", dir)
		}
	}

	for _, c := range wasmOptCases {
		want, err := tollgate(t, "", c.args("policy.wasm")...)
		if err != nil {
			t.Fatalf("%s %s: plain build: %v", c.dir, c.request, err)
		}
		got, err := tollgate(t, "", c.args("policy.opt.wasm")...)
		if err != nil {
			t.Fatalf("%s %s: wasm-opt build: %v", c.dir, c.request, err)
		}
		if got != want {
			t.Errorf("%s %s: run answers differ\nplain: %s\nopt:   %s", c.dir, c.request, want, got)
		}

		bench := func(module string) benchReport {
			t.Helper()
			a := append([]string{"bench"}, c.args(module)[1:]...)
			out, err := tollgate(t, "", append(a, "--count", "5", "--warmup", "1", "-o", "json")...)
			if err != nil {
				t.Fatalf("%s %s: bench %s: %v", c.dir, c.request, module, err)
			}
			var rep benchReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			return rep
		}
		bp, bo := bench("policy.wasm"), bench("policy.opt.wasm")
		if bp.Accepted != bo.Accepted || bp.Mutated != bo.Mutated || bp.Mode != bo.Mode || bo.Count != 5 {
			t.Errorf("%s %s: bench verdicts differ: plain %+v, opt %+v", c.dir, c.request, bp, bo)
		}
	}

	// serve: both builds of each example behind one webhook.
	dir := t.TempDir()
	var policies strings.Builder
	for d, settings := range wasmOptExamples {
		for _, m := range []string{"policy.wasm", "policy.opt.wasm"} {
			fmt.Fprintf(&policies, "%s-%s:\n  module: %s\n  allowedToMutate: true\n", d, strings.TrimSuffix(m, ".wasm"), ex(d+"/"+m))
			if settings != "" {
				fmt.Fprintf(&policies, "  settings: %s\n", testfixture.File(t, "examples/"+d+"/testdata/"+settings))
			}
		}
	}
	pp := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pp, []byte(policies.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	url, client := startServeTLS(t, dir, "--policies="+pp)
	for _, c := range wasmOptCases {
		if c.settings != wasmOptExamples[c.dir] {
			continue // one set of settings per policy in policies.yml
		}
		review := asReview(t, testfixture.File(t, "examples/"+c.dir+"/testdata/"+c.request))
		answer := func(policy string) string {
			resp, err := client.Post(url+"/validate/"+policy, "application/json", bytes.NewReader(review))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(b.String(), `"response"`) {
				t.Fatalf("/validate/%s: %d %s", policy, resp.StatusCode, b.String())
			}
			return b.String()
		}
		want, got := answer(c.dir+"-policy"), answer(c.dir+"-policy.opt")
		if got != want {
			t.Errorf("%s %s: serve answers differ\nplain: %s\nopt:   %s", c.dir, c.request, want, got)
		}
	}
}

// asReview wraps an AdmissionRequest in an AdmissionReview (a review is kept as it is).
func asReview(t *testing.T, b []byte) []byte {
	t.Helper()
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		t.Fatal(err)
	}
	if _, ok := probe["request"]; ok {
		return b
	}
	return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + string(b) + `}`)
}

// TestRunNamesUnsupportedProposal: a WASI command that uses the gc proposal is refused naming
// it, not with wazero's decoder message.
func TestRunNamesUnsupportedProposal(t *testing.T) {
	sec := func(id byte, p ...byte) []byte { return append([]byte{id, byte(len(p))}, p...) }
	mod := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	mod = append(mod, sec(1, 2, 0x60, 0, 0, 0x5f, 0)...) // () -> () and a gc struct type
	mod = append(mod, sec(3, 1, 0)...)
	mod = append(mod, sec(5, 1, 0, 1)...)
	mod = append(mod, sec(7, 2, 6, '_', 's', 't', 'a', 'r', 't', 0, 0, 6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0)...)
	mod = append(mod, sec(10, 1, 2, 0, 0x0b)...)
	path := filepath.Join(t.TempDir(), "gc.wasm")
	if err := os.WriteFile(path, mod, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tollgate(t, "", "run", "-e", "wasi", path, "-r", ex("wasi-required-labels/testdata/pod-labelled.json"))
	if err == nil || !strings.Contains(err.Error(), "module uses the gc proposal, which tollgate's engine does not support") {
		t.Fatalf("err = %v", err)
	}
}
