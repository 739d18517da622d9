package main

import (
	"sync"

	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// The ValidationRequest envelope without reflection. kubewarden.ParseValidationRequest
// decodes it with encoding/json, by reflection, which TinyGo runs slowly (a
// tenth of a label evaluation natively, more in the module). decodeEnvelope
// reads the envelope the host writes (the request's members by their exact
// names, each once, strings, objects and lists of the types the struct
// declares) with sdk/fastjson, which checks the whole payload with
// json.Valid's rules, and declines anything else (a name in other case,
// an unknown or repeated member, a null where encoding/json would keep a
// zero value, a value of another type): parseRequest then decodes the
// payload with encoding/json, errors included. TestEnvelopeAgainstLibrary
// and FuzzEnvelope compare the two.

// envelope is the parser of the envelopes, whose index is reused from call
// to call (sdk/fastjson.Parser).
var envelope struct {
	sync.Mutex
	p fastjson.Parser
}

// parseRequest is kubewarden.ParseValidationRequest(payload, &raw) with
// the settings' bytes as they came.
func parseRequest(payload []byte) (protocol.KubernetesAdmissionRequest, rawSettings, error) {
	if req, settings, ok := decodeEnvelope(payload); ok {
		return req, settings, nil
	}
	var raw rawSettings
	req, err := kubewarden.ParseValidationRequest(payload, &raw)
	return req, raw, err
}

// decodeEnvelope decodes payload as ParseValidationRequest does; ok=false
// when it declines. The raw members (object, oldObject, options, the
// settings) are slices of the payload, which outlives the request's
// evaluation (validate's call) as it does with ParseValidationRequest.
func decodeEnvelope(payload []byte) (req protocol.KubernetesAdmissionRequest, settings rawSettings, ok bool) {
	envelope.Lock()
	defer envelope.Unlock()
	top, err := envelope.p.Parse(payload)
	if err != nil || top.Kind() != fastjson.Object {
		return req, nil, false
	}
	var request fastjson.Value
	var seenRequest, seenSettings bool
	it := top.Iter()
	for it.Next() {
		switch name(it.Key()) {
		case "request":
			if seenRequest {
				return req, nil, false
			}
			seenRequest, request = true, it.Value()
		case "settings":
			if seenSettings {
				return req, nil, false
			}
			seenSettings = true
			if v := it.Value(); !v.IsNull() {
				settings = v.Raw()
			}
		default:
			return req, nil, false
		}
	}
	if request.Kind() != fastjson.Object || !decodeRequest(request, &req) {
		return req, nil, false
	}
	return req, settings, true
}

// name is the text of a key without escapes ("" for any other: declined
// by the callers, which know no such name).
func name(k fastjson.Value) string {
	raw := k.Raw()
	if len(raw) < 2 {
		return ""
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c >= 0x80 {
			return ""
		}
	}
	return string(raw[1 : len(raw)-1])
}

func decodeRequest(v fastjson.Value, r *protocol.KubernetesAdmissionRequest) bool {
	var seen [15]bool
	once := func(i int) bool {
		if seen[i] {
			return false
		}
		seen[i] = true
		return true
	}
	it := v.Iter()
	for it.Next() {
		m := it.Value()
		ok := false
		switch name(it.Key()) {
		case "uid":
			ok = once(0) && str(m, &r.UID)
		case "kind":
			ok = once(1) && gvk(m, &r.Kind)
		case "resource":
			ok = once(2) && gvr(m, &r.Resource)
		case "subResource":
			ok = once(3) && str(m, &r.SubResource)
		case "requestKind":
			ok = once(4)
			if ok && m.Kind() != fastjson.Null {
				r.RequestKind = new(protocol.GroupVersionKind)
				ok = gvk(m, r.RequestKind)
			}
		case "requestResource":
			ok = once(5)
			if ok && m.Kind() != fastjson.Null {
				r.RequestResource = new(protocol.GroupVersionResource)
				ok = gvr(m, r.RequestResource)
			}
		case "requestSubResource":
			ok = once(6) && str(m, &r.RequestSubResource)
		case "name":
			ok = once(7) && str(m, &r.Name)
		case "namespace":
			ok = once(8) && str(m, &r.Namespace)
		case "operation":
			ok = once(9) && str(m, &r.Operation)
		case "userInfo":
			ok = once(10) && userInfo(m, &r.UserInfo)
		case "object":
			ok = once(11)
			r.Object = m.Raw()
		case "oldObject":
			ok = once(12)
			r.OldObject = m.Raw()
		case "dryRun":
			ok = once(13)
			if ok && m.Kind() != fastjson.Null {
				var b bool
				b, ok = m.Bool()
				r.DryRun = &b
			}
		case "options":
			ok = once(14)
			r.Options = m.Raw()
		}
		if !ok {
			return false
		}
	}
	return true
}

func str(v fastjson.Value, s *string) bool {
	var ok bool
	*s, ok = v.Str()
	return ok
}

func gvk(v fastjson.Value, k *protocol.GroupVersionKind) bool {
	return members(v, func(n string, m fastjson.Value) bool {
		switch n {
		case "group":
			return str(m, &k.Group)
		case "version":
			return str(m, &k.Version)
		case "kind":
			return str(m, &k.Kind)
		}
		return false
	})
}

func gvr(v fastjson.Value, r *protocol.GroupVersionResource) bool {
	return members(v, func(n string, m fastjson.Value) bool {
		switch n {
		case "group":
			return str(m, &r.Group)
		case "version":
			return str(m, &r.Version)
		case "resource":
			return str(m, &r.Resource)
		}
		return false
	})
}

func userInfo(v fastjson.Value, u *protocol.UserInfo) bool {
	return members(v, func(n string, m fastjson.Value) bool {
		switch n {
		case "username":
			return str(m, &u.Username)
		case "uid":
			return str(m, &u.UID)
		case "groups":
			var ok bool
			u.Groups, ok = stringList(m)
			return ok
		case "extra":
			if m.Kind() != fastjson.Object {
				return false
			}
			u.Extra = map[string][]string{}
			return members(m, func(k string, l fastjson.Value) bool {
				vs, ok := stringList(l)
				u.Extra[k] = vs
				return ok
			})
		}
		return false
	})
}

// members calls fn with each member of object v, declining (false) a value
// that is not an object, a name with escapes and a repeated name.
func members(v fastjson.Value, fn func(name string, m fastjson.Value) bool) bool {
	if v.Kind() != fastjson.Object {
		return false
	}
	var seen []string
	it := v.Iter()
	for it.Next() {
		n := name(it.Key())
		if n == "" {
			return false
		}
		for _, s := range seen {
			if s == n {
				return false
			}
		}
		seen = append(seen, n)
		if !fn(n, it.Value()) {
			return false
		}
	}
	return true
}

// stringList decodes a list of strings ([] as an empty list, as encoding/json).
func stringList(v fastjson.Value) ([]string, bool) {
	if v.Kind() != fastjson.Array {
		return nil, false
	}
	out := []string{}
	it := v.Iter()
	for it.Next() {
		s, ok := it.Value().Str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}
