//go:build !wasip1

package main

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// compareEnvelope fails when decodeEnvelope answers differently from
// kubewarden.ParseValidationRequest (the request, the settings' bytes, or
// an answer where the library fails); it returns whether it answered.
func compareEnvelope(t testing.TB, payload []byte) bool {
	t.Helper()
	var wantSettings rawSettings
	want, wantErr := kubewarden.ParseValidationRequest(payload, &wantSettings)
	got, gotSettings, ok := decodeEnvelope(payload)
	if !ok {
		return false
	}
	if wantErr != nil {
		t.Fatalf("decodeEnvelope answered where the library fails (%v): %.500q", wantErr, payload)
	}
	if !reflect.DeepEqual(got, want) || string(gotSettings) != string(wantSettings) || (gotSettings == nil) != (wantSettings == nil) {
		t.Fatalf("envelopes differ on %.800q\n got %+v %q\nwant %+v %q", payload, got, gotSettings, want, wantSettings)
	}
	return true
}

// envelopes are the test payloads: every review of test/testdata/reviews
// and this module's testdata with each settings file, as the host encodes
// them, and as hand-written variants.
func envelopes(t testing.TB) [][]byte {
	t.Helper()
	reviews, _ := filepath.Glob("../../../test/testdata/reviews/*.json")
	mine, _ := filepath.Glob("../testdata/*.json")
	settings, _ := filepath.Glob("../testdata/*.yml")
	if len(reviews) < 4 || len(mine) < 3 || len(settings) < 3 {
		t.Fatalf("test data missing: %d %d %d", len(reviews), len(mine), len(settings))
	}
	var out [][]byte
	for _, f := range append(reviews, mine...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var review struct {
			Request json.RawMessage `json:"request"`
		}
		if err := json.Unmarshal(raw, &review); err != nil {
			t.Fatal(err)
		}
		if review.Request == nil {
			review.Request = raw // a bare request
		}
		var req protocol.KubernetesAdmissionRequest
		if err := json.Unmarshal(review.Request, &req); err != nil {
			t.Fatal(err)
		}
		for _, s := range settings {
			b, _ := json.Marshal(protocol.ValidationRequest{Request: review.Request, Settings: readJSON(t, s)})
			out = append(out, b)
			// as the host encodes the request (its own struct)
			r, _ := json.Marshal(req)
			b, _ = json.Marshal(protocol.ValidationRequest{Request: r, Settings: readJSON(t, s)})
			out = append(out, b)
		}
	}
	for _, s := range []string{
		`{"request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","userInfo":{"username":"a","groups":[],"extra":{"k":[]}},"object":null,"oldObject":null,"dryRun":null,"options":null,"requestKind":null,"requestResource":null},"settings":null}`,
		`{"request":{"uid":"u","userInfo":{"username":"a\u00e9\ud83d\ude00","uid":"\u0000x","groups":["a","b\n"],"extra":{"k":["v"],"l":[]}},"dryRun":true,"name":"n","namespace":"ns","subResource":"s","requestSubResource":"s","requestKind":{"group":"g","version":"v","kind":"K"},"requestResource":{"group":"g","version":"v","resource":"r"}},"settings":{"a": 1 }}`,
		` { "settings" : [1,2] , "request" : { "uid" : "x" , "object" : { "a" : [ ] } } } `,
		`{"request":{"uid":"\xff\xfe"}}`,
		`{"request":{"UID":"x"}}`,
		`{"Request":{"uid":"x"}}`,
		`{"request":{"uid":"x","uid":"y"}}`,
		`{"request":{"kind":{"group":"a"},"kind":{"version":"b"}}}`,
		`{"request":{"uid":null}}`,
		`{"request":{"uid":1}}`,
		`{"request":{"dryRun":"true"}}`,
		`{"request":{"userInfo":{"groups":null}}}`,
		`{"request":{"userInfo":{"extra":{"k":null}}}}`,
		`{"request":{"userInfo":{"extra":{"k":["a"],"k":["b"]}}}}`,
		`{"request":{"other":1}}`,
		`{"request":null}`,
		`{"request":[]}`,
		`{}`,
		`[]`,
		`{"request":{"uid":"x"}`,
		`{"request":{"uid":"x"}} {}`,
		`{"request":{"uid":"x"},"settings":{"a":1,}}`,
		`{"request":{"uid":"x"},"settings":{"a":1},"settings":{"b":2}}`,
		`{"request":{"uid":"x"},"extra":1}`,
		`{"request":{"object":{"a":"\ud800"}}}`,
		`{"request":{"uid":"x\u0041"}}`,
		`{"re\u0071uest":{"uid":"x"}}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// TestEnvelopeAgainstLibrary: decodeEnvelope gives what
// kubewarden.ParseValidationRequest gives, declining (parseRequest then
// uses the library) only what the host does not write, and answering on
// every envelope of the test data.
func TestEnvelopeAgainstLibrary(t *testing.T) {
	answered := 0
	all := envelopes(t)
	for _, p := range all {
		if compareEnvelope(t, p) {
			answered++
		}
	}
	for _, p := range all[:len(all)-27] { // the reviews as written and as the host encodes them
		if _, _, ok := decodeEnvelope(p); !ok {
			t.Fatalf("declined a test review: %.300s", p)
		}
	}
	if answered < len(all)-27+4 {
		t.Fatalf("answered %d of %d", answered, len(all))
	}
	// parseRequest falls back: the same error as the library's.
	for _, p := range []string{`{"request":{"uid":1}}`, `{"request":null}`, `[]`} {
		_, _, err := parseRequest([]byte(p))
		_, want := kubewarden.ParseValidationRequest([]byte(p), new(rawSettings))
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Fatalf("%s: %v, want %v", p, err, want)
		}
	}
}

// TestEnvelopeMutated: the test envelopes with bytes changed, removed and
// inserted at random (the large ones too, which FuzzEnvelope leaves out of
// its corpus: Go's fuzzer stalls on them).
func TestEnvelopeMutated(t *testing.T) {
	all := envelopes(t)
	r := rand.New(rand.NewSource(31))
	for i := 0; i < 3000; i++ {
		p := append([]byte(nil), all[r.Intn(len(all))]...)
		for j := 0; j < 1+r.Intn(4) && len(p) > 1; j++ {
			k := r.Intn(len(p))
			switch r.Intn(3) {
			case 0:
				p[k] = byte(r.Intn(256))
			case 1:
				p = append(p[:k], p[k+1:]...)
			case 2:
				p = append(p[:k], append([]byte{"\"{}[],:\\ nu0"[r.Intn(12)]}, p[k:]...)...)
			}
		}
		compareEnvelope(t, p)
	}
}

// FuzzEnvelope: any payload, mutated from the small test envelopes.
func FuzzEnvelope(f *testing.F) {
	for _, p := range envelopes(f) {
		if len(p) < 1024 {
			f.Add(p)
		}
	}
	r := rand.New(rand.NewSource(31))
	for _, p := range envelopes(f)[:6] {
		for i := 0; i < 20; i++ {
			q := []byte(strings.Clone(string(p)))
			q[r.Intn(len(q))] = "\"{}[],:\\ nu0"[r.Intn(12)]
			f.Add(q)
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		compareEnvelope(t, payload)
	})
}
