package jsonengine

import (
	"encoding/json"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson"
)

// JSON for unstructured content without reflection. The engine decodes every
// request's objects and encodes every mutated object (and a JSON patch's
// document); encoding/json does both by reflection, which TinyGo runs slowly
// (it dominated an evaluation of the 5 KB Pod). decodeFast and encodeFast give
// exactly what decodeObject's encoding/json path and json.Marshal give for the
// values unstructured content is made of, and decline (ok=false) whatever else,
// for which the caller uses encoding/json: the result never depends on which
// path answered (TestJSONAgainstEncodingJSON). They are internal/ujson, which
// engine uses too, with this engine's reference on the rules where the two
// differ: encoding/json with UseNumber, then int64 when strconv.ParseInt
// accepts the number, else strconv.ParseFloat's value even out of range (+-Inf);
// and Go int values are encoded, as json.Marshal encodes them.
var unstructuredJSON = ujson.Options{Numbers: ujson.IntOrFloatInf, Int: true}

// decodeFast decodes a JSON object; ok=false when it declines (see above).
func decodeFast(b []byte) (map[string]any, bool) { return ujson.Decode(b, unstructuredJSON) }

// decodeFastValue decodes the JSON object of an embedded table. With floats,
// every number is a float64 (as encoding/json decodes into an any; a number
// out of range is declined, where encoding/json fails), else as decodeFast.
// Anything but an object is declined.
func decodeFastValue(b []byte, floats bool) (any, bool) {
	o := unstructuredJSON
	if floats {
		o.Numbers = ujson.Float
	}
	if m, ok := ujson.Decode(b, o); ok {
		return m, true
	}
	return nil, false
}

// encodeJSON is json.Marshal(v) for unstructured content, without
// reflection when encodeFast can.
func encodeJSON(v map[string]any) ([]byte, error) {
	if b, ok := encodeFast(v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

// encodeFast encodes v as json.Marshal does; ok=false when it declines.
func encodeFast(v map[string]any) ([]byte, bool) { return ujson.Encode(v, unstructuredJSON) }
