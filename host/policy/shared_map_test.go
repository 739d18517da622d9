package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// meshCluster answers the kubernetes host calls of the MutatingAdmissionPolicy
// built-in with fromCluster settings (testdata/cluster-settings.yml) as the
// host would for a cluster whose default namespace is in the mesh and whose
// mesh-config ConfigMap names image; it counts the calls it answered. With
// block set it answers nothing: it waits for the end of the call's context.
type meshCluster struct {
	image   string
	block   chan struct{} // closed when a blocked call started; nil: answer
	blocked sync.Once
	calls   atomic.Int64
}

func (c *meshCluster) handle(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
	c.calls.Add(1)
	if c.block != nil {
		c.blocked.Do(func() { close(c.block) })
		<-ctx.Done()
		return nil, ctx.Err()
	}
	var req struct {
		APIVersion string `json:"api_version"`
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		Namespace  string `json:"namespace"`
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, err
	}
	switch {
	case binding != "kubewarden" || namespace != "kubernetes":
		return nil, fmt.Errorf("unexpected host call %s/%s/%s", binding, namespace, operation)
	case operation == "can_i":
		return []byte(`{"allowed":false}`), nil
	case operation != "get_resource":
	case req.Kind == "Namespace" && req.Name == "default":
		return []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default","labels":{"mesh":"enabled","team":"payments"}}}`), nil
	case req.Kind == "ConfigMap" && req.Namespace == "":
		return nil, errors.New("Resource v1/ConfigMap is namespaced, but no namespace was provided")
	case req.Kind == "ConfigMap" && req.Name == "mesh-config" && req.Namespace == "default":
		return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mesh-config","namespace":"default"},"data":{"image":"` + c.image + `"}}`), nil
	}
	return nil, fmt.Errorf("Cannot find %s/%s named '%s' inside of namespace '%s'", req.APIVersion, req.Kind, req.Name, req.Namespace)
}

