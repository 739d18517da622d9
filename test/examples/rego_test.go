package examples_test

import (
	"context"
	"os"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestRegoExamples runs the OPA example (executionMode opa) and the
// Gatekeeper example (executionMode gatekeeper) on their testdata, and checks
// that every file there is used.
func TestRegoExamples(t *testing.T) {
	h := newHost(t)
	covered := map[string]bool{}
	for _, ex := range []struct {
		example, mode string
		cases         []requestCase
	}{
		{"opa-required-labels", "opa", []requestCase{
			{request: "pod-labelled.json", settings: "settings.json", want: verdict{accepted: true}},
			{request: "pod-missing-owner.json", settings: "settings.json", want: verdict{message: `Pod shop/bad: mandatory label "owner" is missing`}},
		}},
		{"gatekeeper-allowed-registries", "gatekeeper", []requestCase{
			{request: "pod-allowed.json", settings: "settings.json", want: verdict{accepted: true}},
			{request: "pod-disallowed.json", settings: "settings.json"},
		}},
	} {
		for _, tt := range ex.cases {
			t.Run(ex.example+"/"+tt.request, func(t *testing.T) {
				covered[ex.example+"/"+tt.request], covered[ex.example+"/"+tt.settings] = true, true
				p := loadExample(t, h, ex.example, tt.settings)
				if p.Mode() != ex.mode {
					t.Fatalf("mode %s, want %s", p.Mode(), ex.mode)
				}
				res, err := p.Validate(context.Background(), testfixture.File(t, "examples/"+ex.example+"/testdata/"+tt.request))
				if err != nil {
					t.Fatal(err)
				}
				check(t, res, tt.want)
			})
		}
		entries, err := os.ReadDir(testfixture.Path("examples/" + ex.example + "/testdata"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !covered[ex.example+"/"+e.Name()] {
				t.Errorf("examples/%s/testdata/%s is not exercised by this test", ex.example, e.Name())
			}
		}
	}
}
