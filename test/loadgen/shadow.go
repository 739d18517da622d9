package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// shadow measures what a policy's shadow (policies.yml shadow:) costs its
// serving path: the same policy with and without a shadow that diverges on
// every request (required-labels, the shadow needing one more label), side
// by side: rounds alternate the two servers (A B A B ...) so that the
// machine's load drifts over both alike. Each run: closed-loop saturation,
// then open-loop latency at each rate (p50/p99 from the scheduled send);
// for the shadowed server, how many shadow evaluations ran and were dropped.
func shadowBench(args []string) error {
	fs := flag.NewFlagSet("shadow", flag.ExitOnError)
	tollgate := fs.String("tollgate", "bin/tollgate", "tollgate binary")
	dur := fs.Duration("duration", 20*time.Second, "length of each run")
	conc := fs.Int("concurrency", 32, "closed-loop concurrency")
	rates := fs.String("rates", "500,1000", "open-loop arrival rates")
	rounds := fs.Int("rounds", 2, "rounds (each runs both servers)")
	extra := fs.String("serve-args", "", "extra arguments for tollgate serve, space-separated")
	fs.Parse(args)
	rateList, err := parseRates(*rates)
	if err != nil {
		return err
	}
	b, err := newBench(*tollgate, "tollgate-bench-shadow-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(b.work)
	const entry = "required-labels:\n  module: builtin://examples/required-labels\n  settings: {mandatory_labels: [owner]}\n"
	files := map[bool]string{false: filepath.Join(b.work, "plain.yml"), true: filepath.Join(b.work, "shadow.yml")}
	if err := os.WriteFile(files[false], []byte(entry), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(files[true], []byte(entry+"  shadow:\n    settings: {mandatory_labels: [owner, cost-center]}\n"), 0o644); err != nil {
		return err
	}
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"s1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"name":"nginx","namespace":"default","operation":"CREATE","userInfo":{"username":"bench"},"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nginx","namespace":"default","labels":{"owner":"me","app":"nginx"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}}`)

	host, _ := os.Hostname()
	fmt.Printf("Measured %s on %s (%s, %d CPUs), load average %s, loopback, HTTPS with keep-alive (HTTP/1.1), %v per run, %d rounds alternating the two servers.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, cpuModel(), runtime.NumCPU(), loadAvg(), *dur, *rounds)
	head, sep := "| round | server | saturation req/s (c="+strconv.Itoa(*conc)+") |", "|---|---|---|"
	for _, r := range rateList {
		head += fmt.Sprintf(" p50 / p99 at %d req/s |", r)
		sep += "---|"
	}
	fmt.Println(head + " shadow evaluations / dropped | load average |")
	fmt.Println(sep + "---|---|")
	for round := 1; round <= *rounds; round++ {
		for _, shadowed := range []bool{false, true} {
			p, port, probe, err := b.start(false, *tollgate, append([]string{"--policies", files[shadowed]}, strings.Fields(*extra)...))
			if err != nil {
				return err
			}
			url := "https://127.0.0.1:" + strconv.Itoa(port) + "/validate/required-labels"
			client := newClient(b.pool, *conc)
			if err := send(client, url, body, true); err != nil {
				p.stop()
				return fmt.Errorf("%w\n%s", err, p.log)
			}
			closedLoop(client, url, body, true, *conc, 2*time.Second) // warm up
			sat := closedLoop(client, url, body, true, *conc, *dur)
			name := "without shadow"
			if shadowed {
				name = "with shadow"
			}
			row := fmt.Sprintf("| %d | %s | %.0f%s |", round, name, sat.RPS, errNote(sat))
			row += latencies(b.pool, url, body, rateList, *dur)
			counts := "-"
			if shadowed {
				counts = shadowCounts("http://127.0.0.1:" + strconv.Itoa(probe) + "/metrics")
			}
			p.stop()
			fmt.Println(row + " " + counts + " | " + loadAvg() + " |")
		}
	}
	return nil
}

// shadowCounts reads the shadow's evaluations and drops from /metrics.
func shadowCounts(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ev, dropped float64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(l, "tollgate_policy_shadow_evaluations_total{"):
			ev += v
		case strings.HasPrefix(l, "tollgate_policy_shadow_dropped_total{"):
			dropped += v
		}
	}
	return fmt.Sprintf("%.0f / %.0f", ev, dropped)
}
