package jsonengine

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/cel/library"
)

// TestFormatLibrary compares this package's format library with
// k8s.io/apiserver's (library.ConstantFormats, which needs package net and so
// is not in TinyGo builds): the same names, Format names and regex sizes (the
// cost estimator reads them), and the same messages for every validator on
// strings that pass and fail each check (lengths, dots, dashes, case,
// prefixes, URIs, UUIDs, base64, dates and times). TestAgainstEngine's
// "format library" case compares the CEL functions through both engines and
// test/mapdiff's "format library" case through Kubernetes' admission plugin.
func TestFormatLibrary(t *testing.T) {
	var want, got []string
	for name := range library.ConstantFormats {
		want = append(want, name)
	}
	for name := range constantFormats {
		got = append(got, name)
	}
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("formats: apiserver %v, jsonengine %v", want, got)
	}
	inputs := []string{
		"", "a", "A", "-", "a-", "-a", "a-b", "my-name", "123-abc", "1abc", "abc-123", "a.b", "a..b", ".a", "a.", "Bad_Name",
		"example.com", "apiextensions.k8s.io", "apiextensions.k8s.io/v1beta1", "a/b/c", "/a", "a/", "k8s.io/x~y", "x_y.z",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 63) + "-", strings.Repeat("a.", 127), strings.Repeat("a", 254),
		strings.Repeat("b", 253) + ".c", "my-label-prefix-", "mysubdomain.prefix.-", "ab-", "a--",
		"http://example.com", "https://example.com/a?b=c#d", "not a uri", "/relative/path", "mailto:x@y", "http://[::1]:80/", "http://%zz", "*",
		"123e4567-e89b-12d3-a456-426614174000", "123E4567E89B12D3A456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000",
		"aGVsbG8=", "aGVsbG8", "aGVsbA==", "aGVs bG8=", "====", "YQ==",
		"2021-01-01", "2021-02-30", "2021-1-1", "21-01-01", "2024-02-29",
		"2021-01-01T00:00:00Z", "2021-01-01t23:59:59.123+01:00", "2021-01-01T25:00:00Z", "2021-01-01T00:60:00Z", "2021-01-01T00:00:00", "2021-01-01 00:00:00Z", "2021-01-01T00:00:00ZT",
		"value", "-x", "x-", "a_b.c-d", strings.Repeat("v", 64), "ünïcode",
	}
	for _, name := range want {
		w, g := library.ConstantFormats[name], constantFormats[name]
		if w.Name != g.Name || w.MaxRegexSize != g.MaxRegexSize {
			t.Errorf("%s: apiserver {%s %d}, jsonengine {%s %d}", name, w.Name, w.MaxRegexSize, g.Name, g.MaxRegexSize)
		}
		passed, failed := 0, 0
		for _, in := range inputs {
			wm, gm := w.ValidateFunc(in), g.ValidateFunc(in)
			if !reflect.DeepEqual(wm, gm) {
				t.Errorf("%s.validate(%q):\napiserver  %q\njsonengine %q", name, in, wm, gm)
			}
			if len(wm) == 0 {
				passed++
			} else {
				failed++
			}
		}
		if passed == 0 || failed == 0 {
			t.Errorf("%s: %d inputs pass and %d fail; the table must have both", name, passed, failed)
		}
	}
}