func mapSettings(t *testing.T, name string) json.RawMessage {
	t.Helper()
	j, err := yaml.YAMLToJSON(testfixture.File(t, "policies/mutating-admission-policy/testdata/"+name))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestSharedMAPPolicies runs MutatingAdmissionPolicy policies through the
// one pool their built-in module shares (two instances), concurrently: two
// with the same fromCluster settings but different clusters (host-call
// handlers), one with the sidecar settings. Each answer is byte for byte the
// answer of the same policy loaded with a pool of its own, the sidecar image
// each cluster names shows that host calls went to the evaluating policy's
// handler, a policy whose host call blocks past its deadline times out
// without failing the evaluations in flight beside it, and closing the
// policies one by one keeps the others working until the pool is released.
func TestSharedMAPPolicies(t *testing.T) {
	ctx := context.Background()
	// The default compilation cache: the 66 MB module compiles once per
	// machine, not once per run.
	h, err := policy.NewHost(ctx, policy.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	module := testfixture.Module(t, "policies/mutating-admission-policy")
	digest := wasm.Digest(module)
	clusterSettings, sidecarSettings := mapSettings(t, "cluster-settings.yml"), mapSettings(t, "sidecar-settings.yml")
	request := testfixture.File(t, "policies/mutating-admission-policy/testdata/pod-by-developer.json")
	// Deadlines long enough for a loaded machine under the race detector:
	// the test is about which answer each policy gets, not how fast.
	const slow = 2 * time.Minute
	loadMAP := func(id string, settings json.RawMessage, hc wasm.HostCallHandler, timeout time.Duration, share bool) *policy.Policy {
		t.Helper()
		p, err := h.Load(ctx, policy.Spec{
			ID: id, Module: module, Digest: digest, Settings: settings, Timeout: timeout,
			PoolSize: 2, HostCalls: hc, HostCallsInline: hc != nil, ShareInstances: share,
		})
		if err != nil {
			t.Fatalf("load %s: %v", id, err)
		}
		return p
	}
	clusterA, clusterB := &meshCluster{image: "mesh/proxy:cluster-a"}, &meshCluster{image: "mesh/proxy:cluster-b"}
	stuck := &meshCluster{block: make(chan struct{})}

	// The answers of policies with pools of their own.
	want := map[string][]byte{}
	for _, c := range []struct {
		id       string
		settings json.RawMessage
		hc       wasm.HostCallHandler
	}{
		{"a", clusterSettings, (&meshCluster{image: clusterA.image}).handle},
		{"b", clusterSettings, (&meshCluster{image: clusterB.image}).handle},
		{"sidecar", sidecarSettings, nil},
	} {
		p := loadMAP("own-"+c.id, c.settings, c.hc, slow, false)
		res, err := p.Validate(ctx, request)
		p.Close(ctx)
		if err != nil {
			t.Fatalf("own-%s: %v", c.id, err)
		}
		if !res.Response.Accepted || len(res.Patch) == 0 {
			t.Fatalf("own-%s: want a patch, got %+v", c.id, res.Response)
		}
		want[c.id] = res.Patch
	}
	for id, image := range map[string]string{"a": clusterA.image, "b": clusterB.image} {
		if !bytes.Contains(want[id], []byte(image)) {
			t.Fatalf("own-%s's patch does not carry its cluster's image %s: %s", id, image, want[id])
		}
	}

	a := loadMAP("map-a", clusterSettings, clusterA.handle, slow, true)
	b := loadMAP("map-b", clusterSettings, clusterB.handle, slow, true)
	sidecar := loadMAP("map-sidecar", sidecarSettings, nil, slow, true)
	timesOut := loadMAP("map-times-out", clusterSettings, stuck.handle, 5*time.Second, true)
	defer func() {
		for _, p := range []*policy.Policy{a, b, sidecar, timesOut} {
			p.Close(ctx)
		}
	}()
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools, want 1", n)
	}
	if live, size := a.Instances(); size != 2 || live > 2 {
		t.Fatalf("instances %d of %d, want at most 2 of 2 for four policies", live, size)
	}

	check := func(p *policy.Policy, id string) error {
		res, err := p.Validate(ctx, request)
		if err != nil {
			return fmt.Errorf("%s: %w", p.ID(), err)
		}
		if !res.Response.Accepted || !bytes.Equal(res.Patch, want[id]) {
			return fmt.Errorf("%s: accepted %v, patch\n%s\nwant the patch of own-%s\n%s", p.ID(), res.Response.Accepted, res.Patch, id, want[id])
		}
		return nil
	}
	timeoutErr := make(chan error, 1)
	go func() {
		_, err := timesOut.Validate(ctx, request)
		timeoutErr <- err
	}()
	select {
	case <-stuck.block: // map-times-out holds an instance, blocked in a host call
	case err := <-timeoutErr: // it timed out before its host call (a loaded machine)
		timeoutErr <- err
	}

	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for _, c := range []struct {
		p  *policy.Policy
		id string
	}{{a, "a"}, {b, "b"}, {sidecar, "sidecar"}, {a, "a"}, {b, "b"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				if err := check(c.p, c.id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	err = <-timeoutErr
	if !errors.Is(err, wasm.ErrTimeout) || !strings.Contains(err.Error(), "policy map-times-out:") {
		t.Fatalf("map-times-out: %v, want a timeout naming the policy", err)
	}
	if clusterA.calls.Load() == 0 || clusterB.calls.Load() == 0 {
		t.Fatalf("host calls: %d to map-a's cluster, %d to map-b's", clusterA.calls.Load(), clusterB.calls.Load())
	}
	for _, p := range []*policy.Policy{a, b, sidecar} {
		if err := check(p, strings.TrimPrefix(p.ID(), "map-")); err != nil {
			t.Fatalf("after the timeout: %v", err)
		}
	}

	// Closing policies one by one leaves the pool to the others.
	a.Close(ctx)
	timesOut.Close(ctx)
	if err := check(b, "b"); err != nil {
		t.Fatalf("after closing map-a: %v", err)
	}
	b.Close(ctx)
	if err := check(sidecar, "sidecar"); err != nil {
		t.Fatalf("after closing map-b: %v", err)
	}
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools with one policy left, want 1", n)
	}
	sidecar.Close(ctx)
	if n := h.SharedPools(); n != 0 {
		t.Fatalf("%d shared pools after closing every policy, want 0", n)
	}
	if n := h.Modules(); n != 0 {
		t.Fatalf("%d modules after closing every policy, want 0", n)
	}
}

// TestSharedGatekeeperMutationPolicies runs gatekeeper-mutation policies of
// three settings through the one pool their built-in module shares,
// concurrently: each answer is byte for byte the answer of the same policy
// loaded with a pool of its own, and carries its own settings' value.
func TestSharedGatekeeperMutationPolicies(t *testing.T) {
	h, _ := newHost(t)
	ctx := context.Background()
	module := testfixture.Module(t, "policies/gatekeeper-mutation")
	base := string(testfixture.File(t, "policies/gatekeeper-mutation/testdata/settings-bench.json"))
	request := testfixture.File(t, "test/testdata/reviews/pod.json")
	settingsOf := func(i int) json.RawMessage {
		return json.RawMessage(strings.ReplaceAll(base, `"tollgate"`, fmt.Sprintf(`"tollgate-%d"`, i)))
	}
	const n = 3
	var want [n][]byte
	var shared [n]*policy.Policy
	for i := 0; i < n; i++ {
		own := load(t, h, policy.Spec{ID: fmt.Sprintf("own-%d", i), Module: module, Settings: settingsOf(i), PoolSize: 2})
		res, err := own.Validate(ctx, request)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(res.Patch, []byte(fmt.Sprintf(`"tollgate-%d"`, i))) {
			t.Fatalf("own-%d: the patch lacks its settings' value: %s", i, res.Patch)
		}
		want[i] = res.Patch
		shared[i] = load(t, h, policy.Spec{ID: fmt.Sprintf("gk-%d", i), Module: module, Settings: settingsOf(i), PoolSize: 2, ShareInstances: true})
	}
	if n := h.SharedPools(); n != 1 {
		t.Fatalf("%d shared pools, want 1", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for round := 0; round < 2; round++ {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20; j++ {
					res, err := shared[i].Validate(ctx, request)
					if err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(res.Patch, want[i]) {
						errs <- fmt.Errorf("gk-%d: patch\n%s\nwant\n%s", i, res.Patch, want[i])
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
