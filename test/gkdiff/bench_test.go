package gkdiff

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation"
	mtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	tgadmission "github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine"
)

// The benchmarks of docs/benchmarks.md "Gatekeeper mutation": the 5 KB Pod
// of test/testdata/reviews with the five mutators of
// policies/gatekeeper-mutation/testdata/settings-bench.json (one of each
// kind plus an Assign with a glob), run by Gatekeeper's own code, by
// tollgate's engine natively and by the Wasm module through the host, in
// one run so that the ratio compares like with like on a shared machine.

const (
	benchReview   = "../testdata/reviews/pod.json"
	benchSettings = "../../policies/gatekeeper-mutation/testdata/settings-bench.json"
)

type benchInput struct {
	review   []byte // the AdmissionReview
	object   []byte // request.object
	settings []byte
	req      Request
}

func loadBenchInput(tb testing.TB) benchInput {
	tb.Helper()
	review, err := os.ReadFile(benchReview)
	if err != nil {
		tb.Fatal(err)
	}
	settings, err := os.ReadFile(benchSettings)
	if err != nil {
		tb.Fatal(err)
	}
	var r struct {
		Request struct {
			Kind      struct{ Group, Version, Kind string }
			Namespace string
			Name      string
			Operation string
			UserInfo  struct{ Username string } `json:"userInfo"`
			Object    json.RawMessage
		}
	}
	if err := json.Unmarshal(review, &r); err != nil {
		tb.Fatal(err)
	}
	q := r.Request
	return benchInput{review: review, object: q.Object, settings: settings, req: Request{
		Operation: q.Operation, Username: q.UserInfo.Username, Group: q.Kind.Group, Version: q.Kind.Version, Kind: q.Kind.Kind,
		Namespace: q.Namespace, Name: q.Name, Object: q.Object,
	}}
}

// gatekeeperWebhook is what Gatekeeper's mutating webhook does with the
// request once its namespace is known (pkg/webhook/mutation.go
// mutateRequest): decode the object, mutate, encode, JSON patch.
func gatekeeperWebhook(sys *mutation.System, in benchInput, ns *corev1.Namespace) (int, error) {
	obj := unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(in.object); err != nil {
		return 0, err
	}
	oldNS := obj.GetNamespace()
	obj.SetNamespace(in.req.Namespace)
	m := &mtypes.Mutable{Object: &obj, Namespace: ns, Username: in.req.Username, Source: mtypes.SourceTypeOriginal, Operation: admissionv1.Operation(in.req.Operation)}
	mutated, err := sys.Mutate(context.Background(), m)
	if err != nil || !mutated {
		return 0, err
	}
	m.Object.SetNamespace(oldNS)
	b, err := m.Object.MarshalJSON()
	if err != nil {
		return 0, err
	}
	resp := admission.PatchResponseFromRaw(in.object, b)
	return len(resp.Patches), nil
}

