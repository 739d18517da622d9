package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// rounds drives one `tollgate serve` process with successive closed-loop
// rounds of the same request and prints each round's throughput, the
// server's CPU time per request (user + system, from /proc: unlike req/s it
// does not move with what else runs on the machine) and its RSS, then the
// last round against the first; then (-fresh) it starts a second server and
// alternates rounds on the old and the fresh one, which tells a server that
// slows as it runs from a machine that got busier meanwhile
// (docs/benchmarks.md, "Throughput over time").
func rounds(args []string) error {
	fs := flag.NewFlagSet("rounds", flag.ExitOnError)
	tollgate := fs.String("tollgate", "bin/tollgate", "tollgate binary")
	n := fs.Int("rounds", 10, "number of rounds")
	round := fs.Duration("round", 10*time.Second, "length of each round")
	conc := fs.Int("concurrency", 32, "closed-loop concurrency")
	policy := fs.String("policy", "capabilities-drop", "policy of the embedded example configuration to drive")
	review := fs.String("review", "test/testdata/reviews/pod.json", "AdmissionReview to send")
	allowed := fs.Bool("allowed", true, "the verdict expected")
	extra := fs.String("serve-args", "", "extra arguments for tollgate serve, space-separated")
	alternate := fs.Bool("fresh", true, "after the rounds, alternate rounds on the same server and on a freshly started one")
	fs.Parse(args)

	body, err := readReview(*review)
	if err != nil {
		return err
	}
	b, err := newBench(*tollgate, "tollgate-rounds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(b.work)
	start := func() (*served, error) {
		p, port, _, err := b.start(false, *tollgate, strings.Fields(*extra))
		if err != nil {
			return nil, err
		}
		sv := &served{p: p, c: newClient(b.pool, *conc), url: "https://127.0.0.1:" + strconv.Itoa(port) + "/validate/" + *policy}
		if err := send(sv.c, sv.url, body, *allowed); err != nil {
			p.stop()
			return nil, fmt.Errorf("%w\n%s", err, p.log)
		}
		return sv, nil
	}
	old, err := start()
	if err != nil {
		return err
	}
	defer old.p.stop()
	fmt.Printf("Measured %s on %s, %d CPUs; tollgate serve %s; policy %s; %s (%d bytes); %d rounds of %v at concurrency %d; load average at start %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), cpuModel(), runtime.NumCPU(), *extra, *policy, *review, len(body), *n, *round, *conc, loadAvg())
	fmt.Println("| round | req/s | server CPU per request | server RSS | load average |")
	fmt.Println("|---|---|---|---|---|")
	var first, last float64
	for i := 1; i <= *n; i++ {
		r, per := old.round(body, *allowed, *conc, *round)
		fmt.Printf("| %d | %.0f%s | %v | %.0f MB | %s |\n", i, r.RPS, errNote(r), per.Round(time.Microsecond), float64(old.p.memKB("VmRSS"))/1024, loadAvg())
		if i == 1 {
			first = r.RPS
		}
		last = r.RPS
	}
	fmt.Printf("\nlast round / first round: %.1f%%\n", 100*last/first)
	if !*alternate {
		return nil
	}
	// A server that has run all the rounds against a fresh one, back to back
	// on the same machine state: if the old one is slower it has aged; if
	// both are as slow the machine is.
	fresh, err := start()
	if err != nil {
		return err
	}
	defer fresh.p.stop()
	fmt.Println("\nThe same server after the rounds, and a fresh one, alternately:")
	fmt.Println("\n| server | req/s | server CPU per request | load average |")
	fmt.Println("|---|---|---|---|")
	for i := 0; i < 2; i++ {
		for _, sv := range []struct {
			name string
			*served
		}{{"after the rounds", old}, {"fresh", fresh}} {
			r, per := sv.round(body, *allowed, *conc, *round)
			fmt.Printf("| %s | %.0f%s | %v | %s |\n", sv.name, r.RPS, errNote(r), per.Round(time.Microsecond), loadAvg())
		}
	}
	return nil
}

// served is a server under test and the client that drives it.
type served struct {
	p   *proc
	c   *http.Client
	url string
}

// round is one closed-loop round, and the server's CPU time per answered request.
func (sv *served) round(body []byte, allowed bool, conc int, d time.Duration) (result, time.Duration) {
	cpu0 := sv.p.cpuTime()
	r := closedLoop(sv.c, sv.url, body, allowed, conc, d)
	if r.Requests == 0 {
		return r, 0
	}
	return r, (sv.p.cpuTime() - cpu0) / time.Duration(r.Requests)
}

// cpuTime is the process's user + system CPU time (/proc/<pid>/stat).
func (p *proc) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+2:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
