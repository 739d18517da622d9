package gkdiff

import (
	"strings"
	"testing"
)

// sides are the tollgate sides every comparison runs: the engine natively and
// the Wasm module through the host. Building them is a failure, never a skip.
func sides(t testing.TB) []Side {
	t.Helper()
	module, err := LoadModule()
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWasmSide(module)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return []Side{NativeSide{}, w}
}

func TestCases(t *testing.T) {
	cases, err := LoadCases("testdata")
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := LoadFixtures("testdata")
	if err != nil {
		t.Fatal(err)
	}
	known, err := LoadKnown("testdata")
	if err != nil {
		t.Fatal(err)
	}
	ss := sides(t)
	var compared, mutated, rejected, refused, knownSeen int
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			settings, err := c.SettingsJSON()
			if err != nil {
				t.Fatal(err)
			}
			ref, refErr := NewReference(settings)
			// The case's own guards: it tests what it says.
			switch {
			case c.Refused && refErr == nil:
				t.Fatalf("the case says Gatekeeper refuses these settings; it accepts them")
			case !c.Refused && refErr != nil:
				t.Fatalf("Gatekeeper refuses the settings: %v", refErr)
			case c.Refused && c.Reason != "" && !strings.Contains(refErr.Error(), c.Reason):
				t.Fatalf("Gatekeeper's refusal does not contain %q: %v", c.Reason, refErr)
			}
			for _, s := range ss {
				diffs := compareCase(t, c, s, settings, ref, refErr, fixtures)
				for _, d := range diffs {
					if k, ok := known.match(c.Name, s.Name()); ok {
						knownSeen++
						t.Logf("KNOWN DIFFERENCE (%s): %s\n%s", k.Why, c.Name, d)
						continue
					}
					t.Errorf("%s\ncase: %s (%s)", d, c.Name, c.Rule)
				}
				if len(diffs) == 0 {
					if _, ok := known.match(c.Name, s.Name()); ok {
						t.Errorf("case %s on %s is listed in known-differences.yaml but agrees with Gatekeeper: remove it from the list", c.Name, s.Name())
					}
				}
			}
			if refErr != nil {
				refused++
				return
			}
			for i := range c.Requests {
				compared++
				r, _ := c.Requests[i].Request(fixtures)
				o := ref.Evaluate(r)
				if o.Rejected {
					rejected++
				} else if o.Object != "" {
					mutated++
				}
			}
		})
	}
	t.Logf("%d cases: %d requests compared on %d sides (%d mutated, %d rejected by Gatekeeper), %d settings refused; %d known differences seen", len(cases), compared, len(ss), mutated, rejected, refused, knownSeen)
	if len(cases) < 100 {
		t.Errorf("%d hand-written cases; the suite promises at least 100", len(cases))
	}
}

// compareCase runs one case on one side and returns its differences; a
// broken guard of the case (expect, contains) fails the test directly.
func compareCase(t *testing.T, c Case, s Side, settings []byte, ref *Reference, refErr error, fixtures Fixtures) []Difference {
	t.Helper()
	loaded, err := s.Load(settings)
	if loaded != nil {
		defer loaded.Close()
	}
	if c.TollgateRefuses {
		if err == nil {
			return []Difference{{Side: s.Name(), Settings: string(settings), Want: "refused by tollgate by design: " + c.Reason, Got: "accepted"}}
		}
		if !strings.Contains(err.Error(), c.Reason) {
			return []Difference{{Side: s.Name(), Settings: string(settings), Want: "refused with " + c.Reason, Got: "refused: " + err.Error()}}
		}
		return nil
	}
	if refErr != nil || err != nil {
		switch {
		case refErr == nil:
			return []Difference{{Side: s.Name(), Settings: string(settings), Want: "accepted", Got: "refused: " + err.Error()}}
		case err == nil:
			return []Difference{{Side: s.Name(), Settings: string(settings), Want: "refused: " + refErr.Error(), Got: "accepted"}}
		case c.Reason != "" && !strings.Contains(err.Error(), c.Reason):
			return []Difference{{Side: s.Name(), Settings: string(settings), Want: "refused with " + c.Reason + ": " + refErr.Error(), Got: "refused: " + err.Error()}}
		}
		return nil
	}
	var diffs []Difference
	for i, cr := range c.Requests {
		r, err := cr.Request(fixtures)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		want := ref.Evaluate(r)
		checkGuards(t, cr, want)
		got, err := loaded.Evaluate(r)
		if err != nil {
			diffs = append(diffs, Difference{Side: s.Name(), Settings: string(settings), Request: &r, Want: want.String(), Got: "host error: " + err.Error()})
			continue
		}
		if !SameOutcome(want, got) {
			diffs = append(diffs, Difference{Side: s.Name(), Settings: string(settings), Request: &r, Want: want.String(), Got: got.String()})
			continue
		}
		if want.Rejected && cr.Contains != "" && !strings.Contains(got.Message, cr.Contains) {
			diffs = append(diffs, Difference{Side: s.Name(), Settings: string(settings), Request: &r, Want: "rejected with " + cr.Contains + ": " + want.Message, Got: got.String()})
		}
	}
	return diffs
}

// checkGuards fails when Gatekeeper's outcome is not the one the case says.
func checkGuards(t *testing.T, cr CaseRequest, want Outcome) {
	t.Helper()
	kind := "unchanged"
	if want.Rejected {
		kind = "rejected"
	} else if want.Object != "" {
		kind = "mutated"
	}
	if cr.Expect == "" {
		t.Fatalf("request %q: no expect (mutated, unchanged or rejected); Gatekeeper: %s", cr.Name, want)
	}
	if cr.Expect != kind {
		t.Fatalf("request %q: the case expects %s, Gatekeeper: %s", cr.Name, cr.Expect, want)
	}
	if cr.Contains != "" && !strings.Contains(want.Message+want.Object, cr.Contains) {
		t.Fatalf("request %q: Gatekeeper's outcome does not contain %q: %s", cr.Name, cr.Contains, want)
	}
}
