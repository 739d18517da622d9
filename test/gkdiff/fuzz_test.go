package gkdiff

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/gatekeeper/v3/pkg/mutation"
	"sigs.k8s.io/yaml"
)

// The property differential run: random mutator sets and random requests
// (gen.go), each run by Gatekeeper's own pkg/mutation (reference.go) and by
// both tollgate sides (the engine natively, the Wasm module through the
// host), compared as TestCases compares (refused or not; rejected or not;
// the mutated object as a JSON value).
//
// go test runs fuzzTrials trials of fuzzRequests requests from seed 1:
// GKDIFF_FUZZ_TRIALS and GKDIFF_FUZZ_SEED change both (a longer run:
// GKDIFF_FUZZ_TRIALS=20000 go test -run TestFuzzDifferential -timeout 2h).
// FuzzDifferential is the same property under go's fuzzer (the input is the
// seed): go test -run '^$' -fuzz FuzzDifferential -fuzztime 10m.
//
// A difference is printed with its seed and shrunk to the fewest mutators
// that still show it, as a case to paste into testdata/cases once fixed.

const (
	fuzzTrials   = 3000
	fuzzRequests = 5
	fuzzMutators = 5
	// fuzzClusterTrials is the fromCluster run's count (each trial starts
	// a fake cluster).
	fuzzClusterTrials = 500
)

func envUint(t testing.TB, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// fuzzStats counts what a run compared.
type fuzzStats struct {
	trials, refusedSettings, requests, comparisons   int
	mutated, unchanged, rejected, mutatorsConflicted int
	notConverging                                    int
	kinds                                            map[string]int
}

func TestFuzzDifferential(t *testing.T) {
	trials := envUint(t, "GKDIFF_FUZZ_TRIALS", fuzzTrials)
	seed := envUint(t, "GKDIFF_FUZZ_SEED", 1)
	ss := sides(t)
	st := &fuzzStats{kinds: map[string]int{}}
	start := time.Now()
	failures := 0
	for i := uint64(0); i < trials && failures < 5; i++ {
		s := seed + i
		tr := NewGen(s).Trial(s, fuzzMutators, fuzzRequests)
		if diffs := runTrial(t, ss, &tr, st, false); len(diffs) > 0 {
			failures++
			reportDifference(t, ss, tr, diffs[0], false)
		}
	}
	t.Logf("%d trials from seed %d in %v: %d settings refused by Gatekeeper; %d requests evaluated by Gatekeeper (%d mutated, %d unchanged, %d rejected of which %d not converging), %d comparisons on %d sides; %d mutators in schema conflicts; mutators per kind %v",
		st.trials, seed, time.Since(start).Round(time.Millisecond), st.refusedSettings, st.requests, st.mutated, st.unchanged, st.rejected, st.notConverging, st.comparisons, len(ss), st.mutatorsConflicted, st.kinds)
	// The generator must keep producing every outcome, or the run proves
	// less than it says.
	if trials >= fuzzTrials {
		if st.comparisons < 10000 {
			t.Errorf("%d comparisons; the run promises at least 10000", st.comparisons)
		}
		// Minimum shares, well below what seeds 1 and 2000000 give (the
		// rarer outcomes, conflicts and cycles, about 1.8% and 2%).
		for what, c := range map[string]struct{ n, per int }{
			"mutated": {st.mutated, 50}, "unchanged": {st.unchanged, 50}, "rejected": {st.rejected, 50}, "refused settings": {st.refusedSettings, 50},
			"conflicting mutators": {st.mutatorsConflicted, 100}, "not converging": {st.notConverging, 100},
		} {
			if c.n < int(trials)/c.per {
				t.Errorf("only %d %s in %d trials: the generator no longer covers them", c.n, what, trials)
			}
		}
	}
}

// TestFuzzDifferentialFromCluster is the property run with fromCluster
// settings: the Wasm module through the host, its Namespace reads answered
// by host/capabilities over a fake cluster holding the trial's namespaces,
// against Gatekeeper reading the same namespaces (one that does not exist
// fails the request on both). GKDIFF_FUZZ_CLUSTER_TRIALS sets the count.
func TestFuzzDifferentialFromCluster(t *testing.T) {
	trials := envUint(t, "GKDIFF_FUZZ_CLUSTER_TRIALS", fuzzClusterTrials)
	seed := envUint(t, "GKDIFF_FUZZ_SEED", 1)
	module, err := LoadModule()
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWasmSide(module)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	ss := []Side{ClusterSide{w}}
	st := &fuzzStats{kinds: map[string]int{}}
	failures := 0
	for i := uint64(0); i < trials && failures < 5; i++ {
		s := seed + i
		tr := NewGen(s).Trial(s, fuzzMutators, fuzzRequests)
		if diffs := runTrial(t, ss, &tr, st, true); len(diffs) > 0 {
			failures++
			reportDifference(t, ss, tr, diffs[0], true)
		}
	}
	t.Logf("%d trials from seed %d: %d requests (%d mutated, %d unchanged, %d rejected), %d comparisons", st.trials, seed, st.requests, st.mutated, st.unchanged, st.rejected, st.comparisons)
	if trials >= fuzzClusterTrials && st.rejected < int(trials)/10 {
		t.Errorf("only %d rejections: the run no longer reaches namespaces the cluster does not have", st.rejected)
	}
}

func FuzzDifferential(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42, 1 << 40} {
		f.Add(s)
	}
	ss := sides(f)
	f.Fuzz(func(t *testing.T, seed uint64) {
		tr := NewGen(seed).Trial(seed, fuzzMutators, fuzzRequests)
		if diffs := runTrial(t, ss, &tr, &fuzzStats{kinds: map[string]int{}}, false); len(diffs) > 0 {
			reportDifference(t, ss, tr, diffs[0], false)
		}
	})
}

