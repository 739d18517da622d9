package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// shadowTotals are a policy's shadow series on /metrics.
func shadowTotals(t *testing.T, h *harness, id string) (evaluations float64, divergences map[string]float64, dropped map[string]float64) {
	t.Helper()
	_, metrics := h.get("/metrics")
	evaluations = seriesValue(t, metrics, fmt.Sprintf(`tollgate_policy_shadow_evaluations_total{policy=%q}`, id))
	divergences, dropped = map[string]float64{}, map[string]float64{}
	for _, k := range []string{status.DivergenceError, status.DivergenceVerdict, status.DivergencePatch, status.DivergenceMessage} {
		if v := seriesValue(t, metrics, fmt.Sprintf(`tollgate_policy_shadow_divergences_total{kind=%q,policy=%q}`, k, id)); v > 0 {
			divergences[k] = v
		}
	}
	for _, r := range []string{dropQueueFull, dropBusy, dropCoolingDown, dropShutdown} {
		if v := seriesValue(t, metrics, fmt.Sprintf(`tollgate_policy_shadow_dropped_total{policy=%q,reason=%q}`, id, r)); v > 0 {
			dropped[r] = v
		}
	}
	return evaluations, divergences, dropped
}

// shadowsReady waits until the shadows of ids loaded: a shadow's load does
// not hold back the serving version's, nor readiness.
func shadowsReady(t *testing.T, h *harness, ids ...string) {
	t.Helper()
	for _, id := range ids {
		eventually(t, id+": shadow loaded", func() string {
			if sh := h.policy(id).Shadow; sh == nil || sh.State != status.StateReady {
				return fmt.Sprintf("shadow %+v", sh)
			}
			return ""
		})
	}
}

