package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// The ValidationRequest envelope is decoded by hand for the large parts.
// encoding/json validates every byte through its scanner, one indirect call
// per byte, which in Wasm costs more than the rest of a small policy; the
// envelope carries the settings (the whole policy) and the object, both
// decoded elsewhere (the settings are compared with the cached ones, the
// object is decoded by the engine, which validates it). skimObject only finds
// where the members of a JSON object start and end; the small members of the
// request are still decoded with encoding/json.

// member is one member of a JSON object: its key (still quoted and escaped)
// and its value, as slices of the input.
type member struct {
	key, value []byte
}

var errSkim = errors.New("malformed JSON")

// skimObject splits a JSON object into its members without decoding them.
// It checks the structure (strings, nesting, separators) but not the
// contents of scalars; callers decode what they use.
func skimObject(b []byte) ([]member, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, errSkim
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		if skipSpace(b, i+1) != len(b) {
			return nil, errSkim
		}
		return nil, nil
	}
	// Room for the small objects of the request (kind, resource, userInfo:
	// three members) at once, instead of growing from one; the request
	// itself (about a dozen) grows once.
	out := make([]member, 0, 8)
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, errSkim
		}
		end, err := skipString(b, i)
		if err != nil {
			return nil, err
		}
		key := b[i:end]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, errSkim
		}
		i = skipSpace(b, i+1)
		end, err = skipValue(b, i)
		if err != nil {
			return nil, err
		}
		out = append(out, member{key: key, value: b[i:end]})
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, errSkim
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			if skipSpace(b, i+1) != len(b) {
				return nil, errSkim
			}
			return out, nil
		default:
			return nil, errSkim
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			i++ // the escaped byte; \uXXXX's hex digits are plain bytes
		case c < 0x20:
			return 0, errSkim
		}
	}
	return 0, errSkim
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSkim
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		// Nested containers: count depth, skip strings; the structure
		// inside is validated by whoever decodes the value.
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errSkim
	default:
		// A literal or a number: up to the next delimiter.
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if i == start {
					return 0, errSkim
				}
				return i, nil
			}
			i++
		}
		if i == start {
			return 0, errSkim
		}
		return i, nil
	}
}

// validationRequest is a ValidationRequest with the request decoded.
type validationRequest struct {
	Request  protocol.KubernetesAdmissionRequest
	Settings []byte
}

// decodeValidationRequest decodes the envelope: the settings and the
// request's object, oldObject and options are kept as raw slices of payload,
// the other members of the request are decoded with encoding/json. A payload
// the skimmer does not take as it is (malformed, a key spelled in another
// case, a duplicate key, escapes in keys) is decoded entirely by
// encoding/json instead, so that both give the same result.
func decodeValidationRequest(payload []byte) (*validationRequest, error) {
	if vr, ok := skimValidationRequest(payload); ok {
		return vr, nil
	}
	var full struct {
		Request  protocol.KubernetesAdmissionRequest `json:"request"`
		Settings json.RawMessage                     `json:"settings"`
	}
	if err := json.Unmarshal(payload, &full); err != nil {
		return nil, fmt.Errorf("decoding the validation request: %w", err)
	}
	return &validationRequest{Request: full.Request, Settings: full.Settings}, nil
}

func skimValidationRequest(payload []byte) (*validationRequest, bool) {
	top, err := skimObject(payload)
	if err != nil {
		return nil, false
	}
	var request, settings []byte
	for _, m := range top {
		switch {
		case string(m.key) == `"request"` && request == nil:
			request = m.value
		case string(m.key) == `"settings"` && settings == nil:
			settings = m.value
		case bytes.EqualFold(m.key, []byte(`"request"`)), bytes.EqualFold(m.key, []byte(`"settings"`)), bytes.IndexByte(m.key, '\\') >= 0:
			return nil, false // duplicates and case variants: encoding/json's rules
		}
	}
	vr := &validationRequest{Settings: settings}
	if request == nil || string(request) == "null" {
		return vr, true
	}
	members, err := skimObject(request)
	if err != nil {
		return nil, false
	}
	var object, oldObject, options []byte
	for _, m := range members {
		if bytes.IndexByte(m.key, '\\') >= 0 {
			return nil, false
		}
		var raw *[]byte
		switch string(m.key) {
		case `"object"`:
			raw = &object
		case `"oldObject"`:
			raw = &oldObject
		case `"options"`:
			raw = &options
		default:
			for _, big := range [...]string{`"object"`, `"oldObject"`, `"options"`} {
				if bytes.EqualFold(m.key, []byte(big)) {
					return nil, false
				}
			}
			continue
		}
		if *raw != nil {
			return nil, false
		}
		*raw = m.value
	}
	if !decodeSmallMembers(members, &vr.Request) {
		// The small members, re-assembled into an object for encoding/json.
		small := []byte{'{'}
		for _, m := range members {
			switch string(m.key) {
			case `"object"`, `"oldObject"`, `"options"`:
				continue
			}
			if len(small) > 1 {
				small = append(small, ',')
			}
			small = append(small, m.key...)
			small = append(small, ':')
			small = append(small, m.value...)
		}
		small = append(small, '}')
		vr.Request = protocol.KubernetesAdmissionRequest{}
		if err := json.Unmarshal(small, &vr.Request); err != nil {
			return nil, false
		}
	}
	// The same bytes encoding/json keeps in a RawMessage (null included).
	vr.Request.Object = json.RawMessage(object)
	vr.Request.OldObject = json.RawMessage(oldObject)
	vr.Request.Options = json.RawMessage(options)
	return vr, true
}

