package gkdiff

import (
	"strings"
	"testing"
)

// TestCaseGuards checks every hand-written case against Gatekeeper alone:
// its refusal, expect and contains guards say what Gatekeeper does, so a
// case that no longer tests its rule fails here whatever tollgate does.
func TestCaseGuards(t *testing.T) {
	cases, err := LoadCases("testdata")
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := LoadFixtures("testdata")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]int{}
	for _, c := range cases {
		rules[strings.SplitN(c.Rule, ":", 2)[0]]++
		t.Run(c.Name, func(t *testing.T) {
			settings, err := c.SettingsJSON()
			if err != nil {
				t.Fatal(err)
			}
			ref, refErr := NewReference(settings)
			switch {
			case (c.Refused) != (refErr != nil):
				t.Fatalf("refused=%v, Gatekeeper: %v", c.Refused, refErr)
			case c.Refused && c.Reason != "" && !strings.Contains(refErr.Error(), c.Reason):
				t.Fatalf("Gatekeeper's refusal does not contain %q: %v", c.Reason, refErr)
			case refErr != nil:
				t.Logf("refused: %v", refErr)
				return
			}
			for _, cr := range c.Requests {
				r, err := cr.Request(fixtures)
				if err != nil {
					t.Fatal(err)
				}
				o := ref.Evaluate(r)
				t.Logf("%s: %s", cr.Name, o)
				checkGuards(t, cr, o)
			}
		})
	}
	t.Logf("cases per rule: %v", rules)
}