// TestShadowDivergences: a shadow that needs one more label than the serving
// version, in every execution mode (waPC TinyGo, WASI, OPA, Gatekeeper) and
// in a group, and in monitor mode and on /validate_raw: 30 requests on a Pod
// with only `owner` get 30 allowed answers from the serving version, and the
// shadow's 30 denials are counted as 30 verdict divergences (metrics and /policies, with the last requests: uid,
// kind, namespace/name and both answers), logged without the object.
func TestShadowDivergences(t *testing.T) {
	pols := fmt.Sprintf(`
wapc:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  shadow:
    settings: {mandatory_labels: [owner, cost-center]}
wasi:
  module: %[2]s
  settings: {required_labels: [owner]}
  shadow:
    settings: {required_labels: [owner, cost-center]}
opa:
  module: %[3]s
  settings: {labels: [owner]}
  shadow:
    settings: {labels: [owner, cost-center]}
gatekeeper:
  module: %[4]s
  settings: {registries: [nginx]}
  shadow:
    settings: {registries: [registry.example.com/]}
group:
  expression: labels()
  policies:
    labels: {module: %[1]s, settings: {mandatory_labels: [owner]}}
  shadow:
    policies:
      labels: {settings: {mandatory_labels: [owner, cost-center]}}
monitor:
  module: %[1]s
  policyMode: monitor
  settings: {mandatory_labels: [owner, cost-center]}
  shadow:
    settings: {mandatory_labels: [owner]}
raw:
  module: %[5]s
  settings: {allowed_users: [alice]}
  shadow:
    settings: {allowed_users: [bob]}
`, wasmPath(t, "examples/required-labels"), wasmPath(t, "examples/wasi-required-labels"),
		wasmPath(t, "examples/opa-required-labels"), wasmPath(t, "examples/gatekeeper-allowed-registries"),
		wasmPath(t, "examples/raw-validation"))
	h := start(t, harnessOpts{policies: pols, options: func(o *config.Options) {
		o.Workers = 2
		o.ShadowQueueSize = 200 // this test counts every divergence: none may be dropped
	}})
	// monitor: the serving version would deny (it needs cost-center too) but
	// answers allowed, its shadow allows: compared as enforced, they diverge.
	// raw: /validate_raw, alice allowed by the serving version, not by the shadow.
	ids := []string{"wapc", "wasi", "opa", "gatekeeper", "group", "monitor", "raw"}
	shadowsReady(t, h, ids...)
	const n = 30
	for _, id := range ids {
		for i := range n {
			uid := fmt.Sprintf("%s-%d", id, i)
			if id == "raw" {
				code, b := h.post("/validate_raw/raw", fmt.Appendf(nil, `{"request":{"uid":%q,"user":"alice","action":"get","resource":"pods/x"}}`, uid))
				var out struct{ Response admission.Response }
				if err := json.Unmarshal(b, &out); err != nil || code != 200 || !out.Response.Allowed || out.Response.UID != uid {
					t.Fatalf("raw request %d: HTTP %d %s: the serving answer changed", i, code, b)
				}
				continue
			}
			code, r := h.review("/validate/"+id, reviewFor(uid, "CREATE", "default", pod(map[string]string{"owner": "x"})))
			if code != 200 || !r.Allowed || r.UID != uid || r.Status != nil {
				t.Fatalf("%s request %d: HTTP %d %+v: the serving answer changed", id, i, code, r)
			}
		}
	}
	for _, id := range ids {
		eventually(t, id+": shadow evaluations", func() string {
			ev, div, drop := shadowTotals(t, h, id)
			if ev != n || div[status.DivergenceVerdict] != n || len(div) != 1 || len(drop) != 0 {
				return fmt.Sprintf("evaluations %v, divergences %v, dropped %v; want %d verdict divergences of %d", ev, div, drop, n, n)
			}
			return ""
		})
		sh := h.policy(id).Shadow
		if sh.Evaluations != n || sh.Divergences[status.DivergenceVerdict] != n || len(sh.Recent) != maxRecentDivergences {
			t.Fatalf("%s: /policies shadow %+v", id, sh)
		}
		last := sh.Recent[0]
		switch id {
		case "monitor":
			if last.UID != "monitor-29" || last.Serving.Allowed || last.Serving.Message == "" || !last.Candidate.Allowed {
				t.Errorf("%s: last divergence %+v", id, last)
			}
		case "raw":
			if last.UID != "raw-29" || last.Kind != "" || last.Operation != "raw" || !last.Serving.Allowed || last.Candidate.Allowed {
				t.Errorf("%s: last divergence %+v", id, last)
			}
		default:
			if last.UID != fmt.Sprintf("%s-%d", id, n-1) || last.Kind != "Pod" || last.Namespace != "default" || last.Name != "p" ||
				last.Operation != "CREATE" || last.Divergence != status.DivergenceVerdict || !last.Serving.Allowed ||
				last.Candidate.Allowed || last.Candidate.Message == "" || last.Candidate.Error != "" {
				t.Errorf("%s: last divergence %+v", id, last)
			}
		}
	}
	if sh := h.policy("wapc").Shadow; sh.Module == "" || sh.Digest == "" || sh.LoadedAt == nil {
		t.Errorf("wapc shadow: %+v", sh)
	}
	if sh := h.policy("group").Shadow; sh.Expression != "labels()" || len(sh.Members) != 1 || sh.Members[0].State != status.StateReady {
		t.Errorf("group shadow: %+v", sh)
	}
	// logged at a bounded rate (a burst per policy, then one per
	// divergenceLogEvery), never with the object
	var lines []string
	perPolicy := map[string]int{}
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "shadow diverged") {
			lines = append(lines, l)
			for _, id := range ids {
				if strings.Contains(l, " policy="+id+" ") {
					perPolicy[id]++
				}
			}
		}
	}
	for _, id := range ids {
		if c := perPolicy[id]; c < divergenceLogBurst || c >= n {
			t.Errorf("%s: %d divergence lines for %d divergences, want at least the burst (%d) and fewer than the divergences", id, c, n, divergenceLogBurst)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, " policy=monitor ") || strings.Contains(l, " policy=raw ") {
			continue
		}
		for _, want := range []string{"uid=", "kind=Pod", "namespace=default", "name=p", "divergence=verdict", "serving.allowed=true", "shadow.allowed=false", "shadow.message="} {
			if !strings.Contains(l, want) {
				t.Errorf("divergence line lacks %s: %s", want, l)
			}
		}
		if strings.Contains(l, "containers") || strings.Contains(l, "owner=") || strings.Contains(l, `"x"`) {
			t.Errorf("divergence line shows the object: %s", l)
		}
	}
}

