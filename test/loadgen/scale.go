package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/server/status"
)

// scalePolicy is one policy of the scale mix.
type scalePolicy struct {
	id, module, settings string // settings: JSON
	mutating             bool
}

// scaleMix is issue 15's item 7: 50 policies, a mix of TinyGo examples
// (Kubewarden's `-target=wasi` build and `wasi-legacy`), a standard-Go
// example and the built-in modules, each with settings of its own.
func scaleMix(root, mapModule, mapSettings, mapVary string) ([]scalePolicy, error) {
	file := func(dir string) string { return "file://" + filepath.Join(root, dir, "policy.wasm") }
	readJSON := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return "", err
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", rel, err)
		}
		return string(j), nil
	}
	sidecar, err := readJSON("policies/mutating-admission-policy/testdata/sidecar-settings.yml")
	if err != nil {
		return nil, err
	}
	authz, err := readJSON("policies/mutating-admission-policy/testdata/authz-settings.yml")
	if err != nil {
		return nil, err
	}
	gk, err := readJSON("policies/gatekeeper-mutation/testdata/settings-bench.yaml")
	if err != nil {
		return nil, err
	}
	var ps []scalePolicy
	for i := 0; i < 12; i++ {
		ps = append(ps, scalePolicy{id: fmt.Sprintf("labels-%d", i), module: file("examples/required-labels"),
			settings: fmt.Sprintf(`{"mandatory_labels":["owner","app.kubernetes.io/name"],"denied_labels":["debug-%d"]}`, i)})
	}
	for i := 0; i < 12; i++ {
		ps = append(ps, scalePolicy{id: fmt.Sprintf("caps-%d", i), module: file("examples/capabilities-drop"), settings: `{}`, mutating: true})
	}
	for i := 0; i < 12; i++ {
		ps = append(ps, scalePolicy{id: fmt.Sprintf("registries-%d", i), module: file("examples/go-image-registries"),
			settings: fmt.Sprintf(`{"allowedRegistries":["docker.io","ghcr.io/acme","registry.k8s.io","quay.io/team-%d"]}`, i)})
	}
	var custom string
	if mapSettings != "" {
		if custom, err = readJSON(mapSettings); err != nil {
			return nil, err
		}
	}
	// The MutatingAdmissionPolicy built-in: 4 distinct settings, 8 policies.
	for i := 0; i < 8; i++ {
		s := sidecar
		if i%2 == 1 {
			s = authz
		}
		s = strings.ReplaceAll(s, "mesh/proxy:v1.0.0", fmt.Sprintf("mesh/proxy:v1.0.%d", i%4))
		if custom != "" {
			s = strings.ReplaceAll(custom, mapVary, fmt.Sprintf("%s-%d", mapVary, i%4))
		}
		ps = append(ps, scalePolicy{id: fmt.Sprintf("map-%d", i), module: mapModule, settings: s, mutating: true})
	}
	// The gatekeeper-mutation built-in: 6 policies, 3 distinct settings.
	for i := 0; i < 6; i++ {
		s := strings.ReplaceAll(gk, "tollgate", fmt.Sprintf("tollgate-%d", i%3))
		ps = append(ps, scalePolicy{id: fmt.Sprintf("gk-%d", i), module: "builtin://gatekeeper-mutation", settings: s, mutating: true})
	}
	return ps, nil
}

