package fastjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// refString is what ScanString and AppendUnquote must give for the string
// that starts at data[0], by encoding/json: the string can only end at the
// first quote that is not escaped (a backslash escapes the byte after it),
// and it is one when json.Valid takes the bytes up to it for a whole value;
// the text is what json.Unmarshal decodes it to.
func refString(data []byte) (end int, text string, ok bool) {
	for j := 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			if !json.Valid(data[:j+1]) || json.Unmarshal(data[:j+1], &text) != nil {
				return 0, "", false
			}
			return j + 1, text, true
		}
	}
	return 0, "", false
}

// checkString checks ScanString, AppendUnquote and Unquote on the string
// that starts at data[0], placed at an offset in a larger buffer.
func checkString(t *testing.T, data []byte) {
	t.Helper()
	if len(data) == 0 || data[0] != '"' {
		if _, _, ok := ScanString(data, 0); ok {
			t.Fatalf("ScanString(%q, 0) accepted what does not start with a quote", data)
		}
		return
	}
	buf := append([]byte("[1,"), data...)
	end, escaped, ok := ScanString(buf, 3)
	wantEnd, want, wantOK := refString(data)
	if ok != wantOK || ok && end-3 != wantEnd {
		t.Fatalf("ScanString(%q) = %d, %v; encoding/json: end %d, %v", data, end-3, ok, wantEnd, wantOK)
	}
	if !ok {
		return
	}
	q := data[:wantEnd]
	body := q[1 : len(q)-1]
	wantEscaped := bytes.IndexByte(body, '\\') >= 0 || !isASCII(body)
	if escaped != wantEscaped {
		t.Fatalf("ScanString(%q): escaped %v, want %v", q, escaped, wantEscaped)
	}
	if got := AppendUnquote([]byte("x"), q); string(got) != "x"+want {
		t.Fatalf("AppendUnquote(x, %q) = %q, encoding/json decodes %q", q, got, want)
	}
	if got := Unquote(q); string(got) != want {
		t.Fatalf("Unquote(%q) = %q, encoding/json decodes %q", q, got, want)
	}
}

var stringCases = []string{
	`""`, `"a"`, `"a" `, `"a",1]`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\u00E9\u0000\u001f\u2028\uffff"`,
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, `"\ude00\ud83d"`,
	`"\ud83d\n"`, `"\ud83d\\u"`, "\"\xff\"", "\"x\xc3\"", "\"\xed\xa0\x80\"", "\"\xf0\x9f\x98\"", "\"\xff\\n\xc3\xa9\xc3\"",
	"\"日本語 ✓ 😀\"", "\"\x7f\"",
	// Malformed.
	`"`, `"a`, `"\"`, `"\`, "\"\x01\"", "\"\n\"", `"\x"`, `"\'"`, `"\u12"`, `"\u12g4"`, `"\ud83d\uzzzz"`, `"\u"`,
	`a"`, ``, ` "a"`,
}

func TestScanString(t *testing.T) {
	for _, c := range stringCases {
		checkString(t, []byte(c))
	}
	// A decoder calls it once per string: it allocates nothing.
	q := []byte(`{"k":"a\u00e9\n` + strings.Repeat("x", 40) + `"}`)
	if n := testing.AllocsPerRun(100, func() { ScanString(q, 5) }); n != 0 {
		t.Errorf("ScanString allocates %v times", n)
	}
	for _, i := range []int{-1, 2, 3} {
		if _, _, ok := ScanString([]byte(`"a"`), i); ok {
			t.Errorf("ScanString(%q, %d) accepted an offset that is not a string's", `"a"`, i)
		}
	}
}

func FuzzScanString(f *testing.F) {
	for _, c := range stringCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkString(t, data) })
}
