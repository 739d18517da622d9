package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestSharedInstancesAcrossReloads: policies whose module the loader marks
// as sharing instances (HostLoader.ShareInstances, here the misbehave module,
// which keeps no state between calls) draw from one pool per grants
// (contextAwareResources, hostCapabilities); a reload that
// changes one of them replaces that policy only, the pool staying with the
// policy the reload reused; a reload that drops them all releases the pool
// and the module once the old set drained.
func TestSharedInstancesAcrossReloads(t *testing.T) {
	l := newTestLoader(t)
	misbehave := wasmPath(t, "test/testdata/policies/misbehave")
	shareable := wasm.Digest(testfixture.Module(t, "test/testdata/policies/misbehave"))
	l.host.ShareInstances = func(digest string) bool { return digest == shareable }
	host := l.host.Host
	entry := func(id, behaviour string) string {
		return fmt.Sprintf("%s:\n  module: %s\n  settings: {behaviour: %s}\n", id, misbehave, behaviour)
	}
	labels := fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n", wasmPath(t, "examples/required-labels"))
	granted := entry("granted", "accept") + "  contextAwareResources: [{apiVersion: v1, kind: Namespace}]\n"
	h := start(t, harnessOpts{policies: entry("first", "accept") + entry("second", "log") + granted + labels, loader: l})
	allowed := func(id string) {
		t.Helper()
		if _, r := h.review("/validate/"+id, reviewFor(id, "CREATE", "default", pod(map[string]string{"owner": "x"}))); !r.Allowed {
			t.Fatalf("%s: not allowed: %+v", id, r.Status)
		}
	}
	allowed("first")
	allowed("second")
	allowed("labels")
	allowed("granted")
	if n := host.SharedPools(); n != 2 {
		t.Fatalf("%d shared pools, want 2 (first and second; granted, whose grants differ; labels has a pool of its own)", n)
	}
	loads := l.loads.Load()

	// first now traps: it is loaded again, second is reused, the pool stays.
	writeFile(t, h.pfile, entry("first", "trap")+entry("second", "log")+granted+labels)
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	if n := l.loads.Load() - loads; n != 1 {
		t.Fatalf("%d policies loaded by the reload, want 1 (first)", n)
	}
	for i := 0; i < 3; i++ {
		_, r := h.review("/validate/first", reviewFor("first", "CREATE", "default", pod(nil)))
		if r.Allowed || r.Status == nil || !strings.Contains(r.Status.Message, "trapped") {
			t.Fatalf("first after the reload: %+v", r.Status)
		}
		allowed("second")
	}
	if n := host.SharedPools(); n != 2 {
		t.Fatalf("%d shared pools after reloading one of their policies, want 2", n)
	}

	// Neither left: the pool and the module go once the old set drained.
	writeFile(t, h.pfile, labels)
	if err := h.srv.Reload(context.Background(), "test", false); err != nil {
		t.Fatal(err)
	}
	allowed("labels")
	deadline := time.Now().Add(10 * time.Second)
	for host.SharedPools() != 0 || host.Modules() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d shared pools and %d modules with only labels loaded, want 0 and 1", host.SharedPools(), host.Modules())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
