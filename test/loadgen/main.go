// Command loadgen measures `tollgate serve` on loopback (make bench-server).
//
//	loadgen suite -tollgate bin/tollgate [-duration 20s]   all scenarios, a Markdown report on stdout
//	loadgen rounds -tollgate bin/tollgate [-rounds 10 -round 10s]  successive closed-loop rounds on one server (does throughput decay?)
//	loadgen scale -tollgate bin/tollgate [-requests 20]     50 policies (TinyGo, standard Go, built-ins): start-up cold and warm, RSS
//	loadgen native -port N -cert-file F -key-file F         the native Go ceiling server
//	loadgen fairness -tollgate bin/tollgate [-duration 20s] a healthy policy beside one looping to its deadline; RSS under 400 large bodies
//	loadgen shadow -tollgate bin/tollgate [-duration 20s -rounds 2]  the same policy with and without a shadow (policies.yml shadow:), side by side
//
// The suite starts each server as its own process (so its peak RSS is its
// own), drives it over HTTPS with keep-alive (HTTP/1.1, one connection per
// client goroutine): closed loop at concurrency 32 for saturation throughput,
// open loop at fixed arrival rates for latency (measured from the scheduled
// send time, so a stalled server cannot hide its queueing), then measures RSS
// with 50 policies and restart time with a warm compilation cache.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/server"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen suite|rounds|scale|fairness|shadow|native [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "suite":
		err = suite(os.Args[2:])
	case "native":
		err = native(os.Args[2:])
	case "rounds":
		err = rounds(os.Args[2:])
	case "scale":
		err = scale(os.Args[2:])
	case "fairness":
		err = fairness(os.Args[2:])
	case "shadow":
		err = shadowBench(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// ---- the native ceiling: the same two decisions in Go ----

func native(args []string) error {
	fs := flag.NewFlagSet("native", flag.ExitOnError)
	port := fs.Int("port", 0, "port")
	certFile := fs.String("cert-file", "", "certificate")
	keyFile := fs.String("key-file", "", "key")
	probePort := fs.Int("probe-port", 0, "plain-HTTP /readiness port")
	fs.Parse(args)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate/required-labels", func(w http.ResponseWriter, r *http.Request) {
		nativeHandle(w, r, func(req *admission.Request) admission.Verdict {
			var obj struct {
				Metadata struct {
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
			}
			json.Unmarshal(req.Object, &obj)
			if _, ok := obj.Metadata.Labels["owner"]; !ok {
				return admission.Verdict{Accepted: false, Message: `mandatory label "owner" is missing`, Code: 422}
			}
			return admission.Verdict{Accepted: true}
		})
	})
	mux.HandleFunc("POST /validate/capabilities-drop", func(w http.ResponseWriter, r *http.Request) {
		nativeHandle(w, r, nativeCapabilitiesDrop)
	})
	mux.HandleFunc("GET /readiness", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	go http.ListenAndServe(net.JoinHostPort("127.0.0.1", strconv.Itoa(*probePort)), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	}))
	return srv.Serve(tls.NewListener(ln, srv.TLSConfig))
}

