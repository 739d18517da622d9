package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tollgate-dev/tollgate/host/admission"
)

// TestRealisticReviews checks the fixtures of test/testdata/reviews: each is
// an AdmissionReview v1 of a CREATE whose object has the kind the request
// says, the Pod is about 5 KB and the ConfigMap about 50 KB (compact JSON,
// as an apiserver sends them), and the load generator uses every file.
func TestRealisticReviews(t *testing.T) {
	root := "../.."
	want := map[string]struct {
		kind     string
		min, max int // compact object size
	}{
		"test/testdata/reviews/pod.json":           {"Pod", 4800, 5800},
		"test/testdata/reviews/deployment.json":    {"Deployment", 3000, 8000},
		"test/testdata/reviews/service.json":       {"Service", 300, 2000},
		"test/testdata/reviews/ingress.json":       {"Ingress", 300, 2000},
		"test/testdata/reviews/configmap-50k.json": {"ConfigMap", 48 << 10, 52 << 10},
	}
	files, _ := filepath.Glob(filepath.Join(root, "test/testdata/reviews/*.json"))
	if len(files) != len(want) || len(realisticReviews) != len(want) {
		t.Errorf("%d files in test/testdata/reviews, %d in realisticReviews, want %d", len(files), len(realisticReviews), len(want))
	}
	for _, r := range realisticReviews {
		w, ok := want[r.file]
		if !ok {
			t.Errorf("%s: not a known fixture", r.file)
			continue
		}
		raw, err := os.ReadFile(filepath.Join(root, r.file))
		if err != nil {
			t.Fatal(err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.APIVersion != "admission.k8s.io/v1" || head.Kind != "AdmissionReview" {
			t.Errorf("%s: not an admission.k8s.io/v1 AdmissionReview (%+v, %v)", r.file, head, err)
		}
		req, err := admission.ParseReview(raw)
		if err != nil {
			t.Errorf("%s: %v", r.file, err)
			continue
		}
		if req.Operation != "CREATE" || req.Kind.Kind != w.kind || req.UID == "" {
			t.Errorf("%s: operation %q kind %q uid %q, want CREATE %s and a uid", r.file, req.Operation, req.Kind.Kind, req.UID, w.kind)
		}
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(req.Object, &obj); err != nil || obj.Kind != w.kind {
			t.Errorf("%s: object kind %q (%v), want %s", r.file, obj.Kind, err, w.kind)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, req.Object); err != nil {
			t.Fatal(err)
		}
		if n := compact.Len(); n < w.min || n > w.max {
			t.Errorf("%s: object is %d bytes compact, want %d-%d", r.file, n, w.min, w.max)
		}
		if _, err := readReview(filepath.Join(root, r.file)); err != nil {
			t.Errorf("readReview: %v", err)
		}
	}
}