// BenchmarkMutate runs the same request through Gatekeeper (its webhook's
// work: decode, System.Mutate, encode, JSON patch), tollgate's engine
// natively (parse, mutate, encode) and the Wasm module through tollgate's
// host (as `tollgate bench` measures it: request encoding, the guest, the
// JSON patch diff), and prints the ratios.
func BenchmarkMutate(b *testing.B) {
	in := loadBenchInput(b)
	ref, err := NewReference(in.settings)
	if err != nil {
		b.Fatal(err)
	}
	ns := &corev1.Namespace{}
	ns.Name = in.req.Namespace
	wantPatches, err := gatekeeperWebhook(ref.system, in, ns)
	if err != nil || wantPatches == 0 {
		b.Fatalf("Gatekeeper: %d patches, %v", wantPatches, err)
	}

	sys, err := engine.Compile(in.settings)
	if err != nil {
		b.Fatal(err)
	}
	ereq := engine.Request{Operation: in.req.Operation, Kind: engine.GVK{Group: in.req.Group, Version: in.req.Version, Kind: in.req.Kind},
		Name: in.req.Name, Namespace: in.req.Namespace, Username: in.req.Username, Object: in.object}

	module, err := LoadModule()
	if err != nil {
		b.Fatal(err)
	}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	p, err := h.Load(context.Background(), policy.Spec{ID: "gatekeeper-mutation", Module: module, Settings: in.settings, PoolSize: 1, Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	areq, err := tgadmission.ParseReview(in.review)
	if err != nil {
		b.Fatal(err)
	}

	runs := []struct {
		name string
		fn   func() error
	}{
		{"gatekeeper", func() error {
			_, err := gatekeeperWebhook(ref.system, in, ns)
			return err
		}},
		{"tollgate-native", func() error {
			if _, changed, err := sys.Mutate(ereq); err != nil || !changed {
				return fmt.Errorf("changed=%v: %v", changed, err)
			}
			return nil
		}},
		{"tollgate-wasm", func() error {
			res, err := p.Evaluate(context.Background(), areq)
			if err != nil {
				return err
			}
			if len(res.Verdict().Patch) == 0 {
				return fmt.Errorf("no patch")
			}
			return nil
		}},
	}
	// Interleaved rounds (testing.Benchmark cannot nest in a benchmark):
	// each round runs every side for a slice of time, so that a change of
	// load on the shared machine hits all sides alike. -benchtime sets the
	// total per side.
	per := benchTime(b)
	const rounds = 5
	total := map[string]time.Duration{}
	count := map[string]int{}
	samples := map[string][]time.Duration{}
	for _, r := range runs {
		for i := 0; i < 20; i++ { // warm-up
			if err := r.fn(); err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
		}
	}
	// Each call is timed by the wall clock and by the thread's CPU clock
	// (CLOCK_THREAD_CPUTIME_ID, the goroutine locked to its thread): on a
	// machine shared with other work the CPU time is the steadier measure.
	// The Go garbage collector's background workers run on other threads
	// and are not in the CPU time (Gatekeeper's side allocates the most).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := map[string][]time.Duration{}
	b.ResetTimer()
	for round := 0; round < rounds; round++ {
		for _, r := range runs {
			end := time.Now().Add(per / rounds)
			for time.Now().Before(end) {
				c0 := threadCPU()
				t0 := time.Now()
				if err := r.fn(); err != nil {
					b.Fatalf("%s: %v", r.name, err)
				}
				d := time.Since(t0)
				cpu[r.name] = append(cpu[r.name], threadCPU()-c0)
				total[r.name] += d
				count[r.name]++
				samples[r.name] = append(samples[r.name], d)
			}
		}
	}
	b.StopTimer()
	mean, cpu50 := map[string]float64{}, map[string]float64{}
	for _, r := range runs {
		mean[r.name] = float64(total[r.name].Nanoseconds()) / float64(count[r.name])
		p50 := median(samples[r.name])
		cpu50[r.name] = float64(median(cpu[r.name]).Nanoseconds())
		b.ReportMetric(mean[r.name]/1e3, r.name+"-us/op")
		b.ReportMetric(float64(p50.Nanoseconds())/1e3, r.name+"-p50-us")
		b.ReportMetric(cpu50[r.name]/1e3, r.name+"-cpu-p50-us")
		fmt.Fprintf(os.Stderr, "%-16s %7d runs  wall: mean %8.1f us  p50 %8.1f us   thread CPU: p50 %8.1f us\n", r.name, count[r.name], mean[r.name]/1e3, float64(p50.Nanoseconds())/1e3, cpu50[r.name]/1e3)
	}
	ratio := mean["tollgate-wasm"] / mean["gatekeeper"]
	cpuRatio := cpu50["tollgate-wasm"] / cpu50["gatekeeper"]
	b.ReportMetric(ratio, "wasm/gatekeeper")
	b.ReportMetric(cpuRatio, "wasm/gatekeeper-cpu")
	b.ReportMetric(mean["tollgate-native"]/mean["gatekeeper"], "native/gatekeeper")
	fmt.Fprintf(os.Stderr, "tollgate-wasm / gatekeeper (webhook work): wall mean %.2f, thread CPU p50 %.2f; tollgate-native / gatekeeper: wall mean %.2f, thread CPU p50 %.2f\n",
		ratio, cpuRatio, mean["tollgate-native"]/mean["gatekeeper"], cpu50["tollgate-native"]/cpu50["gatekeeper"])
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// benchTime is the -benchtime duration (1s when given as a count).
func benchTime(b *testing.B) time.Duration {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			return d
		}
	}
	return time.Second
}

// benchMutators makes n distinct mutators that all apply to the 5 KB Pod:
// the five of settings-bench.json repeated with numbered names and locations.
func benchMutators(n int) []byte {
	var ms []string
	for i := 0; len(ms) < n; i++ {
		s := fmt.Sprint(i)
		for _, m := range []string{
			`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"pull-` + s + `"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}],"match":{"scope":"Namespaced","kinds":[{"apiGroups":["*"],"kinds":["Pod"]}]},"location":"spec.containers[name: *].env[name: E` + s + `].value","parameters":{"assign":{"value":"v"}}}}`,
			`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"anno-` + s + `"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}],"location":"spec.nodeSelector.\"example.com/k` + s + `\"","parameters":{"assign":{"value":"x"}}}}`,
			`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"AssignMetadata","metadata":{"name":"label-` + s + `"},"spec":{"match":{"namespaces":["store*"]},"location":"metadata.labels.l` + s + `","parameters":{"assign":{"value":"tollgate"}}}}`,
			`{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"ModifySet","metadata":{"name":"args-` + s + `"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}],"location":"spec.containers[name: checkout].args","parameters":{"values":{"fromList":["--flag-` + s + `"]}}}}`,
			`{"apiVersion":"mutations.gatekeeper.sh/v1alpha1","kind":"AssignImage","metadata":{"name":"img-` + s + `"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}],"location":"spec.initContainers[name: init-` + s + `].image","parameters":{"assignDomain":"mirror.example.com"}}}`,
		} {
			if len(ms) < n {
				ms = append(ms, m)
			}
		}
	}
	return []byte(`{"mutators":[` + strings.Join(ms, ",") + `]}`)
}

// BenchmarkLoad500 loads the module with 500 mutators (validate_settings)
// and evaluates the 5 KB Pod once, as a policy server does after a
// (re)load; target 200 ms.
func BenchmarkLoad500(b *testing.B) {
	in := loadBenchInput(b)
	settings := benchMutators(500)
	if _, err := NewReference(settings); err != nil {
		b.Fatalf("Gatekeeper refuses the 500 mutators: %v", err)
	}
	module, err := LoadModule()
	if err != nil {
		b.Fatal(err)
	}
	h, err := policy.NewHost(context.Background(), policy.HostOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	// Keep the compiled module: the benchmark is the settings, not the compilation.
	pin, err := h.Load(context.Background(), policy.Spec{ID: "pin", Module: module, PoolSize: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer pin.Close(context.Background())
	areq, err := tgadmission.ParseReview(in.review)
	if err != nil {
		b.Fatal(err)
	}
	// Wall time and, steadier on a shared machine, the thread's CPU time
	// (the goroutine locked to its thread; wazero compiles nothing here).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var load, first, loadCPU, firstCPU time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := threadCPU()
		t0 := time.Now()
		p, err := h.Load(context.Background(), policy.Spec{ID: "gatekeeper-mutation", Module: module, Settings: settings, PoolSize: 1, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		t1, c1 := time.Now(), threadCPU()
		res, err := p.Evaluate(context.Background(), areq)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Verdict().Patch) == 0 {
			b.Fatalf("no patch: %+v", res.Verdict())
		}
		first += time.Since(t1)
		firstCPU += threadCPU() - c1
		load += t1.Sub(t0)
		loadCPU += c1 - c0
		p.Close(context.Background())
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(ms(load), "load-ms")
	b.ReportMetric(ms(first), "first-eval-ms")
	b.ReportMetric(ms(loadCPU), "load-cpu-ms")
	b.ReportMetric(ms(firstCPU), "first-eval-cpu-ms")
}

// TestBenchMutators: the 500 mutators are valid for Gatekeeper and tollgate
// alike and give the same result (the load benchmark measures a set both
// accept).
func TestBenchMutators(t *testing.T) {
	in := loadBenchInput(t)
	settings := benchMutators(500)
	ref, err := NewReference(settings)
	if err != nil {
		t.Fatal(err)
	}
	want := ref.Evaluate(in.req)
	if want.Object == "" {
		t.Fatalf("Gatekeeper: %s", want)
	}
	for _, s := range sides(t) {
		l, err := s.Load(settings)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Evaluate(in.req)
		l.Close()
		if err != nil || !SameOutcome(want, got) {
			t.Fatalf("%s: %v %s\ngatekeeper: %s", s.Name(), err, got, want)
		}
	}
}
