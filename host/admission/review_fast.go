package admission

import (
	"sync"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// The fast path of ParseReview and ParseRequest: one pass of fastjson over
// the body checks its syntax (json.Valid's rules) and indexes it, and the
// few fields the host reads are taken from the index; the object and the
// rest of the request are never decoded. encoding/json, the reference,
// checked the whole body three times and skipped over the object twice more
// (a quarter of serve's CPU on a 5 KB Pod).
//
// It answers only the plain form the apiserver sends: member names matching
// exactly and at most once, names without escapes or non-ASCII bytes, the
// strings strings and kind/resource objects. For anything else (a
// case-insensitive match, a duplicate, a wrong type, a null, invalid JSON)
// it answers false and the reference runs on the same bytes, so that every
// answer and every error is the reference's. TestParseReviewFastMatches and
// FuzzParseReviewFast compare the two.

// maxFastBody bounds the bodies parsed with a pooled index (four bytes per
// byte, kept for reuse): larger bodies, rare and dominated by their own
// size, take the reference path rather than keep a large index alive.
const maxFastBody = 1 << 20

var parsers = sync.Pool{New: func() any { return new(fastjson.Parser) }}

// withParsed parses data, a JSON object of at most maxFastBody bytes
// without surrounding space, with a pooled index and calls fn with it; false
// when data is anything else.
func withParsed(data []byte, fn func(top fastjson.Value) (*Request, bool)) (*Request, bool) {
	if len(data) == 0 || len(data) > maxFastBody || data[0] != '{' || data[len(data)-1] != '}' {
		return nil, false
	}
	p := parsers.Get().(*fastjson.Parser)
	defer parsers.Put(p)
	top, err := p.Parse(data)
	if err != nil {
		return nil, false
	}
	return fn(top)
}

// parseReviewFast is ParseReview's fast path; data is trimmed.
func parseReviewFast(data []byte) (*Request, bool) { return withParsed(data, reviewFromValue) }

// parseRequestFast is ParseRequest's fast path (raw untrimmed, as the
// reference takes it: the fast path declines surrounding space).
func parseRequestFast(raw []byte) (*Request, bool) { return withParsed(raw, requestFromValue) }

// reviewFromValue reads an AdmissionReview or a bare AdmissionRequest.
func reviewFromValue(top fastjson.Value) (*Request, bool) {
	var kindV, apiV, reqV fastjson.Value
	if !members(top, func(name string, v fastjson.Value) bool {
		switch name {
		case "kind":
			kindV = v
		case "apiVersion":
			apiV = v
		case "request":
			reqV = v
		default:
			return false
		}
		return true
	}, "kind", "apiVersion", "request") {
		return nil, false
	}
	// the reference decodes kind and apiVersion into strings, ignoring errors
	kind, _ := kindV.Str()
	apiVersion, _ := apiV.Str()
	if kind == "AdmissionReview" || reqV.Exists() {
		if kind != "" && kind != "AdmissionReview" || apiVersion != "" && !hasPrefix(apiVersion, "admission.k8s.io/") ||
			reqV.IsNull() {
			return nil, false // an error: the reference words it
		}
		return requestFromValue(reqV)
	}
	return requestFromValue(top)
}

// requestFromValue reads the request object v; false for anything but the
// plain form, and for a request the reference refuses.
func requestFromValue(v fastjson.Value) (*Request, bool) {
	if v.Kind() != fastjson.Object {
		return nil, false
	}
	r := &Request{Raw: v.Raw()}
	var objV fastjson.Value
	ok := members(v, func(name string, m fastjson.Value) bool {
		switch name {
		case "uid":
			return str(m, &r.UID)
		case "operation":
			return str(m, &r.Operation)
		case "namespace":
			return str(m, &r.Namespace)
		case "name":
			return str(m, &r.Name)
		case "kind":
			return groupVersion(m, &r.Kind.Group, &r.Kind.Version, &r.Kind.Kind, "kind")
		case "resource":
			return groupVersion(m, &r.Resource.Group, &r.Resource.Version, &r.Resource.Resource, "resource")
		case "object":
			objV = m
			return true
		}
		return false
	}, "uid", "operation", "namespace", "name", "kind", "resource", "object")
	if !ok || r.UID == "" || r.Operation == "" || r.Kind.Kind == "" {
		return nil, false
	}
	switch r.Operation {
	case "CREATE", "UPDATE", "DELETE", "CONNECT":
	default:
		return nil, false
	}
	if objV.Kind() != fastjson.Null {
		r.Object = objV.Raw()
	}
	return r, true
}

// groupVersion reads a kind or resource object: group, version and the
// member named last.
func groupVersion(m fastjson.Value, group, version, last *string, lastName string) bool {
	return m.Kind() == fastjson.Object && members(m, func(n string, f fastjson.Value) bool {
		switch n {
		case "group":
			return str(f, group)
		case "version":
			return str(f, version)
		}
		return str(f, last)
	}, "group", "version", lastName)
}

// members calls fn for the members of object o named exactly one of names,
// each at most once, and skips the others. It answers false, without
// calling fn further, when fn does, and for what encoding/json would read
// differently: a member name with an escape or a non-ASCII byte, one of
// names twice, or a name matching one of names only case-insensitively.
func members(o fastjson.Value, fn func(name string, v fastjson.Value) bool, names ...string) bool {
	var seen uint16
	for it := o.Iter(); it.Next(); {
		k := it.Key().Raw()
		k = k[1 : len(k)-1]
		for _, c := range k {
			if c == '\\' || c >= 0x80 {
				return false
			}
		}
		for i, n := range names {
			if string(k) == n {
				if seen&(1<<i) != 0 || !fn(n, it.Value()) {
					return false
				}
				seen |= 1 << i
				break
			}
			if equalFoldASCII(k, n) {
				return false
			}
		}
	}
	return true
}

// str sets *dst to string value v; false for other kinds (a null included:
// rare, and left to the reference).
func str(v fastjson.Value, dst *string) bool {
	s, ok := v.Str()
	*dst = s
	return ok
}

func equalFoldASCII(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