// nativeCapabilitiesDrop is capabilities-drop as a careful Go webhook author
// writes it: it decodes only the capabilities of the Pod's containers (the
// rest of the object is skipped, not decoded) and writes the JSONPatch
// itself, one add of "BPF" to each drop list that lacks it (issue 24 item
// 3: the reference the host's cost is measured against).
func nativeCapabilitiesDrop(req *admission.Request) admission.Verdict {
	type container struct {
		SecurityContext *struct {
			Capabilities *struct {
				Add  []string `json:"add"`
				Drop []string `json:"drop"`
			} `json:"capabilities"`
		} `json:"securityContext"`
	}
	var pod struct {
		Spec struct {
			Containers          []container `json:"containers"`
			InitContainers      []container `json:"initContainers"`
			EphemeralContainers []container `json:"ephemeralContainers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(req.Object, &pod); err != nil {
		return admission.Verdict{Accepted: false, Message: err.Error(), Code: 400}
	}
	var patch []byte
	for _, f := range []struct {
		name string
		cs   []container
	}{{"containers", pod.Spec.Containers}, {"ephemeralContainers", pod.Spec.EphemeralContainers}, {"initContainers", pod.Spec.InitContainers}} { // the diff's order
		for i, c := range f.cs {
			if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil || len(c.SecurityContext.Capabilities.Add) == 0 ||
				slices.Contains(c.SecurityContext.Capabilities.Drop, "BPF") {
				continue
			}
			path := "/spec/" + f.name + "/" + strconv.Itoa(i) + "/securityContext/capabilities/drop"
			value := `["BPF"]`
			if d := c.SecurityContext.Capabilities.Drop; d != nil {
				path, value = path+"/"+strconv.Itoa(len(d)), `"BPF"`
			}
			if patch == nil {
				patch = append(patch, '[')
			} else {
				patch = append(patch, ',')
			}
			patch = append(patch, `{"op":"add","path":"`+path+`","value":`+value+`}`...)
		}
	}
	if patch == nil {
		return admission.Verdict{Accepted: true}
	}
	return admission.Verdict{Accepted: true, Patch: append(patch, ']')}
}

func nativeHandle(w http.ResponseWriter, r *http.Request, decide func(*admission.Request) admission.Verdict) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 3<<20))
	if err != nil {
		http.Error(w, err.Error(), 413)
		return
	}
	req, err := admission.ParseReview(body)
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	b, _ := json.Marshal(admission.NewReview(admission.FromVerdict(req.UID, decide(req))))
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// ---- load ----

type result struct {
	Requests int64
	Errors   int64
	Dropped  int64
	RPS      float64
	P50, P99 time.Duration
	Slow     []int // per second of the run: requests answered after more than 100 ms, or not at all
}

func newClient(pool *x509.CertPool, conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		MaxConnsPerHost:     conns * 2,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 keep-alive
	}}
}

func send(c *http.Client, url string, body []byte, wantAllowed bool) error {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if wantAllowed != bytes.Contains(b, []byte(`"allowed":true`)) {
		return fmt.Errorf("unexpected verdict: %.200s", b)
	}
	return nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// closedLoop: c clients each send the next request when the previous answered.
func closedLoop(c *http.Client, url string, body []byte, allowed bool, conc int, dur time.Duration) result {
	var n, errs atomic.Int64
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := send(c, url, body, allowed); err != nil {
					errs.Add(1)
				} else {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	return result{Requests: n.Load(), Errors: errs.Load(), RPS: float64(n.Load()) / el.Seconds()}
}

// openLoop: requests arrive at a fixed rate whatever the server does;
// latency counts from the scheduled arrival. At most maxInFlight are
// outstanding; arrivals beyond are counted as dropped.
func openLoop(c *http.Client, url string, body []byte, allowed bool, rate int, dur time.Duration) result {
	const maxInFlight = 4096
	interval := time.Second / time.Duration(rate)
	total := int(dur / interval)
	lat := make([]time.Duration, total)
	ok := make([]bool, total)
	var inflight atomic.Int64
	var dropped, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		if inflight.Load() >= maxInFlight {
			dropped.Add(1)
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			defer inflight.Add(-1)
			if err := send(c, url, body, allowed); err != nil {
				errs.Add(1)
				return
			}
			lat[i] = time.Since(at)
			ok[i] = true
		}(i, at)
	}
	wg.Wait()
	el := time.Since(start)
	var ds []time.Duration
	slow := make([]int, (total+rate-1)/rate)
	for i := range lat {
		if ok[i] {
			ds = append(ds, lat[i])
		}
		if !ok[i] || lat[i] > 100*time.Millisecond {
			slow[i/rate]++
		}
	}
	return result{Requests: int64(len(ds)), Errors: errs.Load(), Dropped: dropped.Load(), RPS: float64(len(ds)) / el.Seconds(),
		P50: percentile(ds, 0.50), P99: percentile(ds, 0.99), Slow: slow}
}

// ---- processes ----

type proc struct {
	cmd  *exec.Cmd
	base string
	log  *bytes.Buffer
}

func freePort() int {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// readyTimeout bounds a server's start to /readiness 200 (scale's -ready-timeout).
var readyTimeout = 2 * time.Minute

func waitReady(url string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for time.Since(start) < timeout {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Since(start), nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s not ready after %v", url, timeout)
}

func startProc(name string, args []string, readyURL string, env ...string) (*proc, time.Duration, error) {
	cmd := exec.Command(name, args...)
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	if _, err := waitReady(readyURL, readyTimeout); err != nil {
		cmd.Process.Kill()
		return nil, 0, fmt.Errorf("%v\n%s", err, log)
	}
	return &proc{cmd: cmd, log: log}, time.Since(t0), nil
}

func (p *proc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// memKB reads VmHWM (peak) or VmRSS from /proc.
func (p *proc) memKB(field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			n, _ := strconv.Atoi(strings.Fields(l)[1])
			return n
		}
	}
	return -1
}

// ---- the suite ----

// bench is what every mode's servers share: a work directory, a self-signed
// certificate and the pool that trusts it, one compilation cache.
type bench struct {
	work  string
	certs *server.SelfSigned
	pool  *x509.CertPool
	self  string
}

func newBench(tollgate, prefix string) (*bench, error) {
	if _, err := os.Stat(tollgate); err != nil {
		return nil, fmt.Errorf("-tollgate: %w (make build)", err)
	}
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	certs, err := server.EnsureSelfSigned(filepath.Join(work, "tls"))
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	caPEM, _ := os.ReadFile(certs.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	self, _ := os.Executable()
	return &bench{work: work, certs: certs, pool: pool, self: self}, nil
}

// start starts the native server (this binary) or tollgate serve with its
// embedded example configuration and extra arguments, on loopback, and
// waits for its readiness.
func (b *bench) start(native bool, tollgate string, extra []string) (p *proc, port, probe int, err error) {
	port, probe = freePort(), freePort()
	ready := "http://127.0.0.1:" + strconv.Itoa(probe) + "/readiness"
	if native {
		p, _, err = startProc(b.self, []string{"native", "-port", strconv.Itoa(port), "-probe-port", strconv.Itoa(probe), "-cert-file", b.certs.CertFile, "-key-file", b.certs.KeyFile}, ready)
	} else {
		p, _, err = startProc(tollgate, append([]string{"serve", "--addr", "127.0.0.1", "--port", strconv.Itoa(port), "--readiness-probe-port", strconv.Itoa(probe),
			"--cert-file", b.certs.CertFile, "--key-file", b.certs.KeyFile, "--cache-dir", filepath.Join(b.work, "cache"), "--log-level", "warn"}, extra...), ready)
	}
	return p, port, probe, err
}

func suite(args []string) error {
	fs := flag.NewFlagSet("suite", flag.ExitOnError)
	tollgate := fs.String("tollgate", "bin/tollgate", "tollgate binary")
	dur := fs.Duration("duration", 20*time.Second, "length of each run")
	conc := fs.Int("concurrency", 32, "closed-loop concurrency")
	rates := fs.String("rates", "1000,3000", "open-loop arrival rates")
	skip50 := fs.Bool("skip-50", false, "skip the 50-policy measurements")
	extra := fs.String("serve-args", "", "extra arguments for tollgate serve, space-separated (e.g. \"--workers 4\")")
	only := fs.String("only", "", "run only the scenarios whose name contains this (\"realistic\": only the realistic-objects table)")
	realDur := fs.Duration("realistic-duration", 5*time.Second, "length of each saturation run on the realistic objects of test/testdata/reviews (0 skips them)")
	realOnly := fs.String("realistic-reviews", "", "run the realistic table only on the reviews whose file name contains this (\"pod\": the 5 KB Pod)")
	fs.Parse(args)

	b, err := newBench(*tollgate, "tollgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(b.work)
	work, certs, pool := b.work, b.certs, b.pool

	validateBody := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"b1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"name":"nginx","namespace":"default","operation":"CREATE","userInfo":{"username":"bench"},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"owner":"me","app":"nginx"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}}`)
	mutateBody := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"b2","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"name":"nginx","namespace":"default","operation":"CREATE","userInfo":{"username":"bench"},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"owner":"me"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.27","securityContext":{"capabilities":{"add":["NET_ADMIN"]}}}]}}}}`)

	type scenario struct {
		name, path string
		body       []byte
		native     bool
	}
	scenarios := []scenario{
		{"tollgate, validating TinyGo example (required-labels)", "/validate/required-labels", validateBody, false},
		{"tollgate, mutating TinyGo example (capabilities-drop)", "/validate/capabilities-drop", mutateBody, false},
		{"native Go HTTPS server, same validation", "/validate/required-labels", validateBody, true},
		{"native Go HTTPS server, same mutation", "/validate/capabilities-drop", mutateBody, true},
	}
	rateList, err := parseRates(*rates)
	if err != nil {
		return err
	}

	host, _ := os.Hostname()
	cpu := cpuModel()
	fmt.Printf("Measured %s on %s (%s, %d CPUs, GOMAXPROCS %d), loopback, HTTPS with keep-alive (HTTP/1.1), %v per run.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), *dur)
	head := "| scenario | saturation req/s (c=" + strconv.Itoa(*conc) + ") | peak RSS |"
	sep := "|---|---|---|"
	for _, r := range rateList {
		head += fmt.Sprintf(" p50 / p99 at %d req/s |", r)
		sep += "---|"
	}
	if *only != "realistic" {
		fmt.Println(head)
		fmt.Println(sep)
	}
	for _, sc := range scenarios {
		if *only != "" && !strings.Contains(sc.name, *only) {
			continue
		}
		p, port, _, err := b.start(sc.native, *tollgate, strings.Fields(*extra))
		if err != nil {
			return err
		}
		url := "https://127.0.0.1:" + strconv.Itoa(port) + sc.path
		client := newClient(pool, *conc)
		// warm up
		if err := send(client, url, sc.body, true); err != nil {
			p.stop()
			return fmt.Errorf("%s: %w\n%s", sc.name, err, p.log)
		}
		closedLoop(client, url, sc.body, true, *conc, 2*time.Second)
		sat := closedLoop(client, url, sc.body, true, *conc, *dur)
		peak := p.memKB("VmHWM")
		row := fmt.Sprintf("| %s | %.0f%s | %.0f MB |", sc.name, sat.RPS, errNote(sat), float64(peak)/1024)
		row += latencies(pool, url, sc.body, rateList, *dur)
		p.stop()
		fmt.Println(row)
	}

	if *realDur > 0 && (*only == "" || *only == "realistic") {
		if *realOnly != "" {
			realisticReviews = slices.DeleteFunc(slices.Clone(realisticReviews), func(r struct{ name, file string }) bool {
				return !strings.Contains(filepath.Base(r.file), *realOnly)
			})
		}
		if err := b.realisticTable(*tollgate, *conc, *realDur, strings.Fields(*extra)); err != nil {
			return err
		}
	}

	if *skip50 {
		return nil
	}
	// 50 policies: the three examples with different settings, all distinct policies
	var yml strings.Builder
	for i := 0; i < 50; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&yml, "labels-%d:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [owner, l%d]}\n", i, i)
		case 1:
			fmt.Fprintf(&yml, "caps-%d:\n  module: builtin://examples/capabilities-drop\n  allowedToMutate: true\n  timeoutEvalSeconds: %d\n", i, 1+i%5)
		default:
			fmt.Fprintf(&yml, "raw-%d:\n  module: builtin://examples/raw-validation\n  settings: {allowed_users: [u%d], allowed_actions: [get]}\n", i, i)
		}
	}
	pfile := filepath.Join(work, "policies-50.yml")
	os.WriteFile(pfile, []byte(yml.String()), 0o644)
	cache50 := filepath.Join(work, "cache50")
	run50 := func() (*proc, time.Duration, error) {
		port, probe := freePort(), freePort()
		return startProc(*tollgate, []string{"serve", "--policies", pfile, "--addr", "127.0.0.1", "--port", strconv.Itoa(port), "--readiness-probe-port", strconv.Itoa(probe),
			"--cert-file", certs.CertFile, "--key-file", certs.KeyFile, "--cache-dir", cache50, "--log-level", "warn"},
			"http://127.0.0.1:"+strconv.Itoa(probe)+"/readiness")
	}
	p, cold, err := run50()
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	rss := p.memKB("VmRSS")
	p.stop()
	var warm []time.Duration
	for i := 0; i < 3; i++ {
		p, d, err := run50()
		if err != nil {
			return err
		}
		warm = append(warm, d)
		p.stop()
	}
	sort.Slice(warm, func(i, j int) bool { return warm[i] < warm[j] })
	fmt.Printf("\n50 policies (3 modules, 50 distinct settings): RSS after start-up %.0f MB; start-up to ready: cold cache %v, warm cache %v (median of 3; min %v, max %v).\n",
		float64(rss)/1024, cold.Round(time.Millisecond), warm[1].Round(time.Millisecond), warm[0].Round(time.Millisecond), warm[2].Round(time.Millisecond))
	return nil
}

// parseRates reads -rates: arrival rates separated by commas.
func parseRates(s string) ([]int, error) {
	var out []int
	for _, r := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("-rates: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}

// latencies runs the open loop at each rate and gives the table cells
// " p50 / p99 |" of each.
func latencies(pool *x509.CertPool, url string, body []byte, rates []int, dur time.Duration) string {
	var row string
	for _, r := range rates {
		ol := openLoop(newClient(pool, 256), url, body, true, r, dur)
		row += fmt.Sprintf(" %s / %s%s |", ms(ol.P50), ms(ol.P99), errNote(ol))
	}
	return row
}

func errNote(r result) string {
	if r.Errors == 0 && r.Dropped == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d errors, %d dropped)", r.Errors, r.Dropped)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
