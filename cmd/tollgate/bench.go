package main

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgate-dev/tollgate/internal/redact"
)

// benchReport is what bench prints.
type benchReport struct {
	Module      string        `json:"module"`
	Count       int           `json:"count"`
	Warmup      int           `json:"warmup"`
	Mean        time.Duration `json:"mean_ns"`
	P50         time.Duration `json:"p50_ns"`
	P95         time.Duration `json:"p95_ns"`
	P99         time.Duration `json:"p99_ns"`
	Min         time.Duration `json:"min_ns"`
	Max         time.Duration `json:"max_ns"`
	Accepted    bool          `json:"accepted"`
	Mutated     bool          `json:"mutated"`
	Total       time.Duration `json:"total_ns"`
	LoadTime    time.Duration `json:"load_ns"`
	Evaluations float64       `json:"evaluations_per_second"`
	// GuestMean is the mean time inside the guest call; HostOverhead is the
	// rest of the evaluation (request encoding, response decoding, diff) as a
	// fraction of the mean.
	GuestMean    time.Duration `json:"guest_mean_ns"`
	HostOverhead float64       `json:"host_overhead_fraction"`
	// StartMean is the mean part of the guest time a wasi policy spent
	// starting its module (zero for waPC, and when instances started ahead).
	StartMean time.Duration `json:"start_mean_ns,omitempty"`
	Mode      string        `json:"execution_mode"`
}

func newBenchCmd() *cobra.Command {
	var (
		in       inputFlags
		rt       runtimeFlags
		caps     capabilityFlags
		vf       verifyFlags
		output   string
		count    int
		warmup   int
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench MODULE -r REQUEST",
		Short: "Measure a policy's evaluation latency on one request",
		Long: `Evaluate a policy repeatedly on one request, after a warm-up, and print the
count, mean, p50, p95 and p99 of the evaluation time (the guest call plus the
host's request encoding, response decoding and JSONPatch diff).
Takes the same inputs as run (a module, or a ClusterAdmissionPolicy or
AdmissionPolicy manifest whose spec.module, spec.settings and
spec.contextAwareResources are used).`,
		Example: `  tollgate bench examples/required-labels/policy.wasm -r examples/required-labels/testdata/pod-missing-label.json -s examples/required-labels/testdata/settings.yaml
  tollgate bench policy.wasm -r review.json --count 10000 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(output, "", "json", "yaml"); err != nil {
				return err
			}
			ctx := cmd.Context()
			caps.repeat = true // a session of one evaluation starts over for the next
			loadStart := time.Now()
			p, err := prepare(ctx, cmd, args[0], &in, &rt, &caps, &vf, 1)
			if err != nil {
				return err
			}
			defer p.close(ctx)
			rep := benchReport{Module: redact.URI(args[0]), Warmup: warmup, LoadTime: time.Since(loadStart), Mode: p.policy.Mode()}
			for i := 0; i < warmup; i++ {
				if _, err := p.evaluate(ctx); err != nil {
					return fmt.Errorf("warm-up evaluation %d: %w", i+1, err)
				}
			}
			samples := make([]time.Duration, 0, count)
			var guest, startCost time.Duration
			start := time.Now()
			for i := 0; i < count || (duration > 0 && time.Since(start) < duration); i++ {
				t := time.Now()
				res, err := p.evaluate(ctx)
				if err != nil {
					return fmt.Errorf("evaluation %d: %w", i+1, err)
				}
				samples = append(samples, time.Since(t))
				guest += res.GuestDuration
				startCost += res.StartDuration
				rep.Accepted, rep.Mutated = res.Response.Accepted, res.Patch != nil
			}
			rep.Total = time.Since(start)
			summarize(&rep, samples)
			if rep.Count > 0 && rep.Mean > 0 {
				rep.GuestMean = guest / time.Duration(rep.Count)
				rep.StartMean = startCost / time.Duration(rep.Count)
				rep.HostOverhead = 1 - float64(rep.GuestMean)/float64(rep.Mean)
			}
			if output != "" {
				return printData(cmd.OutOrStdout(), output, rep)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "module:      %s\n", rep.Module)
			fmt.Fprintf(w, "load:        %s\n", rep.LoadTime.Round(time.Microsecond))
			fmt.Fprintf(w, "verdict:     accepted=%v mutated=%v\n", rep.Accepted, rep.Mutated)
			fmt.Fprintf(w, "evaluations: %d after %d warm-up (%.0f/s)\n", rep.Count, rep.Warmup, rep.Evaluations)
			fmt.Fprintf(w, "mean:        %s\n", rep.Mean)
			fmt.Fprintf(w, "p50:         %s\n", rep.P50)
			fmt.Fprintf(w, "p95:         %s\n", rep.P95)
			fmt.Fprintf(w, "p99:         %s\n", rep.P99)
			fmt.Fprintf(w, "min / max:   %s / %s\n", rep.Min, rep.Max)
			fmt.Fprintf(w, "guest mean:  %s (host overhead %.1f%% of the mean)\n", rep.GuestMean, 100*rep.HostOverhead)
			if rep.Mode == "wasi" { // the only mode that starts a module per evaluation
				fmt.Fprintf(w, "start:       %s of the guest mean starting the %s module\n", rep.StartMean, rep.Mode)
			}
			return nil
		},
	}
	in.register(cmd)
	rt.register(cmd)
	caps.register(cmd)
	vf.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.Flags().IntVar(&count, "count", 1000, "number of measured evaluations")
	cmd.Flags().IntVar(&warmup, "warmup", 100, "evaluations before measuring")
	cmd.Flags().DurationVar(&duration, "duration", 0, "keep measuring at least this long")
	return cmd
}

func summarize(rep *benchReport, s []time.Duration) {
	rep.Count = len(s)
	if len(s) == 0 {
		return
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	rep.Mean = sum / time.Duration(len(s))
	rep.P50, rep.P95, rep.P99 = percentile(s, 50), percentile(s, 95), percentile(s, 99)
	rep.Min, rep.Max = s[0], s[len(s)-1]
	if sum > 0 {
		rep.Evaluations = float64(len(s)) / sum.Seconds()
	}
}

// percentile uses the nearest-rank method on sorted samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
