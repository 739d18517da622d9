package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/module"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// wasmPath returns the absolute path of a built policy, failing the test
// (not skipping) when it is missing: `make policies` builds it.
func wasmPath(t testing.TB, dir string) string {
	t.Helper()
	p := testfixture.Path(dir + "/policy.wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not built: run `make policies` (%v)", p, err)
	}
	return p
}

var (
	sharedCacheOnce sync.Once
	sharedCache     string
)

// cacheDir is a compilation cache shared by the tests of this run.
func cacheDir(t testing.TB) string {
	sharedCacheOnce.Do(func() {
		d, err := os.MkdirTemp("", "tollgate-server-test-cache-")
		if err != nil {
			panic(err)
		}
		sharedCache = d
	})
	return sharedCache
}

// scripted is a test evaluator: a Go function in place of a Wasm policy, for
// the admission semantics that the example policies cannot produce
// (warnings, audit annotations, a mutation by a validating policy...). It
// lives only in tests.
type scripted struct {
	fn     func(req *admission.Request, raw []byte) (protocol.ValidationResponse, error)
	closed atomic.Bool
	calls  atomic.Int64
}

func (s *scripted) Evaluate(ctx context.Context, req *admission.Request) (*policy.Result, error) {
	s.calls.Add(1)
	if s.closed.Load() {
		return nil, errors.New("evaluator used after Close")
	}
	r, err := s.fn(req, nil)
	if err != nil {
		return nil, err
	}
	res := &policy.Result{Response: r}
	if len(r.MutatedObject) > 0 {
		p, err := admission.Diff(req.Object, r.MutatedObject)
		if err != nil {
			return nil, err
		}
		res.Patch = p
	}
	return res, nil
}

func (s *scripted) ValidateRaw(ctx context.Context, raw []byte) (*policy.Result, error) {
	s.calls.Add(1)
	r, err := s.fn(nil, raw)
	if err != nil {
		return nil, err
	}
	res := &policy.Result{Response: r}
	if len(r.MutatedObject) > 0 { // as policy.ValidateRaw: diffed against the raw request
		p, err := admission.Diff(raw, r.MutatedObject)
		if err != nil {
			return nil, err
		}
		res.Patch = p
	}
	return res, nil
}

func (s *scripted) Close(context.Context) { s.closed.Store(true) }

// testLoader loads script://NAME from scripts and everything else with a
// real policy.Host; it counts loads.
type testLoader struct {
	host    *HostLoader
	scripts map[string]func(req *admission.Request, raw []byte) (protocol.ValidationResponse, error)
	loads   atomic.Int64
	mu      sync.Mutex
	evals   []Evaluator
}

func newTestLoader(t testing.TB) *testLoader {
	h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: cacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	r := &module.Resolver{}
	return &testLoader{
		host: &HostLoader{Host: h, Resolver: ResolverFunc(func(ctx context.Context, uri string) ([]byte, error) {
			m, err := r.Resolve(ctx, uri)
			if err != nil {
				return nil, err
			}
			return m.Wasm, nil
		})},
		scripts: map[string]func(*admission.Request, []byte) (protocol.ValidationResponse, error){},
	}
}

func (l *testLoader) Resolve(ctx context.Context, uri string) ([]byte, string, error) {
	if name, ok := strings.CutPrefix(uri, "script://"); ok {
		if _, ok := l.scripts[name]; !ok {
			return nil, "", fmt.Errorf("no script %q", name)
		}
		return []byte(uri), wasm.Digest([]byte(uri)), nil
	}
	return l.host.Resolve(ctx, uri)
}

func (l *testLoader) Load(ctx context.Context, spec policy.Spec) (Evaluator, error) {
	l.loads.Add(1)
	var ev Evaluator
	if name, ok := strings.CutPrefix(string(spec.Module), "script://"); ok {
		ev = &scripted{fn: l.scripts[name]}
	} else {
		var err error
		if ev, err = l.host.Load(ctx, spec); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	l.evals = append(l.evals, ev)
	l.mu.Unlock()
	return ev, nil
}

// harness is a running server with HTTPS and probe clients.
type harness struct {
	t       testing.TB
	srv     *Server
	client  *http.Client
	probe   *http.Client
	base    string
	probeAt string
	dir     string
	pfile   string
	ca      *x509.CertPool
	certs   *SelfSigned
	logs    *testfixture.SyncBuffer
	certsR  *CertReloader
	volume  *kubeletVolume // with harnessOpts.volume: the ConfigMap volume holding pfile
}

type harnessOpts struct {
	policies string // policies.yml content
	loader   Loader
	options  func(*config.Options)
	tlsCfg   func(h *harness) *tls.Config
	watch    bool
	noStart  bool
	retry    time.Duration          // Options.RetryInterval; 0 disables retries in tests
	volume   bool                   // policies.yml lives in a ConfigMap volume written as kubelet does (h.volume)
	api      APISource              // Options.API (ParseAPI parses as Reread does)
	metrics  []prometheus.Collector // Options.Metrics
}

func start(t testing.TB, ho harnessOpts) *harness {
	t.Helper()
	h, so := prepare(t, ho)
	srv, err := New(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	if ho.noStart {
		return h
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.serving()
	scheme := "https"
	if h.srv.opts.InsecureHTTP {
		scheme = "http"
	}
	h.base = scheme + "://" + srv.Addr()
	h.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.ca}, MaxIdleConnsPerHost: 64, ForceAttemptHTTP2: true}}
	return h
}

// serving sets the probe client of h.srv, whose probe port is open, and shuts
// the server down at the end of the test.
func (h *harness) serving() {
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.srv.Shutdown(ctx)
		if h.t.Failed() {
			h.t.Logf("server log:\n%s", h.logs.String())
		}
	})
	h.probeAt = "http://" + h.srv.ProbeAddr()
	h.probe = &http.Client{Timeout: 10 * time.Second}
}

