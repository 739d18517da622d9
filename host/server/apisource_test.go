package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/server/status"
)

// fakeAPI is an APISource fed by the test: each value of updates is
// delivered as content, each value of errs as a watch error.
type fakeAPI struct {
	updates chan string
	errs    chan error
	stopped chan struct{}
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{updates: make(chan string), errs: make(chan error), stopped: make(chan struct{})}
}

func (f *fakeAPI) source(ctx context.Context, sink APISink) {
	defer close(f.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-f.updates:
			sink.Update([]byte(u))
		case err := <-f.errs:
			sink.WatchError(err)
		}
	}
}

// waitDigest waits until /policies shows want as configDigest and none of
// its policies is still loading (a configuration's digest shows as soon as
// its load starts; until each policy's load ended, its previous version
// answers).
func waitDigest(t *testing.T, h *harness, want, what string) status.Policies {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pl := h.policies()
		if pl.ConfigDigest == want && !anyLoading(pl) {
			return pl
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /policies shows %s, want %s (last reload %+v)", what, pl.ConfigDigest, want, pl.LastReload)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// anyLoading reports whether a policy of pl is still loading.
func anyLoading(pl status.Policies) bool {
	for _, p := range pl.Policies {
		if p.Loading || p.State == status.StateLoading {
			return true
		}
	}
	return false
}

func metricValue(t *testing.T, h *harness, name string) string {
	t.Helper()
	_, body := h.get("/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}

// TestAPISourceReload: with Options.API the file serves at start; content
// from the API reloads at once (trigger configmap, its digest served); from
// then on a file event or a forced reload never goes back to the file's
// older content; a broken content from the API is rejected whole like a
// broken file; watch errors are counted and keep the content serving; the
// source stops with the server.
func TestAPISourceReload(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	file := func(label string) string {
		return fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [%s]}\n", labels, label)
	}
	api := newFakeAPI()
	h := start(t, harnessOpts{policies: file("owner"), volume: true, watch: true, api: api.source})
	waitDigest(t, h, status.Digest([]byte(file("owner"))), "start (the file)")
	ownerOnly := reviewFor("owner", "CREATE", "default", pod(map[string]string{"owner": "x"}))

	api.errs <- errors.New("connection refused")
	if v := metricValue(t, h, "tollgate_config_api_watch_errors_total"); v != "1" {
		t.Fatalf("watch errors %s", v)
	}
	if !strings.Contains(h.logs.String(), "connection refused") {
		t.Fatal("the watch error is not logged")
	}

	// the API delivers newer content than the file
	api.updates <- file("team")
	pl := waitDigest(t, h, status.Digest([]byte(file("team"))), "API content")
	if !pl.LastReload.OK || pl.LastReload.Trigger != TriggerAPI {
		t.Fatalf("last reload %+v", pl.LastReload)
	}
	if _, r := h.review("/validate/labels", ownerOnly); r.Allowed {
		t.Fatal("the API's settings (mandatory label team) do not decide")
	}
	// the same content again reloads nothing
	gen := metricValue(t, h, "tollgate_config_generation")
	api.updates <- file("team")
	time.Sleep(100 * time.Millisecond)
	if g := metricValue(t, h, "tollgate_config_generation"); g != gen {
		t.Fatalf("an unchanged content reloaded: generation %s -> %s", gen, g)
	}

	// the kubelet catches up later, with content older than the API's
	api.updates <- file("owner2")
	waitDigest(t, h, status.Digest([]byte(file("owner2"))), "second API content")
	h.volume.write(map[string]string{"policies.yml": file("team")})
	deadline := time.Now().Add(3 * time.Second)
	for h.policies().LastReload.Trigger != "file" {
		if time.Now().After(deadline) {
			t.Fatal("no file reload after the volume update")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := h.srv.Reload(context.Background(), "SIGHUP", true); err != nil {
		t.Fatal(err)
	}
	if pl := h.policies(); pl.ConfigDigest != status.Digest([]byte(file("owner2"))) || !pl.LastReload.OK {
		t.Fatalf("a file event or SIGHUP went back to the file's older content: %+v", pl)
	}

	// broken content from the API is rejected whole; the last good one serves
	api.updates <- "labels: [not a policy"
	deadline = time.Now().Add(3 * time.Second)
	for h.policies().LastReload.OK {
		if time.Now().After(deadline) {
			t.Fatal("broken API content not rejected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pl = h.policies()
	if pl.ConfigDigest != status.Digest([]byte(file("owner2"))) || pl.LastReload.Trigger != TriggerAPI ||
		pl.LastReload.Digest != status.Digest([]byte("labels: [not a policy")) {
		t.Fatalf("after broken API content: %+v", pl)
	}
	if v := metricValue(t, h, "tollgate_config_api_updates_total"); v != "4" {
		t.Fatalf("API updates %s, want 4", v)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-api.stopped:
	case <-time.After(time.Minute):
		t.Fatal("the API source did not stop with the server")
	}
}

// TestAPISourceNeedsParse: API without ParseAPI is refused.
func TestAPISourceNeedsParse(t *testing.T) {
	if _, err := New(context.Background(), Options{Config: nil}); err == nil {
		t.Fatal("no Config accepted")
	}
	h := start(t, harnessOpts{policies: "{}\n", noStart: true})
	o := h.srv.o
	o.API, o.ParseAPI = newFakeAPI().source, nil
	if _, err := New(context.Background(), o); err == nil || !strings.Contains(err.Error(), "ParseAPI") {
		t.Fatalf("API without ParseAPI: %v", err)
	}
}