// TestShadowMisbehavingCostsNothing: shadows that loop to their deadline,
// trap or panic (waPC and WASI) change no answer and fail no request; each
// failure is an error divergence (a WASI panic is a denial, code 500), and a shadow that ran out of time cools down (its
// evaluations are dropped, counted) instead of holding a shadow worker.
func TestShadowMisbehavingCostsNothing(t *testing.T) {
	pols := fmt.Sprintf(`
loop:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  timeoutEvalSeconds: 1
  shadow:
    module: %[2]s
    settings: {behaviour: loop}
trap:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  shadow:
    module: %[2]s
    settings: {behaviour: trap}
wasi-loop:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  timeoutEvalSeconds: 1
  shadow:
    module: %[3]s
    settings: {behaviour: loop}
wasi-panic:
  module: %[1]s
  settings: {mandatory_labels: [owner]}
  shadow:
    module: %[3]s
    settings: {behaviour: panic}
`, wasmPath(t, "examples/required-labels"), wasmPath(t, "test/testdata/policies/misbehave"), wasmPath(t, "test/testdata/policies/wasi-misbehave"))
	h := start(t, harnessOpts{policies: pols, options: func(o *config.Options) {
		o.Workers = 2
		o.ShadowQueueSize = 200
	}})
	ids := []string{"loop", "trap", "wasi-loop", "wasi-panic"}
	shadowsReady(t, h, ids...)
	const n = 30
	var wg sync.WaitGroup
	errs := make(chan string, len(ids)*n)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				t0 := time.Now()
				code, r := h.review("/validate/"+id, reviewFor(fmt.Sprint(i), "CREATE", "default", pod(map[string]string{"owner": "x"})))
				if code != 200 || !r.Allowed || r.Status != nil {
					errs <- fmt.Sprintf("%s request %d: HTTP %d %+v", id, i, code, r)
				}
				if took := time.Since(t0); took > 10*time.Second {
					errs <- fmt.Sprintf("%s request %d answered after %v", id, i, took)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, id := range ids {
		eventually(t, id+": every shadow evaluation compared or dropped", func() string {
			ev, div, drop := shadowTotals(t, h, id)
			// a WASI command's panic is its answer (code 500), the others are failures
			kind := status.DivergenceError
			if id == "wasi-panic" {
				kind = status.DivergenceVerdict
			}
			if ev == 0 || ev+drop[dropCoolingDown]+drop[dropBusy] != n || div[kind] != ev || len(div) != 1 || drop[dropQueueFull] != 0 {
				return fmt.Sprintf("evaluations %v, divergences %v, dropped %v", ev, div, drop)
			}
			return ""
		})
	}
	for _, id := range []string{"loop", "wasi-loop"} {
		if _, _, drop := shadowTotals(t, h, id); drop[dropCoolingDown] == 0 {
			t.Errorf("%s: no evaluation dropped while the looping shadow cooled down", id)
		}
		if r := h.policy(id).Shadow.Recent; len(r) == 0 || r[0].Candidate.Error != "timeout" || r[0].Divergence != status.DivergenceError {
			t.Errorf("%s: recent %+v", id, r)
		}
	}
	if r := h.policy("trap").Shadow.Recent; len(r) == 0 || r[0].Candidate.Error != "trap" {
		t.Errorf("trap: recent %+v", r)
	}
}

// TestShadowQueueBound: shadow evaluations never wait beyond
// --shadow-queue-size (one policy at most half of it), nor beyond 2 x
// --max-request-bytes of requests: with the one shadow worker held by a
// shadow that blocks, further requests are answered at once and their shadow
// evaluations are dropped and counted; once it is released, what was queued
// runs.
func TestShadowQueueBound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options func(o *config.Options)
		body    []byte
	}{
		// one policy: 2 places of 4
		{"count", func(o *config.Options) { o.ShadowQueueSize = 4 }, reviewFor("u", "CREATE", "default", pod(nil))},
		// 2 places of 1024 bytes: two requests of 700-1024 bytes fit, a third does not
		{"bytes", func(o *config.Options) { o.ShadowQueueSize, o.MaxRequestBytes = 64, 1024 },
			reviewFor("u", "CREATE", "default", pod(map[string]string{"pad": strings.Repeat("x", 400)}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "bytes" && (len(tc.body) <= 2048/3 || len(tc.body) > 1024) {
				t.Fatalf("the request is %d bytes: 683-1024 make the bytes the bound", len(tc.body))
			}
			release := make(chan struct{})
			var started sync.Once
			running := make(chan struct{})
			l := newTestLoader(t)
			l.scripts["allow"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
				return protocol.ValidationResponse{Accepted: true}, nil
			}
			l.scripts["block"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
				started.Do(func() { close(running) })
				<-release
				return protocol.ValidationResponse{Accepted: true}, nil
			}
			h := start(t, harnessOpts{loader: l, policies: "p:\n  module: script://allow\n  shadow: {module: script://block}\n", options: func(o *config.Options) {
				o.Workers, o.ShadowWorkers = 2, 1
				tc.options(o)
			}})
			defer close(release) // before the harness's Shutdown
			shadowsReady(t, h, "p")
			if code, r := h.review("/validate/p", tc.body); code != 200 || !r.Allowed {
				t.Fatalf("HTTP %d %+v", code, r)
			}
			select {
			case <-running:
			case <-time.After(time.Minute):
				t.Fatal("the shadow did not start")
			}
			const n = 10
			for i := range n {
				t0 := time.Now()
				if code, r := h.review("/validate/p", tc.body); code != 200 || !r.Allowed {
					t.Fatalf("request %d: HTTP %d %+v", i, code, r)
				}
				if took := time.Since(t0); took > 10*time.Second {
					t.Errorf("request %d waited %v for a shadow", i, took)
				}
			}
			if ev, _, drop := shadowTotals(t, h, "p"); ev != 0 || drop[dropQueueFull] != n-2 {
				t.Fatalf("evaluations %v, dropped %v; want %d dropped (queue_full): 1 running and 2 queued", ev, drop, n-2)
			}
			if sh := h.policy("p").Shadow; sh.Dropped[dropQueueFull] != n-2 {
				t.Fatalf("/policies shadow %+v", sh)
			}
			release <- struct{}{} // the first one ends; the queued two run (each blocks until released)
			release <- struct{}{}
			release <- struct{}{}
			eventually(t, "the queued shadow evaluations", func() string {
				if ev, _, _ := shadowTotals(t, h, "p"); ev != 3 {
					return fmt.Sprintf("evaluations %v, want 3", ev)
				}
				return ""
			})
		})
	}
}

