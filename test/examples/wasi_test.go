package examples_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// TestWasiRequiredLabels runs the standard-Go WASI example (executionMode
// wasi) on its testdata.
func TestWasiRequiredLabels(t *testing.T) {
	h := newHost(t)
	p := loadExample(t, h, "wasi-required-labels", "settings.json")
	if p.Mode() != "wasi" {
		t.Fatalf("mode %s", p.Mode())
	}
	for _, tt := range []requestCase{
		{request: "pod-labelled.json", want: verdict{accepted: true}},
		{request: "pod-missing-app.json", want: verdict{message: "bad lacks the required labels: app"}},
	} {
		t.Run(tt.request, func(t *testing.T) {
			res, err := p.Validate(context.Background(), testfixture.File(t, "examples/wasi-required-labels/testdata/"+tt.request))
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tt.want)
		})
	}
	_, err := h.Load(context.Background(), policy.Spec{
		ID: "empty", Module: testfixture.Module(t, "examples/wasi-required-labels"),
		Settings: settingsOf(t, "wasi-required-labels", "settings-empty.json"),
	})
	if !errors.Is(err, policy.ErrInvalidSettings) || !strings.Contains(err.Error(), "required_labels must list at least one label") {
		t.Fatalf("err = %v", err)
	}
}
