package fastjson

import (
	"encoding/json"
	"testing"
)

// podStrings are the strings of the realistic 5 KB Pod (keys and values),
// the input of the quoting benchmarks.
func podStrings(b *testing.B) []string {
	var v any
	if err := json.Unmarshal(fixtures(b)["testdata/pod.json"], &v); err != nil {
		b.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				out = append(out, k)
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			out = append(out, x)
		}
	}
	walk(v)
	return out
}

// BenchmarkQuote quotes every key and string value of the 5 KB Pod once
// per iteration.
func BenchmarkQuote(b *testing.B) {
	strs := podStrings(b)
	buf := make([]byte, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, s := range strs {
			buf = AppendQuote(buf, s)
		}
	}
}

// BenchmarkValid and BenchmarkParse check (and index) the 5 KB Pod review.
func BenchmarkValid(b *testing.B) {
	data := fixtures(b)["testdata/pod.json"]
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid(data) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	data := fixtures(b)["testdata/pod.json"]
	var p Parser
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
