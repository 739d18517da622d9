package enginecmp

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Samples are the durations of one engine's calls.
type Samples []time.Duration

// Quantile is the q-quantile (0 < q < 1) of the samples, by the nearest rank.
func (s Samples) Quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(q*float64(len(c))+0.5) - 1
	return c[min(max(i, 0), len(c)-1)]
}

// Result is what Measure measured of one module.
type Result struct {
	Module  string
	Samples map[string]Samples
	// HostShare is the part of tollgate's evaluation spent outside the guest call.
	HostShare float64
}

// Measure runs the module's validate on every engine in interleaved rounds
// (one call per engine per round, so that every engine sees the same state of
// a shared machine) until rounds rounds or budget has passed, after warm
// calls on each engine, and returns each call's wall time.
func Measure(ctx context.Context, m *Loaded, req *Request, engines []string, cacheDir string, warm, rounds int, budget time.Duration) (*Result, error) {
	runners := make([]Runner, len(engines))
	defer func() {
		for _, r := range runners {
			if r != nil {
				r.Close()
			}
		}
	}()
	for i, e := range engines {
		r, err := New(ctx, e, m, cacheDir)
		if err != nil {
			return nil, err
		}
		runners[i] = r
		for k := 0; k < warm; k++ {
			if _, err := r.Validate(ctx, req); err != nil {
				return nil, fmt.Errorf("%s on %s: %w", m.Name, e, err)
			}
		}
	}
	res := &Result{Module: m.Name, Samples: map[string]Samples{}}
	deadline := time.Now().Add(budget)
	for k := 0; k < rounds && time.Now().Before(deadline); k++ {
		for i, r := range runners {
			t := time.Now()
			if _, err := r.Validate(ctx, req); err != nil {
				return nil, fmt.Errorf("%s on %s: %w", m.Name, engines[i], err)
			}
			res.Samples[engines[i]] = append(res.Samples[engines[i]], time.Since(t))
		}
	}
	for _, r := range runners {
		if s := HostShare(r); s > 0 {
			res.HostShare = s
		}
	}
	return res, nil
}

// Print writes the table of p50s and the ratios issue 15 asks for.
func Print(w io.Writer, results []*Result) {
	var cols []string
	for _, e := range append(Engines[:len(Engines):len(Engines)], WazeroInstrumented) {
		for _, r := range results {
			if _, ok := r.Samples[e]; ok {
				cols = append(cols, e)
				break
			}
		}
	}
	fmt.Fprintf(w, "p50 (p90) per validate call, us; interleaved rounds\n")
	fmt.Fprintf(w, "%-26s %6s", "module", "rounds")
	for _, e := range cols {
		fmt.Fprintf(w, " %18s", e)
	}
	fmt.Fprintf(w, " | %14s %15s %15s %17s %12s\n", "tollgate-guest/", "tollgate/", "tollgate-guest/", "wasmtime-fresh/", "host share")
	fmt.Fprintf(w, "%-26s %6s", "", "")
	for range cols {
		fmt.Fprintf(w, " %18s", "")
	}
	fmt.Fprintf(w, " | %14s %15s %15s %17s %12s\n", "wazero", "wasmtime", "wasmtime", "tollgate", "of tollgate")
	for _, r := range results {
		n := 0
		for _, s := range r.Samples {
			n = max(n, len(s))
		}
		fmt.Fprintf(w, "%-26s %6d", r.Module, n)
		p50 := map[string]time.Duration{}
		for _, e := range cols {
			s, ok := r.Samples[e]
			if !ok {
				fmt.Fprintf(w, " %18s", "-")
				continue
			}
			p50[e] = s.Quantile(0.5)
			fmt.Fprintf(w, " %18s", fmt.Sprintf("%.0f (%.0f)", us(p50[e]), us(s.Quantile(0.9))))
		}
		fmt.Fprintf(w, " | %14s %15s %15s %17s %11.1f%%\n",
			ratio(p50[TollgateGuest], p50[Wazero]), ratio(p50[Tollgate], p50[Wasmtime]),
			ratio(p50[TollgateGuest], p50[Wasmtime]), ratio(p50[WasmtimeFresh], p50[Tollgate]), 100*r.HostShare)
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(a, b time.Duration) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}
