package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson"
	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson/ujsontest"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The differential tests and fuzzers of the decoder and encoder are
// internal/ujson's, in each of its modes; these are on engine's typed
// objects, in engine's mode.

// refDecodeUnstructured is what decodeUnstructured must reproduce.
func refDecodeUnstructured(b []byte) (map[string]any, error) {
	return ujsontest.Reference(ujson.IntOrFloat, b)
}

// checkDecode checks decodeUnstructured against the reference on b: ok
// implies the same value and no reference error. It returns ok.
func checkDecode(t testing.TB, b []byte) bool {
	t.Helper()
	return ujsontest.CheckDecode(t, ujson.Options{Numbers: ujson.IntOrFloat}, b)
}

// checkEncode checks encodeUnstructured against encoding/json.Marshal on v:
// ok implies the same bytes. It returns ok.
func checkEncode(t testing.TB, v map[string]any) bool {
	t.Helper()
	return ujsontest.CheckEncode(t, ujson.Options{}, v)
}

// TestUnstructuredRealistic: the typed fixtures' encodings decode as
// sigsjson decodes them, and their unstructured content encodes as
// encoding/json encodes it.
func TestUnstructuredRealistic(t *testing.T) {
	big, err := os.ReadFile("testdata/ujson/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	fixtures := map[string]string{"pod-plain": pod, "deployment-plain": deployment, "pod-3k": string(big)}
	for name, y := range canonicalFixtures {
		fixtures[name] = y
	}
	names := make([]string, 0, len(fixtures))
	for name := range fixtures {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			obj := decodeCanonicalFixture(t, fixtures[name])
			typedJSON, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			if !checkDecode(t, typedJSON) {
				t.Fatalf("declined the encoding of a typed %s", name)
			}
			content, _ := decodeUnstructured(typedJSON)
			if !checkEncode(t, content) {
				t.Fatalf("declined the content of a typed %s", name)
			}
			// ToUnstructured's content (other Go types than the decoder's
			// for some fields) is encoded exactly or declined.
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			checkEncode(t, u)
			enc, _ := encodeUnstructured(content)
			if !checkDecode(t, enc) {
				t.Fatalf("declined the encoding of the content of a %s", name)
			}
			// Indented and escaped variants decode the same.
			var ind bytes.Buffer
			if err := json.Indent(&ind, typedJSON, "", "\t "); err != nil {
				t.Fatal(err)
			}
			if !checkDecode(t, ind.Bytes()) {
				t.Fatalf("declined the indented encoding of a %s", name)
			}
		})
	}
}

// (about 3 KB).
func ujsonPod(t testing.TB) []byte {
	t.Helper()
	y, err := os.ReadFile("testdata/ujson/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Compile([]byte(sidecarJSONPatch))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := e.decodeObject(mustJSON(t, string(y)), schema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	typedJSON, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return typedJSON
}

// BenchmarkDecodeUnstructured: decodeUnstructured against sigsjson on the
// encoding of a typed Pod.
func BenchmarkDecodeUnstructured(b *testing.B) {
	pod := ujsonPod(b)
	b.Run("ujson", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeUnstructured(pod); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("sigsjson", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refDecodeUnstructured(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeUnstructured: encodeUnstructured against encoding/json on
// the unstructured content of a typed Pod.
func BenchmarkEncodeUnstructured(b *testing.B) {
	pod := ujsonPod(b)
	content, err := refDecodeUnstructured(pod)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ujson", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := encodeUnstructured(content); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(pod)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(content); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestUnstructuredConcurrent: the codec is safe for concurrent use (the
// encoder's size hint is shared), on objects of different sizes.
func TestUnstructuredConcurrent(t *testing.T) {
	big, err := refDecodeUnstructured(ujsonPod(t))
	if err != nil {
		t.Fatal(err)
	}
	objs := []map[string]any{big, {"a": int64(1)}, {"s": strings.Repeat("<x>", 3000)}, {}}
	want := make([][]byte, len(objs))
	for i, o := range objs {
		if want[i], err = json.Marshal(o); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 200 {
				k := (g + i) % len(objs)
				b, ok := encodeUnstructured(objs[k])
				if !ok || !bytes.Equal(b, want[k]) {
					errs <- fmt.Errorf("goroutine %d: encoding %d differs: %s", g, k, b)
					return
				}
				m, ok := decodeUnstructured(b)
				if !ok || !reflect.DeepEqual(m, objs[k]) {
					errs <- fmt.Errorf("goroutine %d: decoding %d differs", g, k)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