// prepare writes the harness's files and returns the server's options.
func prepare(t testing.TB, ho harnessOpts) (*harness, Options) {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), logs: &testfixture.SyncBuffer{}}
	h.pfile = filepath.Join(h.dir, "policies.yml")
	if ho.volume {
		h.volume = newKubeletVolume(t, filepath.Join(h.dir, "config"))
		h.volume.write(map[string]string{"policies.yml": ho.policies})
		h.pfile = filepath.Join(h.volume.dir, "policies.yml")
	} else if err := os.WriteFile(h.pfile, []byte(ho.policies), 0o644); err != nil {
		t.Fatal(err)
	}
	o := config.Defaults()
	o.Addr, o.Port, o.ReadinessProbePort = "127.0.0.1", 0, 0
	o.PoliciesPath = h.pfile
	o.Workers = 4
	if ho.options != nil {
		ho.options(&o)
	}
	cfg, err := config.Load(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ho.loader == nil {
		ho.loader = newTestLoader(t)
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	certs, err := EnsureSelfSigned(filepath.Join(h.dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	h.certs = certs
	h.ca = x509.NewCertPool()
	caPEM, _ := os.ReadFile(certs.CAFile)
	h.ca.AppendCertsFromPEM(caPEM)
	var tlsCfg *tls.Config
	if !o.InsecureHTTP {
		if ho.tlsCfg != nil {
			tlsCfg = ho.tlsCfg(h)
		} else {
			cr, err := NewCertReloader(certs.CertFile, certs.KeyFile, "", logger, nil)
			if err != nil {
				t.Fatal(err)
			}
			tlsCfg = cr.TLSConfig()
		}
	}
	so := Options{Config: cfg, Loader: ho.loader, Logger: logger, TLS: tlsCfg, Certs: h.certsR,
		Reread: func() (*config.Config, []byte, error) {
			b, err := os.ReadFile(h.pfile)
			if err != nil {
				return nil, nil, err
			}
			pols, warns, err := config.ParsePolicies(h.pfile, b)
			if err != nil {
				return nil, b, err
			}
			return &config.Config{Options: o, Policies: pols, Warnings: warns, Source: b}, b, nil
		}}
	so.Metrics = ho.metrics
	if ho.watch {
		so.WatchFiles = []string{h.pfile}
	}
	if ho.api != nil {
		so.API = ho.api
		so.ParseAPI = func(b []byte) (*config.Config, error) {
			pols, warns, err := config.ParsePolicies("configmap", b)
			if err != nil {
				return nil, err
			}
			return &config.Config{Options: o, Policies: pols, Warnings: warns, Source: b}, nil
		}
	}
	so.RetryInterval = -1
	if ho.retry > 0 {
		so.RetryInterval = ho.retry
	}
	return h, so
}

// post sends body to path and returns status and body.
func (h *harness) post(path string, body []byte) (int, []byte) {
	h.t.Helper()
	resp, err := h.client.Post(h.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// review posts an AdmissionReview and decodes the response.
func (h *harness) review(path string, body []byte) (int, *admission.Response) {
	h.t.Helper()
	code, b := h.post(path, body)
	var rv struct {
		APIVersion string              `json:"apiVersion"`
		Kind       string              `json:"kind"`
		Response   *admission.Response `json:"response"`
	}
	if err := json.Unmarshal(b, &rv); err != nil || rv.Response == nil {
		h.t.Fatalf("POST %s: status %d, not an AdmissionReview: %s", path, code, b)
	}
	if rv.APIVersion != "admission.k8s.io/v1" || rv.Kind != "AdmissionReview" {
		h.t.Fatalf("envelope %s/%s", rv.APIVersion, rv.Kind)
	}
	return code, rv.Response
}

func (h *harness) get(path string) (int, string) {
	h.t.Helper()
	resp, err := h.probe.Get(h.probeAt + path)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// policies gets and decodes GET /policies.
func (h *harness) policies() status.Policies {
	h.t.Helper()
	code, body := h.get("/policies")
	var pl status.Policies
	if err := json.Unmarshal([]byte(body), &pl); code != 200 || err != nil {
		h.t.Fatalf("GET /policies: HTTP %d %v: %s", code, err, body)
	}
	return pl
}

// policy is policy id of GET /policies (zero when absent).
func (h *harness) policy(id string) status.Policy {
	h.t.Helper()
	for _, p := range h.policies().Policies {
		if p.ID == id {
			return p
		}
	}
	return status.Policy{}
}

// reviewFor builds an AdmissionReview for obj.
func reviewFor(uid, op, namespace string, obj any) []byte {
	req := map[string]any{
		"uid": uid, "kind": map[string]string{"group": "", "version": "v1", "kind": "Pod"},
		"resource":  map[string]string{"group": "", "version": "v1", "resource": "pods"},
		"operation": op, "namespace": namespace, "name": "p", "userInfo": map[string]any{"username": "u"},
	}
	if obj != nil {
		req["object"] = obj
	} else {
		req["oldObject"] = map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	return b
}

func pod(labels map[string]string, addCaps ...string) map[string]any {
	c := map[string]any{"name": "app", "image": "nginx"}
	if len(addCaps) > 0 {
		c["securityContext"] = map[string]any{"capabilities": map[string]any{"add": addCaps}}
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": "default", "labels": labels},
		"spec":     map[string]any{"containers": []any{c}}}
}

// goroutines waits briefly for the goroutine count to settle at or below max.
func goroutinesSettle(max int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 50 && n > max; i++ {
		time.Sleep(100 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}
