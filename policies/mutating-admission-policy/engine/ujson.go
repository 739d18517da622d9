package engine

import "github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/ujson"

// decodeUnstructured decodes a JSON object into unstructured content
// exactly as sigsjson.UnmarshalCaseSensitivePreserveInts(b, &m) with m a
// nil map[string]any does, without reflection; ok=false when it declines
// (internal/ujson), and the caller uses sigsjson.
func decodeUnstructured(b []byte) (map[string]any, bool) {
	return ujson.Decode(b, ujson.Options{Numbers: ujson.IntOrFloat})
}

// encodeUnstructured is encoding/json.Marshal(v) for unstructured content,
// without reflection; ok=false when it declines (internal/ujson: other Go
// types, Go int included, NaN and infinities, deep nesting), and the caller
// uses encoding/json.
func encodeUnstructured(v map[string]any) ([]byte, bool) {
	return ujson.Encode(v, ujson.Options{})
}
