package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/oci/ocitest"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestRunRego runs the OPA and Gatekeeper examples (executionMode opa and
// gatekeeper in their metadata) and the misbehaving fixture through run,
// bench, annotate and inspect.
func TestRunRego(t *testing.T) {
	opaMod, gkMod := ex("opa-required-labels/policy.wasm"), ex("gatekeeper-allowed-registries/policy.wasm")
	opaSettings, gkSettings := ex("opa-required-labels/testdata/settings.json"), ex("gatekeeper-allowed-registries/testdata/settings.json")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"opa accepts", []string{opaMod, "-r", ex("opa-required-labels/testdata/pod-labelled.json"), "-s", opaSettings}, `{"uid":"d1563a31-00ca-5ced-9eeb-411d4d96dd59","allowed":true}`},
		{"opa rejects", []string{opaMod, "-r", ex("opa-required-labels/testdata/pod-missing-owner.json"), "-s", opaSettings}, `"allowed":false,"status":{"message":"Pod shop/bad: mandatory label \"owner\" is missing"}`},
		{"opa -e", []string{opaMod, "-e", "opa", "-r", ex("opa-required-labels/testdata/pod-labelled.json"), "--settings-json", `{"labels":["nope"]}`}, `"allowed":false`},
		{"gatekeeper accepts", []string{gkMod, "-r", ex("gatekeeper-allowed-registries/testdata/pod-allowed.json"), "-s", gkSettings}, `"allowed":true`},
		{"gatekeeper rejects", []string{gkMod, "-r", ex("gatekeeper-allowed-registries/testdata/pod-disallowed.json"), "-s", gkSettings}, `uses the tag latest`},
		{"gatekeeper raw", []string{gkMod, "--raw", "-r", ex("gatekeeper-allowed-registries/testdata/pod-allowed.json")}, `"status":{"message":"Gatekeeper does not support raw validation requests","code":500}`},
		{"bare module with -e", []string{ex("opa-required-labels/policy.raw.wasm"), "-e", "opa", "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, `"allowed":true`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tollgate(t, "", append([]string{"run"}, tt.args...)...)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("%v\n%s\nwant %s", err, out, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"bare module", []string{ex("opa-required-labels/policy.raw.wasm"), "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, "give the execution mode (-e opa or -e gatekeeper)"},
		{"contradiction", []string{opaMod, "-e", "gatekeeper", "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, "(gatekeeper) is different from the one reported inside of the policy's metadata (opa)"},
		{"missing builtins", []string{testfixture.Path("test/testdata/policies/opa-missing-builtin/policy.wasm"), "-e", "opa", "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, `needs builtins tollgate does not offer: ["net.lookup_ip_addr" "time.date" "time.parse_rfc3339_ns"]`},
		{"endless", []string{testfixture.Path("test/testdata/policies/opa-misbehave/policy.wasm"), "-e", "opa", "--timeout", "300ms", "--settings-json", `{"behaviour":"endless"}`, "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, "timed out"},
		{"abort", []string{testfixture.Path("test/testdata/policies/opa-misbehave/policy.wasm"), "-e", "opa", "--settings-json", `{"behaviour":"conflict"}`, "-r", ex("opa-required-labels/testdata/pod-labelled.json")}, "opa_abort"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tollgate(t, "", append([]string{"run"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %s", err, tt.want)
			}
		})
	}

	annotated := filepath.Join(t.TempDir(), "policy.wasm")
	if out, err := tollgate(t, "", "annotate", ex("gatekeeper-allowed-registries/policy.raw.wasm"), "-m", ex("gatekeeper-allowed-registries/metadata.yml"), "-o", annotated); err != nil {
		t.Fatalf("annotate: %v %s", err, out)
	}
	out, err := tollgate(t, "", "inspect", annotated)
	if err != nil || !strings.Contains(out, "Execution mode:          gatekeeper") || !strings.Contains(out, "Protocol version:        Unknown") {
		t.Fatalf("inspect: %v %s", err, out)
	}
	for _, mod := range []string{opaMod, gkMod} {
		settings := opaSettings
		if mod == gkMod {
			settings = gkSettings
		}
		out, err = tollgate(t, "", "bench", mod, "-r", testfixture.Path("test/testdata/reviews/pod.json"), "-s", settings, "--count", "20", "--warmup", "2")
		if err != nil || !strings.Contains(out, "p50:") || strings.Contains(out, "start:") {
			t.Fatalf("bench %s: %v %s", mod, err, out)
		}
	}
}

// TestRegoOCIRoundTrip pushes the annotated Rego examples to a registry and
// runs them from there: they are ordinary Kubewarden artifacts.
func TestRegoOCIRoundTrip(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{TLS: true, Auth: true})
	dir := t.TempDir()
	common := []string{"--store-path", filepath.Join(dir, "store"), "--sources-path", reg.SourcesPath, "--docker-config-json-path", reg.DockerConfigPath}
	for _, tt := range []struct{ example, request, settings, want string }{
		{"opa-required-labels", "pod-missing-owner.json", "settings.json", "mandatory label"},
		{"gatekeeper-allowed-registries", "pod-disallowed.json", "settings.json", "uses the tag latest"},
	} {
		module := testfixture.Path("examples/" + tt.example + "/policy.wasm")
		wasm := testfixture.File(t, "examples/"+tt.example+"/policy.wasm")
		uri := reg.URI("rego/" + tt.example + ":v1")
		mustExecute(t, append([]string{"push", module, uri}, common...)...)
		pulled := filepath.Join(dir, tt.example+".wasm")
		mustExecute(t, append([]string{"pull", uri, "-o", pulled}, common...)...)
		if b, err := os.ReadFile(pulled); err != nil || !bytes.Equal(b, wasm) {
			t.Fatalf("%s: pulled %d bytes (%v), want the pushed module", tt.example, len(b), err)
		}
		root := ociRoot()
		root.AddCommand(newRunCmd())
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"run", uri,
			"-r", testfixture.Path("examples/" + tt.example + "/testdata/" + tt.request),
			"-s", testfixture.Path("examples/" + tt.example + "/testdata/" + tt.settings)}, common...))
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("run %s: %v\n%s", uri, err, errOut.String())
		}
		if !strings.Contains(out.String(), `"allowed":false`) || !strings.Contains(out.String(), tt.want) {
			t.Fatalf("run %s printed %s", uri, out.String())
		}
	}
}

// TestRunRegoContextAware: the context-aware Rego example gets its
// data.kubernetes from a replayed session (recorded by test/e2e against a
// real kube-apiserver) with --allow-context-aware, and no cluster data
// without it; bench replays the session for every evaluation; bench -e runs
// a bare Rego module.
func TestRunRegoContextAware(t *testing.T) {
	mod, req := ex("opa-unique-ingress-host/policy.wasm"), ex("opa-unique-ingress-host/testdata/ingress-web.json")
	conflict, free := ex("opa-unique-ingress-host/testdata/session-conflict.yml"), ex("opa-unique-ingress-host/testdata/session-free.yml")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"conflict", []string{"--allow-context-aware", "--replay-host-capabilities-interactions", conflict},
			`"allowed":false,"status":{"message":"Ingress opa-shop/web: host \"shop.example.org\" is already used by Ingress opa-team-b/storefront","code":409}`},
		{"free", []string{"--allow-context-aware", "--replay-host-capabilities-interactions", free}, `"allowed":true`},
		{"not allowed: no cluster data", []string{"--replay-host-capabilities-interactions", conflict}, `"allowed":true`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tollgate(t, "", append([]string{"run", mod, "-r", req}, tt.args...)...)
			if err != nil || !strings.Contains(out, tt.want) {
				t.Fatalf("%v\n%s\nwant %s", err, out, tt.want)
			}
		})
	}
	out, err := tollgate(t, "", "bench", mod, "-r", req, "--allow-context-aware", "--replay-host-capabilities-interactions", conflict, "--count", "20", "--warmup", "2", "-o", "json")
	if err != nil || !strings.Contains(out, `"p50`) {
		t.Fatalf("bench with a replayed session: %v %s", err, out)
	}
	out, err = tollgate(t, "", "bench", ex("gatekeeper-allowed-registries/policy.raw.wasm"), "-e", "gatekeeper", "-r", testfixture.Path("test/testdata/reviews/pod.json"),
		"-s", ex("gatekeeper-allowed-registries/testdata/settings.json"), "--count", "20", "--warmup", "2")
	if err != nil || !strings.Contains(out, "p50:") {
		t.Fatalf("bench -e gatekeeper of a bare module: %v %s", err, out)
	}
	if _, err := tollgate(t, "", "bench", ex("gatekeeper-allowed-registries/policy.raw.wasm"), "-r", testfixture.Path("test/testdata/reviews/pod.json"), "--count", "2"); err == nil ||
		!strings.Contains(err.Error(), "give the execution mode") {
		t.Fatalf("bench of a bare Rego module without -e: %v", err)
	}
}
