// Package ujsontest checks package ujson against its references, in each
// mode (ujson.Options). For tests only: it uses reflection (the references)
// and package testing.
package ujsontest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson"
	sigsjson "sigs.k8s.io/json"
)

// Modes are the decoding modes, each with Int set as its user sets it:
// engine (sigs.k8s.io/json, Go int declined) and jsonengine (encoding/json
// with UseNumber, Go int encoded; numbers as float64 for its tables).
var Modes = []ujson.Options{
	{Numbers: ujson.IntOrFloat},
	{Numbers: ujson.IntOrFloatInf, Int: true},
	{Numbers: ujson.Float, Int: true},
}

// Reference decodes b as the library that n names does: what ujson.Decode
// must reproduce.
func Reference(n ujson.Numbers, b []byte) (map[string]any, error) {
	switch n {
	case ujson.IntOrFloat:
		var m map[string]any
		err := sigsjson.UnmarshalCaseSensitivePreserveInts(b, &m)
		return m, err
	case ujson.IntOrFloatInf:
		// jsonengine's decodeObjectLibrary on the whole input.
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if len(bytes.Trim(b[d.InputOffset():], " \t\r\n")) > 0 {
			return nil, errors.New("data after the value")
		}
		if v == nil {
			return nil, nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("not a JSON object")
		}
		return fromNumbers(m).(map[string]any), nil
	case ujson.Float:
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, err
		}
		if v == nil {
			return nil, nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("not a JSON object")
		}
		return m, nil
	}
	panic(fmt.Sprintf("ujsontest: numbers %d", n))
}

// fromNumbers is jsonengine's: a json.Number is Int64() when that succeeds,
// else Float64() with its error ignored (+-Inf out of range).
func fromNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = fromNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// CheckDecode checks ujson.Decode(b, o) against the reference: ok implies
// the same value (Go types and the sign of zero included) and no reference
// error. It returns ok.
func CheckDecode(t testing.TB, o ujson.Options, b []byte) bool {
	t.Helper()
	got, ok := ujson.Decode(b, o)
	want, err := Reference(o.Numbers, b)
	if !ok {
		if got != nil {
			t.Errorf("%+v: Decode(%q) declined with a non-nil map", o, b)
		}
		return false
	}
	if err != nil {
		t.Fatalf("%+v: Decode(%q) accepted what the reference rejects (%v): %#v", o, b, err, got)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v: Decode(%q):\n got %#v\nwant %#v", o, b, got, want)
	}
	// DeepEqual does not tell -0.0 from 0.0 nor types inside NaN; check
	// the encodings too.
	if g, w := fmt.Sprintf("%#v", got), fmt.Sprintf("%#v", want); g != w {
		t.Fatalf("%+v: Decode(%q):\n got %s\nwant %s", o, b, g, w)
	}
	return true
}

// CheckEncode checks ujson.Encode(v, o) against encoding/json.Marshal: ok
// implies the same bytes. It returns ok.
func CheckEncode(t testing.TB, o ujson.Options, v map[string]any) bool {
	t.Helper()
	got, ok := ujson.Encode(v, o)
	if !ok {
		if got != nil {
			t.Errorf("%+v: Encode declined with non-nil bytes", o)
		}
		return false
	}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%+v: Encode(%#v) accepted what encoding/json rejects (%v): %s", o, v, err, got)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%+v: Encode(%#v):\n got %s\nwant %s", o, v, got, want)
	}
	return true
}

// CheckDecodeComplete is CheckDecode in each mode, and checks that Decode
// does not decline an object the reference accepts (shorter than 1000 bytes,
// so not nested too deep for it), and that what it decodes re-encodes as
// encoding/json encodes it.
func CheckDecodeComplete(t testing.TB, b []byte) {
	t.Helper()
	for _, o := range Modes {
		if CheckDecode(t, o, b) {
			m, _ := ujson.Decode(b, o)
			CheckEncode(t, o, m)
			continue
		}
		if m, err := Reference(o.Numbers, b); err == nil && m != nil && len(b) < 1000 {
			t.Fatalf("%+v: declined %q, which the reference decodes to %#v", o, b, m)
		}
	}
}