// TestShadowLoadFailureAndReload: a shadow that fails to load leaves the
// serving version serving (ready, same answers) and is reported failed in
// /policies; fixing it by an edit of policies.yml loads the shadow alone (the
// serving version is not reloaded) and it starts counting; removing it
// removes it.
func TestShadowLoadFailureAndReload(t *testing.T) {
	labels := wasmPath(t, "examples/required-labels")
	file := func(shadow string) string {
		return fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n%s", labels, shadow)
	}
	l := newTestLoader(t)
	h := start(t, harnessOpts{loader: l, policies: file("  shadow: {module: /no/such/policy.wasm}\n"), options: func(o *config.Options) { o.Workers = 2 }})
	eventually(t, "the shadow's load failure", func() string {
		if sh := h.policy("labels").Shadow; sh == nil || sh.State == status.StateLoading {
			return fmt.Sprintf("shadow %+v", sh)
		}
		return ""
	})
	p := h.policy("labels")
	if p.State != status.StateReady || p.Error != "" || p.Shadow == nil || p.Shadow.State != status.StateFailed ||
		!strings.Contains(p.Shadow.Error, "/no/such/policy.wasm") {
		t.Fatalf("/policies %+v shadow %+v", p, p.Shadow)
	}
	allowed := reviewFor("a", "CREATE", "default", pod(map[string]string{"owner": "x"}))
	if code, r := h.review("/validate/labels", allowed); code != 200 || !r.Allowed {
		t.Fatalf("HTTP %d %+v", code, r)
	}
	if ev, _, drop := shadowTotals(t, h, "labels"); ev != 0 || len(drop) != 0 {
		t.Fatalf("a failed shadow ran: evaluations %v dropped %v", ev, drop)
	}
	loads := l.loads.Load()
	writeFile(t, h.pfile, file("  shadow:\n    settings: {mandatory_labels: [owner, cost-center]}\n"))
	if err := h.srv.Reload(t.Context(), "test", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the fixed shadow", func() string {
		if sh := h.policy("labels").Shadow; sh == nil || sh.State != status.StateReady {
			return fmt.Sprintf("shadow %+v", sh)
		}
		return ""
	})
	if got := l.loads.Load() - loads; got != 1 {
		t.Errorf("%d loads for a shadow edit, want 1 (the shadow; the serving version is unchanged)", got)
	}
	if code, r := h.review("/validate/labels", allowed); code != 200 || !r.Allowed {
		t.Fatalf("HTTP %d %+v", code, r)
	}
	eventually(t, "a divergence of the fixed shadow", func() string {
		if sh := h.policy("labels").Shadow; sh.Evaluations != 1 || sh.Divergences[status.DivergenceVerdict] != 1 {
			return fmt.Sprintf("shadow %+v", sh)
		}
		return ""
	})
	writeFile(t, h.pfile, file(""))
	if err := h.srv.Reload(t.Context(), "test", false); err != nil {
		t.Fatal(err)
	}
	if p := h.policy("labels"); p.Shadow != nil || p.State != status.StateReady {
		t.Fatalf("after removing the shadow: %+v", p)
	}
}