// newReference is Gatekeeper with the settings, its namespaces those of a
// cluster when fromCluster.
func newReference(settings []byte, fromCluster bool) (*Reference, error) {
	ref, err := NewReference(settings)
	if ref != nil {
		ref.NamespacesFromCluster = fromCluster
	}
	return ref, err
}

// runTrial runs one trial on every side and returns the differences.
func runTrial(t testing.TB, ss []Side, tr *Trial, st *fuzzStats, fromCluster bool) []Difference {
	t.Helper()
	st.trials++
	for _, m := range tr.Mutators {
		st.kinds[m["kind"].(string)]++
	}
	settings := tr.Settings()
	ref, refErr := newReference(settings, fromCluster)
	if refErr != nil {
		st.refusedSettings++
	} else {
		st.mutatorsConflicted += len(ref.Conflicts)
	}
	var wants []Outcome
	if refErr == nil {
		for _, r := range tr.Requests {
			o := ref.Evaluate(r)
			wants = append(wants, o)
			st.requests++
			switch {
			case o.Rejected:
				st.rejected++
				if o.Reason == mutation.ErrNotConverging.Error() {
					st.notConverging++
				}
			case o.Object != "":
				st.mutated++
			default:
				st.unchanged++
			}
		}
	}
	var diffs []Difference
	for _, s := range ss {
		diffs = append(diffs, compareTrial(s, settings, tr.Requests, wants, refErr, st)...)
	}
	return diffs
}

// compareTrial loads the settings on one side and compares every request.
func compareTrial(s Side, settings []byte, reqs []Request, wants []Outcome, refErr error, st *fuzzStats) []Difference {
	loaded, err := s.Load(settings)
	if loaded != nil {
		defer loaded.Close()
	}
	if st != nil {
		st.comparisons++
	}
	switch {
	case refErr != nil && err != nil:
		return nil
	case refErr != nil:
		return []Difference{{Side: s.Name(), Settings: string(settings), Want: "refused: " + refErr.Error(), Got: "accepted"}}
	case err != nil:
		return []Difference{{Side: s.Name(), Settings: string(settings), Want: "accepted", Got: "refused: " + err.Error()}}
	}
	var diffs []Difference
	for i := range reqs {
		r := reqs[i]
		if st != nil {
			st.comparisons++
		}
		got, err := loaded.Evaluate(r)
		switch {
		case err != nil:
			diffs = append(diffs, Difference{Side: s.Name(), Settings: string(settings), Request: &r, Want: wants[i].String(), Got: "host error: " + err.Error()})
		case !SameOutcome(wants[i], got):
			diffs = append(diffs, Difference{Side: s.Name(), Settings: string(settings), Request: &r, Want: wants[i].String(), Got: got.String()})
		}
	}
	return diffs
}

