// Command enginecmp prints, for each module of package enginecmp, the p50
// (and p90) of a validate call of the realistic 5 KB Pod on plain wazero,
// tollgate (the guest call alone, and the whole evaluation), wasmtime with an
// instance reused and wasmtime with a fresh instance per request, measured in
// interleaved rounds, and the ratios issue 15 asks for.
//
//	go run ./cmd/enginecmp [-rounds 2000] [-budget 10s] [-big] [-only name]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/test/enginecmp"
)

func main() {
	rounds := flag.Int("rounds", 2000, "most interleaved rounds per module")
	budget := flag.Duration("budget", 8*time.Second, "most time measured per module")
	warm := flag.Int("warm", 50, "calls per engine before measuring")
	big := flag.Bool("big", enginecmp.BigModules(), "also the 66 MB MutatingAdmissionPolicy module (compiling it under wasmtime and plain wazero the first time takes minutes)")
	only := flag.String("only", "", "comma-separated module names")
	review := flag.String("review", enginecmp.BenchReview, "the AdmissionReview sent (repository-relative)")
	engines := flag.String("engines", strings.Join(enginecmp.Engines, ","), "comma-separated engines")
	cacheDir := flag.String("cache-dir", enginecmp.DefaultCacheDir(), "compiled code of every engine")
	flag.Parse()

	ctx := context.Background()
	fmt.Printf("request %s; at the start: %s\n", *review, loadavg())
	var results []*enginecmp.Result
	for _, m := range enginecmp.Modules {
		if (m.Big && !*big) || (*only != "" && !contains(*only, m.Name)) {
			continue
		}
		l, err := enginecmp.Load(m)
		if err != nil {
			fail(err)
		}
		req, err := enginecmp.LoadRequest(*review, l.Settings)
		if err != nil {
			fail(err)
		}
		r, err := enginecmp.Measure(ctx, l, req, strings.Split(*engines, ","), *cacheDir, *warm, *rounds, *budget)
		if err != nil {
			fail(err)
		}
		results = append(results, r)
	}
	fmt.Printf("at the end: %s\n", loadavg())
	enginecmp.Print(os.Stdout, results)
}

func contains(list, name string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	return "load average " + strings.Join(strings.Fields(string(b))[:3], " ")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "enginecmp:", err)
	os.Exit(1)
}