// TestShadowGivesWayToWaitingRequests: a shadow evaluation whose turn comes
// while serving requests wait for a worker is dropped (busy), so shadows use
// spare capacity only; once nothing waits, they run.
func TestShadowGivesWayToWaitingRequests(t *testing.T) {
	l := newTestLoader(t)
	l.scripts["slow"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		time.Sleep(300 * time.Millisecond)
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	l.scripts["allow"] = func(*admission.Request, []byte) (protocol.ValidationResponse, error) {
		return protocol.ValidationResponse{Accepted: true}, nil
	}
	h := start(t, harnessOpts{loader: l, policies: "p:\n  module: script://slow\n  shadow: {module: script://allow}\n", options: func(o *config.Options) {
		o.Workers, o.PolicyTimeout = 1, 10*time.Second // one serving worker: the others wait
	}})
	shadowsReady(t, h, "p")
	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, r := h.review("/validate/p", reviewFor(fmt.Sprint(i), "CREATE", "default", pod(nil))); code != 200 || !r.Allowed {
				t.Errorf("request %d: HTTP %d %+v", i, code, r)
			}
		}()
	}
	wg.Wait()
	eventually(t, "every shadow evaluation run or dropped", func() string {
		ev, div, drop := shadowTotals(t, h, "p")
		if ev+drop[dropBusy] != n || drop[dropBusy] == 0 || ev == 0 || len(div) != 0 {
			return fmt.Sprintf("evaluations %v, divergences %v, dropped %v; want some dropped as busy, the others run", ev, div, drop)
		}
		return ""
	})
}

// TestShadowRemovalDropsItsSeries: the caller's series labelled with a
// shadow's unit id (ID#shadow: its host calls, its guest log) go when a
// reload removes the shadow, as a removed policy's do; the policy's own stay.
func TestShadowRemovalDropsItsSeries(t *testing.T) {
	extra := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_policy_things_total", Help: "test"}, []string{"policy"})
	extra.WithLabelValues("labels").Inc()
	extra.WithLabelValues("labels" + shadowSuffix).Inc()
	labels := wasmPath(t, "examples/required-labels")
	file := fmt.Sprintf("labels:\n  module: %s\n  settings: {mandatory_labels: [owner]}\n", labels)
	h := start(t, harnessOpts{policies: file + "  shadow: {settings: {mandatory_labels: [owner, cost-center]}}\n", metrics: []prometheus.Collector{extra},
		options: func(o *config.Options) { o.Workers = 2 }})
	shadowsReady(t, h, "labels")
	writeFile(t, h.pfile, file)
	if err := h.srv.Reload(t.Context(), "test", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the shadow's series dropped", func() string {
		_, m := h.get("/metrics")
		if strings.Contains(m, `test_policy_things_total{policy="labels#shadow"}`) || !strings.Contains(m, `test_policy_things_total{policy="labels"} 1`) {
			return grepLines(m, "test_policy_things_total")
		}
		return ""
	})
}