// reportDifference shrinks the trial to the fewest mutators and requests that
// still differ on the side, and fails with it as a case.
func reportDifference(t testing.TB, ss []Side, tr Trial, d Difference, fromCluster bool) {
	t.Helper()
	var side Side
	for _, s := range ss {
		if s.Name() == d.Side {
			side = s
		}
	}
	if d.Request != nil {
		tr.Requests = []Request{*d.Request}
	}
	differs := func(c Trial) bool {
		settings := c.Settings()
		ref, refErr := newReference(settings, fromCluster)
		var wants []Outcome
		if refErr == nil {
			for _, r := range c.Requests {
				wants = append(wants, ref.Evaluate(r))
			}
		}
		return len(compareTrial(side, settings, c.Requests, wants, refErr, nil)) > 0
	}
	for i := 0; i < len(tr.Mutators); {
		c := tr
		c.Mutators = append(append([]map[string]any{}, tr.Mutators[:i]...), tr.Mutators[i+1:]...)
		if len(c.Mutators) > 0 && differs(c) {
			tr = c
			continue
		}
		i++
	}
	if len(tr.Namespaces) > 0 {
		c := tr
		c.Namespaces = nil
		if differs(c) {
			tr = c
		}
	}
	t.Errorf("seed %d: %s\n\nas a case (shrunk):\n%s", tr.Seed, d, caseYAML(tr))
}

// caseYAML writes a shrunk trial as a testdata/cases entry.
func caseYAML(tr Trial) string {
	c := map[string]any{
		"name":       fmt.Sprintf("fuzz/seed-%d", tr.Seed),
		"rule":       "fuzz: <what the difference was>",
		"noDefaults": true,
		"mutators":   tr.Mutators,
	}
	if len(tr.Namespaces) > 0 {
		c["namespaces"] = tr.Namespaces
	}
	var reqs []any
	for _, r := range tr.Requests {
		cr := map[string]any{"objectJSON": string(r.Object), "namespace": r.Namespace, "expect": "<mutated|unchanged|rejected>"}
		if r.Operation != "CREATE" {
			cr["op"] = r.Operation
		}
		if r.Username != "alice" {
			cr["user"] = r.Username
		}
		reqs = append(reqs, cr)
	}
	c["requests"] = reqs
	b, _ := json.Marshal([]any{c})
	y, _ := yaml.JSONToYAML(b)
	return strings.TrimSpace(string(y))
}

// droppingSide is the native side with the settings' last mutator left out:
// a tollgate that forgets a mutator, which the property run must catch.
type droppingSide struct{ NativeSide }

func (droppingSide) Name() string { return "native-dropping-last-mutator" }

func (s droppingSide) Load(settings []byte) (Loaded, error) {
	var v map[string]json.RawMessage
	if err := json.Unmarshal(settings, &v); err != nil {
		return nil, err
	}
	var ms []json.RawMessage
	_ = json.Unmarshal(v["mutators"], &ms)
	if len(ms) > 0 {
		ms = ms[:len(ms)-1]
	}
	v["mutators"], _ = json.Marshal(ms)
	b, _ := json.Marshal(v)
	return s.NativeSide.Load(b)
}

// TestFuzzCatchesADifference: the run's comparison finds a side that is
// wrong (the guard that the property run can fail).
func TestFuzzCatchesADifference(t *testing.T) {
	st := &fuzzStats{kinds: map[string]int{}}
	found := 0
	for s := uint64(1); s <= 200; s++ {
		tr := NewGen(s).Trial(s, fuzzMutators, fuzzRequests)
		found += len(runTrial(t, []Side{droppingSide{}}, &tr, st, false))
	}
	if found < 20 {
		t.Fatalf("a side that drops a mutator differs on %d of %d requests; the run should catch it far more often", found, st.requests)
	}
	t.Logf("a side that drops a mutator differs on %d of %d requests", found, st.requests)
}