// scale measures `tollgate serve` with the 50-policy mix: the time from exec
// to /readiness with an empty compilation cache and again with the cache the
// first start left (warm), and the server's VmRSS and VmHWM after start-up and
// after requests to every policy.
func scale(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	tollgate := fs.String("tollgate", "bin/tollgate", "tollgate binary")
	root := fs.String("root", ".", "repository root (for the example modules and settings)")
	reviewFile := fs.String("review", "test/testdata/reviews/pod.json", "the AdmissionReview sent to every policy")
	n := fs.Int("requests", 20, "requests to each policy after start-up")
	warmRuns := fs.Int("warm", 3, "warm starts")
	cacheDir := fs.String("cache-dir", "", "compilation cache (default: a new temporary directory, so the first start is cold)")
	extra := fs.String("serve-args", "", "extra arguments for tollgate serve, space-separated")
	hold := fs.Duration("hold", 0, "keep the last warm server running this long (its PID printed), to inspect it")
	settle := fs.Duration("settle", time.Second, "after a warm start, measure the memory again this much later (the server gives back what loading freed)")
	only := fs.String("only", "", "comma-separated policy id prefixes to keep (labels, caps, registries, map, gk)")
	mapModule := fs.String("map-module", "builtin://mutating-admission-policy", "the module of the MAP policies (e.g. file:///abs/path/policy.wasm to measure another build)")
	mapSettings := fs.String("map-settings", "", "settings of the MAP policies instead of the sidecar/authz mix (a file under -root)")
	mapVary := fs.String("map-vary", "payments", "with -map-settings: a string of the settings made distinct (s-0 ... s-3) for 4 distinct settings")
	fs.DurationVar(&readyTimeout, "ready-timeout", readyTimeout, "how long a start may take to /readiness 200 (a cold start on a busy machine takes minutes)")
	fs.Parse(args)

	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	mix, err := scaleMix(absRoot, *mapModule, *mapSettings, *mapVary)
	if err != nil {
		return err
	}
	if *only != "" {
		var kept []scalePolicy
		for _, p := range mix {
			for _, o := range strings.Split(*only, ",") {
				if strings.HasPrefix(p.id, o+"-") {
					kept = append(kept, p)
					break
				}
			}
		}
		mix = kept
	}
	review, err := compactFile(filepath.Join(absRoot, *reviewFile))
	if err != nil {
		return err
	}
	b, err := newBench(*tollgate, "tollgate-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(b.work)
	var yml strings.Builder
	counts := map[string]int{}
	for _, p := range mix {
		fmt.Fprintf(&yml, "%s:\n  module: %s\n  settings: %s\n", p.id, p.module, p.settings)
		if p.mutating {
			yml.WriteString("  allowedToMutate: true\n")
		}
		counts[p.module]++
	}
	pfile := filepath.Join(b.work, "policies.yml")
	if err := os.WriteFile(pfile, []byte(yml.String()), 0o644); err != nil {
		return err
	}
	cache := *cacheDir
	if cache == "" {
		cache = filepath.Join(b.work, "cache")
	}
	start := func() (*proc, int, int, time.Duration, error) {
		port, probe := freePort(), freePort()
		args := []string{"serve", "--policies", pfile, "--addr", "127.0.0.1", "--port", strconv.Itoa(port),
			"--readiness-probe-port", strconv.Itoa(probe), "--cert-file", b.certs.CertFile, "--key-file", b.certs.KeyFile,
			"--cache-dir", cache, "--log-level", "warn"}
		if *extra != "" {
			args = append(args, strings.Fields(*extra)...)
		}
		p, d, err := startProc(*tollgate, args, "http://127.0.0.1:"+strconv.Itoa(probe)+"/readiness")
		if err != nil {
			return nil, 0, 0, 0, err
		}
		if err := allLoaded(probe, len(mix)); err != nil {
			p.stop()
			return nil, 0, 0, 0, fmt.Errorf("%w\n%s", err, p.log)
		}
		return p, port, probe, d, nil
	}
	mem := func(p *proc) string {
		return fmt.Sprintf("VmRSS %.0f MB, VmHWM %.0f MB", float64(p.memKB("VmRSS"))/1024, float64(p.memKB("VmHWM"))/1024)
	}

	fmt.Printf("tollgate serve with %d policies:", len(mix))
	for _, m := range sortedKeys(counts) {
		fmt.Printf(" %d x %s;", counts[m], strings.TrimPrefix(m, "file://"+absRoot+"/"))
	}
	fmt.Printf("\nmachine: %s, %d CPUs; load average at the start %s\n", cpuModel(), numCPU(), loadAvg())

	p, port, _, cold, err := start()
	if err != nil {
		return err
	}
	fmt.Printf("start-up to ready, cold cache (%s): %v; after start-up: %s\n", cache, cold.Round(time.Millisecond), mem(p))
	// send sends n requests to every policy of the server p on port and
	// prints the verdicts and the memory after them
	send := func(p *proc, port int) error {
		c := newClient(b.pool, 4)
		defer c.CloseIdleConnections()
		t0 := time.Now()
		verdicts := map[string]int{}
		for _, pol := range mix {
			url := "https://127.0.0.1:" + strconv.Itoa(port) + "/validate/" + pol.id
			for i := 0; i < *n; i++ {
				v, err := verdict(c, url, review)
				if err != nil {
					return fmt.Errorf("%s: %w", pol.id, err)
				}
				verdicts[v]++
			}
		}
		fmt.Printf("after %d requests to each policy (%v; %v): %s\n", *n, time.Since(t0).Round(time.Millisecond), verdicts, mem(p))
		return nil
	}
	if err := send(p, port); err != nil {
		p.stop()
		return err
	}
	p.stop()

	var warm []time.Duration
	for i := 0; i < *warmRuns; i++ {
		p, port, _, d, err := start()
		if err != nil {
			return err
		}
		warm = append(warm, d)
		at := mem(p)
		time.Sleep(*settle)
		fmt.Printf("start-up to ready, warm cache, run %d: %v; after start-up: %s; %v later: %s\n", i+1, d.Round(time.Millisecond), at, *settle, mem(p))
		if err := send(p, port); err != nil {
			p.stop()
			return err
		}
		if i == *warmRuns-1 && *hold > 0 {
			fmt.Printf("holding PID %d for %v\n", p.cmd.Process.Pid, *hold)
			time.Sleep(*hold)
		}
		p.stop()
	}
	fmt.Printf("load average at the end %s\n", loadAvg())
	return nil
}

// allLoaded checks that GET /policies lists want policies, all loaded.
func allLoaded(probe, want int) error {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/policies")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st status.Policies
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err
	}
	var bad []string
	for _, p := range st.Policies {
		if p.Error != "" {
			bad = append(bad, p.ID+": "+p.Error)
		}
	}
	if len(st.Policies) != want || len(bad) > 0 {
		return fmt.Errorf("%d policies listed, want %d; failed: %s", len(st.Policies), want, strings.Join(bad, "; "))
	}
	return nil
}

func compactFile(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return buf.Bytes(), nil
}

// verdict posts an AdmissionReview and says what came back: "allowed",
// "patched" or "denied"; an error for anything but an AdmissionReview
// (policy errors answered as code 500 included).
func verdict(c *http.Client, url string, body []byte) (string, error) {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var rv struct {
		Response struct {
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
			Status  struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"response"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &rv) != nil {
		return "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	r := rv.Response
	switch {
	case r.Status.Code >= 500:
		return "", fmt.Errorf("policy error: %s", r.Status.Message)
	case r.Allowed && len(r.Patch) > 0:
		return "patched", nil
	case r.Allowed:
		return "allowed", nil
	}
	return "denied", nil
}

func numCPU() int { return runtime.NumCPU() }

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
