package admission

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// sameParse fails when the fast path answers data differently from the
// reference: the fast path may decline (the reference then answers), but
// what it answers must be the reference's answer, field by field and byte
// by byte. It reports whether the fast path answered.
func sameParse(t *testing.T, data []byte) bool {
	t.Helper()
	data = bytes.TrimSpace(data)
	fast, ok := parseReviewFast(data)
	ref, err := parseReviewReference(data)
	if ok {
		if err != nil {
			t.Fatalf("fast path answered %+v, the reference refused: %v\ninput: %q", fast, err, data)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("fast path %+v\nreference %+v\ninput: %q", fast, ref, data)
		}
	}
	fr, fok := parseRequestFast(data)
	rr, rerr := parseRequestReference(data)
	if fok && (rerr != nil || !reflect.DeepEqual(fr, rr)) {
		t.Fatalf("ParseRequest: fast path %+v, reference %+v (%v)\ninput: %q", fr, rr, rerr, data)
	}
	return ok
}

// TestParseReviewFastMatches: the realistic reviews of test/testdata/reviews
// and the repository's review fixtures take the fast path and get the
// reference's answer; every unusual form declines it (the reference
// answers) or answers the same.
func TestParseReviewFastMatches(t *testing.T) {
	files, _ := filepath.Glob(testfixture.Path("test/testdata/reviews/*.json"))
	more, _ := filepath.Glob(testfixture.Path("examples/*/testdata/*.json"))
	files = append(files, more...)
	fast := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"uid"`)) {
			continue // settings, not a review
		}
		if sameParse(t, b) {
			fast++
		} else if strings.Contains(f, "test/testdata/reviews") {
			t.Errorf("%s: the realistic review did not take the fast path", f)
		}
	}
	if fast < 5 {
		t.Fatalf("only %d fixtures took the fast path", fast)
	}
	req := `"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"ns","name":"p","object":{"a":1}`
	for _, tc := range []struct {
		in   string
		fast bool // whether the fast path must answer
	}{
		{`{` + req + `}`, true},
		{`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `}}`, true},
		{` {"kind":"AdmissionReview","request": {` + req + `} } `, true},
		{`{"request":{` + req + `}}`, true},
		{`{"request":{` + req + `},"response":{"x":1},"other":[1,2]}`, true},
		{`{"request":{` + req + `,"userInfo":{"username":"u\u00e9"},"oldObject":null}}`, true},
		{`{"request":{"uid":"\u0075\ud800x","operation":"CREATE","kind":{"kind":"Pod"},"name":"` + "\xff\xfe" + `"}}`, true},
		{`{"request":{"uid":"u","operation":"CREATE","kind":{"kind":"Pod"},"object":null}}`, true},
		{`{"request":{` + req + `,"object":null}}`, false}, // twice
		{`{"request":{"uid":"u","operation":"DELETE","kind":{"kind":"Pod"}}}`, true},
		{`{"Request":{` + req + `}}`, false},
		{`{"request":{` + req + `},"request":{` + req + `}}`, false},
		{`{"KIND":"AdmissionReview","request":{` + req + `}}`, false},
		{`{"kind":"AdmissionReview","request":{` + req + `,"UID":"v"}}`, false},
		{`{"kind":"AdmissionReview","request":{` + req + `,"uid":"v"}}`, false},
		{`{"kind":"AdmissionReview","request":{` + req + `,"u\u0069d":"v"}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":null,"operation":"CREATE","kind":{"kind":"Pod"}}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":5,"operation":"CREATE","kind":{"kind":"Pod"}}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":{"Kind":"Pod"}}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","kind":"Pod"}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":"u","operation":"PATCH","kind":{"kind":"Pod"}}}`, false},
		{`{"kind":"AdmissionReview","request":{"uid":"","operation":"CREATE","kind":{"kind":"Pod"}}}`, false},
		{`{"kind":"AdmissionReview","request":null}`, false},
		{`{"kind":"AdmissionReview"}`, false},
		{`{"kind":"Pod","request":{` + req + `}}`, false},
		{`{"apiVersion":"v1","request":{` + req + `}}`, false},
		{`{"kind":"AdmissionReview","request":[1]}`, false},
		{`{"kind":"AdmissionReview","request":{` + req + `}`, false},
		{`{"kind":"AdmissionReview","request":{` + req + `}} x`, false},
		{`[{` + req + `}]`, false},
		{``, false},
	} {
		if got := sameParse(t, []byte(tc.in)); got != tc.fast {
			t.Errorf("fast path answered %v, want %v: %s", got, tc.fast, tc.in)
		}
	}
}

// FuzzParseReviewFast: on any input the fast path declines or answers what
// the reference answers.
func FuzzParseReviewFast(f *testing.F) {
	files, _ := filepath.Glob(testfixture.Path("test/testdata/reviews/*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && len(b) < 20000 {
			f.Add(b)
		}
	}
	f.Add([]byte(podRequest))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + podRequest + `}`))
	f.Add([]byte(`{"kind":"AdmissionReview","request":{"uid":"\u0075","operation":"CREATE","kind":{"kind":"Pod"},"Name":"x","name":"y"}}`))
	f.Fuzz(func(t *testing.T, b []byte) { sameParse(t, b) })
}
