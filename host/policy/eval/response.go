package eval

import (
	"encoding/json"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// decodeResponseFast decodes a ValidationResponse without running
// encoding/json over mutated_object, the one field that can be large: it finds
// the response's members, decodes each small field with encoding/json, and
// keeps mutated_object as the raw slice of out (not checked here: the diff
// that follows checks it, and any failure re-runs the reference decoding).
//
// It answers false, leaving r in an unspecified state, for anything but the
// plain form policies send (an object whose keys are exactly the fields'
// names, each at most once); the caller then decodes with json.Unmarshal, so
// that case-insensitive keys, duplicates and errors behave as they always did.
//
// With x, a mutated_object that is a JSON object is checked and indexed into
// x as it is passed (fastjson.Index.ScanValue) instead of skipped, and mo is
// where it lies in out: the diff then uses that index (admission.DiffIndexed)
// instead of scanning it again. An invalid one makes the answer false.
func decodeResponseFast(out []byte, r *protocol.ValidationResponse, x *fastjson.Index) (mo [2]int, ok bool) {
	*r = protocol.ValidationResponse{}
	i := fastjson.SkipSpace(out, 0)
	if i >= len(out) || out[i] != '{' {
		return mo, false
	}
	var seen uint8
	i = fastjson.SkipSpace(out, i+1)
	if i < len(out) && out[i] == '}' {
		return mo, fastjson.SkipSpace(out, i+1) == len(out)
	}
	for {
		if i >= len(out) || out[i] != '"' {
			return mo, false
		}
		kend := fastjson.StringEnd(out, i)
		if kend < 0 {
			return mo, false
		}
		key := string(out[i+1 : kend-1]) // no allocation: compared only
		i = fastjson.SkipSpace(out, kend)
		if i >= len(out) || out[i] != ':' {
			return mo, false
		}
		vs := fastjson.SkipSpace(out, i+1)
		var ve int
		if x != nil && key == "mutated_object" && vs < len(out) && out[vs] == '{' {
			end, ok := x.ScanValue(out, vs)
			if !ok {
				return mo, false
			}
			ve, mo = end, [2]int{vs, end}
		} else if ve = skipValue(out, vs); ve < 0 {
			return mo, false
		}
		v := out[vs:ve]
		var bit uint8
		var err error
		switch key {
		case "accepted":
			bit = 1
			switch string(v) { // the two literals without encoding/json's reflection
			case "true":
				r.Accepted = true
			case "false":
				r.Accepted = false
			default:
				err = json.Unmarshal(v, &r.Accepted)
			}
		case "message":
			bit, err = 2, json.Unmarshal(v, &r.Message)
		case "code":
			bit, err = 4, json.Unmarshal(v, &r.Code)
		case "mutated_object":
			bit = 8
			r.MutatedObject = v
		case "audit_annotations":
			bit, err = 16, json.Unmarshal(v, &r.AuditAnnotations)
		case "warnings":
			bit, err = 32, json.Unmarshal(v, &r.Warnings)
		default:
			return mo, false
		}
		if err != nil || seen&bit != 0 {
			return mo, false
		}
		seen |= bit
		i = fastjson.SkipSpace(out, ve)
		if i >= len(out) {
			return mo, false
		}
		if out[i] == '}' {
			return mo, fastjson.SkipSpace(out, i+1) == len(out)
		}
		if out[i] != ',' {
			return mo, false
		}
		i = fastjson.SkipSpace(out, i+1)
	}
}

// structural marks the bytes skipValue stops at inside a container.
var structural = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// skipValue returns the index after the value starting at b[i], or -1. It
// matches brackets and skips strings but does not check the syntax.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return fastjson.StringEnd(b, i)
	case '{', '[':
	default: // a number or literal: up to the next delimiter
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\r' && b[i] != '\t' {
			i++
		}
		return i
	}
	depth := 0
	for ; i < len(b); i++ {
		for i < len(b) && !structural[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case '"':
			e := fastjson.StringEnd(b, i)
			if e < 0 {
				return -1
			}
			i = e - 1
		case '{', '[':
			depth++
		default:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
