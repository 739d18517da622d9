package server

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

// HostLoader.HostCalls gets each policy's and group member's id and
// contextAwareResources, and its handler answers the guest's host calls.
func TestHostLoaderHostCalls(t *testing.T) {
	mod := wasmPath(t, "test/testdata/policies/misbehave")
	settings := `{"behaviour":"hostcall","namespace":"kubernetes","operation":"get_resource","payload":{"api_version":"v1","kind":"Namespace","name":"a","disable_cache":false}}`
	yml := "ca:\n  module: file://" + mod + "\n  settings: " + settings + "\n  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n" +
		"plain:\n  module: file://" + mod + "\n  settings: " + settings + "\n  hostCapabilities: [oci/*, net/*]\n" +
		"g:\n  expression: m()\n  message: no\n  policies:\n    m:\n      module: file://" + mod + "\n      settings: " + settings +
		"\n      contextAwareResources: [{apiVersion: apps/v1, kind: Deployment}]\n"
	pols, _, err := config.ParsePolicies("policies.yml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	o := config.Defaults()
	cfg := &config.Config{Options: o, Policies: pols}

	var mu sync.Mutex
	seen := map[string]string{}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: cacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	loader := &HostLoader{Host: h, Resolver: ResolverFunc(func(ctx context.Context, uri string) ([]byte, error) {
		return os.ReadFile(strings.TrimPrefix(uri, "file://"))
	})}
	loader.HostCalls = func(id string, res []config.ContextAwareResource, caps []string) (wasm.HostCallHandler, error) {
		var names []string
		for _, r := range res {
			names = append(names, r.APIVersion+"/"+r.Kind)
		}
		if caps != nil {
			names = append(names, "caps="+strings.Join(caps, "+"))
		}
		mu.Lock()
		seen[id] = strings.Join(names, ",")
		mu.Unlock()
		return func(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
			return []byte(`{"answer-for":"` + id + `"}`), nil
		}, nil
	}
	var logs bytes.Buffer
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "tollgate_capability_test_total", Help: "test"})
	srv, err := New(context.Background(), Options{Config: cfg, Loader: loader, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Metrics: []prometheus.Collector{extra}, RetryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	want := map[string]string{"ca": "v1/Namespace", "plain": "caps=oci/*+net/*", "g/m": "apps/v1/Deployment"}
	for id, w := range want {
		if got, ok := seen[id]; !ok || got != w {
			t.Errorf("HostCalls(%q) got resources %q (called: %v), want %q", id, got, ok, w)
		}
	}
	if strings.Contains(logs.String(), "not served by this server yet") {
		t.Errorf("warned that contextAwareResources are not served:\n%s", logs.String())
	}
	set := srv.acquire()
	defer set.release()
	req, err := admission.ParseReview(reviewFor("uid-1", "CREATE", "default", pod(nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := set.entries["ca"].unit.eval.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if m := *res.Response.Message; m != `host answered: {"answer-for":"ca"}` {
		t.Errorf("message %q", m)
	}
	mfs, err := srv.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "tollgate_capability_test_total"
	}
	if !found {
		t.Error("Options.Metrics are not registered")
	}
}

// policies.yml hostCapabilities reach host/capabilities: a granted
// capability is answered, another is denied with Kubewarden's text, and a bad
// pattern fails that policy's load only.
func TestHostCapabilitiesFromPoliciesYML(t *testing.T) {
	mod := wasmPath(t, "test/testdata/policies/misbehave")
	dns := `{"behaviour":"hostcall","namespace":"net","operation":"v1/dns_lookup_host","payload":"localhost"}`
	crypto := `{"behaviour":"hostcall","namespace":"crypto","operation":"v1/is_certificate_trusted","payload":{"cert":{"encoding":"Pem","data":[]}}}`
	yml := "dns:\n  module: file://" + mod + "\n  settings: " + dns + "\n  hostCapabilities: [net/*]\n" +
		"crypto:\n  module: file://" + mod + "\n  settings: " + crypto + "\n  hostCapabilities: [net/*]\n" +
		"bad:\n  module: file://" + mod + "\n  settings: " + dns + "\n  hostCapabilities: [net]\n"
	pols, _, err := config.ParsePolicies("policies.yml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: cacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(context.Background())
	caps := capabilities.New(capabilities.Options{})
	loader := &HostLoader{Host: h, Resolver: ResolverFunc(func(ctx context.Context, uri string) ([]byte, error) {
		return os.ReadFile(strings.TrimPrefix(uri, "file://"))
	}), HostCalls: func(id string, _ []config.ContextAwareResource, patterns []string) (wasm.HostCallHandler, error) {
		return caps.ForPolicy(id, capabilities.Allow{HostCapabilities: patterns})
	}}
	srv, err := New(context.Background(), Options{Config: &config.Config{Options: config.Defaults(), Policies: pols}, Loader: loader, RetryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	set := srv.acquire()
	defer set.release()
	if err := set.entries["bad"].err; err == nil || !strings.Contains(err.Error(), "invalid hostCapabilities pattern for policy bad") {
		t.Fatalf("bad pattern: %v", err)
	}
	req, err := admission.ParseReview(reviewFor("uid-1", "CREATE", "default", pod(nil)))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"dns":    `host answered: {"ips":[`,
		"crypto": "host call failed: Host error: Policy has not been granted access to the 'crypto/v1/is_certificate_trusted' host capability. The violation has been reported.",
	} {
		res, err := set.entries[id].unit.eval.Evaluate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if m := *res.Response.Message; !strings.HasPrefix(m, want) {
			t.Errorf("%s: message %q, want %q...", id, m, want)
		}
	}
}
