package gkdiff

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
)

// Canonical re-encodes JSON with sorted keys and numbers in one form (an
// integer as an integer, any other number as the shortest float64), so that
// JSON-equal documents give equal strings.
func Canonical(b []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v interface{}
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(canonicalValue(v))
	if err != nil {
		return "", err
	}
	return string(out), nil
}

func canonicalValue(v interface{}) interface{} {
	switch x := v.(type) {
	case map[string]interface{}:
		for k, e := range x {
			x[k] = canonicalValue(e)
		}
		return x
	case []interface{}:
		for i, e := range x {
			x[i] = canonicalValue(e)
		}
		return x
	case json.Number:
		return json.Number(canonicalNumber(string(x)))
	}
	return v
}

// canonicalNumber writes a JSON number so that 1, 1.0 and 1e0 are equal.
func canonicalNumber(s string) string {
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return s
	}
	f, _, err := big.ParseFloat(s, 10, 256, big.ToNearestEven)
	if err != nil {
		return s
	}
	if f.IsInt() {
		i, _ := f.Int(nil)
		return i.String()
	}
	g, _ := f.Float64()
	return strconv.FormatFloat(g, 'g', -1, 64)
}