// decodeSmallMembers decodes the request's small members in the shapes the
// apiserver writes them (plain strings without escapes, the kind and
// resource objects, userInfo without extra, dryRun as a boolean), without
// encoding/json. Anything else (an unknown key, a null, an escape, extra)
// returns false: encoding/json then decodes them, with its rules.
func decodeSmallMembers(members []member, r *protocol.KubernetesAdmissionRequest) bool {
	for _, m := range members {
		var ok bool
		switch string(m.key) {
		case `"object"`, `"oldObject"`, `"options"`:
			ok = true
		case `"uid"`:
			r.UID, ok = plainString(m.value)
		case `"subResource"`:
			r.SubResource, ok = plainString(m.value)
		case `"requestSubResource"`:
			r.RequestSubResource, ok = plainString(m.value)
		case `"name"`:
			r.Name, ok = plainString(m.value)
		case `"namespace"`:
			r.Namespace, ok = plainString(m.value)
		case `"operation"`:
			r.Operation, ok = plainString(m.value)
		case `"kind"`:
			ok = decodeGVK(m.value, &r.Kind)
		case `"requestKind"`:
			if r.RequestKind == nil {
				r.RequestKind = &protocol.GroupVersionKind{}
			}
			ok = decodeGVK(m.value, r.RequestKind)
		case `"resource"`:
			ok = decodeGVR(m.value, &r.Resource)
		case `"requestResource"`:
			if r.RequestResource == nil {
				r.RequestResource = &protocol.GroupVersionResource{}
			}
			ok = decodeGVR(m.value, r.RequestResource)
		case `"userInfo"`:
			ok = decodeUserInfo(m.value, &r.UserInfo)
		case `"dryRun"`:
			switch string(m.value) {
			case "true", "false":
				b := string(m.value) == "true"
				r.DryRun, ok = &b, true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// plainString is the content of a JSON string without escapes (and valid
// UTF-8, which encoding/json would otherwise replace).
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	s := v[1 : len(v)-1]
	if bytes.IndexByte(s, '\\') >= 0 || bytes.IndexByte(s, '"') >= 0 || !utf8.Valid(s) {
		return "", false
	}
	return string(s), true
}

func decodeGVK(v []byte, out *protocol.GroupVersionKind) bool {
	return decodeGroupVersion(v, &out.Group, &out.Version, `"kind"`, &out.Kind)
}

func decodeGVR(v []byte, out *protocol.GroupVersionResource) bool {
	return decodeGroupVersion(v, &out.Group, &out.Version, `"resource"`, &out.Resource)
}

// decodeGroupVersion decodes {"group", "version", third}, plain strings,
// into its arguments; any other key, or more than three members (a
// duplicate: encoding/json's rules), fails.
func decodeGroupVersion(v []byte, group, version *string, third string, last *string) bool {
	members, err := skimObject(v)
	if err != nil || len(members) > 3 {
		return false
	}
	for _, m := range members {
		s, ok := plainString(m.value)
		if !ok {
			return false
		}
		switch string(m.key) {
		case `"group"`:
			*group = s
		case `"version"`:
			*version = s
		case third:
			*last = s
		default:
			return false
		}
	}
	return true
}

func decodeUserInfo(v []byte, out *protocol.UserInfo) bool {
	members, err := skimObject(v)
	if err != nil {
		return false
	}
	for _, m := range members {
		var ok bool
		switch string(m.key) {
		case `"username"`:
			out.Username, ok = plainString(m.value)
		case `"uid"`:
			out.UID, ok = plainString(m.value)
		case `"groups"`:
			if out.Groups != nil {
				return false
			}
			out.Groups, ok = plainStrings(m.value)
		}
		if !ok {
			return false
		}
	}
	return true
}

// plainStrings decodes an array of plain strings.
func plainStrings(v []byte) ([]string, bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return nil, false
	}
	out := []string{}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == ']' {
		return out, skipSpace(v, i+1) == len(v)
	}
	for {
		end, err := skipString(v, i)
		if err != nil || v[i] != '"' {
			return nil, false
		}
		s, ok := plainString(v[i:end])
		if !ok {
			return nil, false
		}
		out = append(out, s)
		i = skipSpace(v, end)
		if i >= len(v) {
			return nil, false
		}
		switch v[i] {
		case ',':
			i = skipSpace(v, i+1)
		case ']':
			return out, skipSpace(v, i+1) == len(v)
		default:
			return nil, false
		}
	}
}
