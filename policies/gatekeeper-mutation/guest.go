package main

import (
	"bytes"
	"container/list"

	wapc "github.com/wapc/wapc-guest-tinygo"

	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/jsonv"
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
)

// hostCall reaches the host's capabilities; native tests answer it through
// sdk/guest and sdk/policytest (cluster_test.go).
var hostCall = wapc.HostCall

// getNamespace reads a Namespace through kubernetes/get_resource, as
// Gatekeeper's webhook does: from the cache first and, when the cache does
// not have it, from the apiserver (pkg/webhook/mutation.go). The policy
// entry must declare v1 Namespace in contextAwareResources.
func getNamespace(name string) ([]byte, bool, error) {
	for _, disableCache := range []bool{false, true} {
		b := append([]byte(`{"api_version":"v1","kind":"Namespace","name":`), fastjson.AppendQuoteMinimal(nil, name)...)
		if disableCache {
			b = append(b, `,"disable_cache":true}`...)
		} else {
			b = append(b, `,"disable_cache":false}`...)
		}
		answer, err := hostCall("kubewarden", "kubernetes", "get_resource", b)
		switch {
		case err == nil && string(bytes.TrimSpace(answer)) != "null":
			return answer, true, nil
		case err != nil && !capabilities.IsNotFound(err):
			return nil, false, hostError("kubernetes/get_resource: " + err.Error())
		}
	}
	return nil, false, nil
}

type hostError string

func (e hostError) Error() string { return string(e) }

// The guest keeps the compiled settings of the policies it answered last:
// the host sends the settings with every request, and compiling 500 mutators
// per request would cost more than the mutation. The host shares one pool of
// instances between all the policies of this module
// (policy.Spec.ShareInstances), so an instance answers policies of several
// settings one after another: it keeps up to maxCachedSettings of them, the
// least recently used evicted. A System depends on its settings alone, so an
// evicted one is compiled again when its settings come back: slower, never a
// different answer.
var compiled struct {
	byKey map[string]*list.Element // string(settings) -> element of lru
	lru   list.List                // of *compiledSystem, most recently used first
}

type compiledSystem struct {
	settings string
	system   *engine.System
}

// maxCachedSettings bounds the compiled settings an instance keeps. They are
// small: 40 distinct copies of the five-mutator bench settings
// (testdata/settings-bench.yaml) fit in the 1 MB of linear memory an instance
// has after its first call.
const maxCachedSettings = 64

func system(settings []byte) (*engine.System, error) {
	if f := compiled.lru.Front(); f != nil {
		if c := f.Value.(*compiledSystem); c.settings == string(settings) {
			return c.system, nil
		}
	}
	if el, ok := compiled.byKey[string(settings)]; ok {
		compiled.lru.MoveToFront(el)
		return el.Value.(*compiledSystem).system, nil
	}
	s, err := engine.Compile(settings)
	if err != nil {
		return nil, err
	}
	if compiled.byKey == nil {
		compiled.byKey = map[string]*list.Element{}
	}
	for compiled.lru.Len() >= maxCachedSettings {
		last := compiled.lru.Back()
		delete(compiled.byKey, last.Value.(*compiledSystem).settings)
		compiled.lru.Remove(last)
	}
	c := &compiledSystem{settings: string(settings), system: s}
	compiled.byKey[c.settings] = compiled.lru.PushFront(c)
	return s, nil
}

func settingsResponse(err error) []byte {
	if err == nil {
		return []byte(`{"valid":true}`)
	}
	b := append([]byte(`{"valid":false,"message":`), fastjson.AppendQuoteMinimal(nil, err.Error())...)
	return append(b, '}')
}

func reject(msg string) []byte {
	b := append([]byte(`{"accepted":false,"message":`), fastjson.AppendQuoteMinimal(nil, msg)...)
	return append(b, '}')
}

// validateSettings checks the settings as Compile does.
func validateSettings(payload []byte) ([]byte, error) {
	_, err := system(payload)
	return settingsResponse(err), nil
}

// str is the text of a string field of the request (raw, as RawFieldList
// found it, its syntax checked), "" for any other value. It decodes the
// string alone: a Parse of it would allocate a parser's slabs, per field.
func str(raw []byte) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	return string(fastjson.Unquote(raw))
}

// answer is the buffer of validate's mutated answers, reused from call to
// call: an instance answers one call at a time, and the host copies an
// answer out of the guest's memory before the instance serves another.
// scratch is the engine's memory, reused likewise, and reader the index
// of the lazily read request object (valid until the next call).
var (
	answer  []byte
	scratch engine.Scratch
	reader  jsonv.Reader
)

// validate answers a Kubewarden ValidationRequest
// {"request": <AdmissionRequest>, "settings": {...}}.
func validate(payload []byte) ([]byte, error) {
	// One pass over the payload: the request's fields found and its object
	// parsed on the way, the settings skipped.
	top, req, obj, err := reader.RawFieldsNested(payload, "request", "object", jsonv.IntsPreserved)
	if err != nil {
		return reject("cannot decode the validation request: " + err.Error()), nil
	}
	settings := top.Get("settings")
	if len(settings) == 0 {
		settings = []byte("{}")
	}
	sys, err := system(settings)
	if err != nil {
		return reject(err.Error()), nil
	}
	if req == nil {
		return reject("cannot decode the admission request: the validation request has no request object"), nil
	}
	r := engine.Request{
		Operation: str(req.Get("operation")),
		Name:      str(req.Get("name")),
		Namespace: str(req.Get("namespace")),
		Object:    req.Get("object"),
		OldObject: req.Get("oldObject"),
		Parsed:    obj,
		Out:       append(answer[:0], `{"accepted":true,"mutated_object":`...),
		Scratch:   &scratch,
	}
	if k, err := jsonv.RawFieldList(req.Get("kind")); err == nil {
		r.Kind = engine.GVK{Group: str(k.Get("group")), Version: str(k.Get("version")), Kind: str(k.Get("kind"))}
	}
	if u, err := jsonv.RawFieldList(req.Get("userInfo")); err == nil {
		r.Username = str(u.Get("username"))
	}
	if sys.FromCluster() {
		r.Cluster = getNamespace
	}
	if len(r.Object) == 0 || string(r.Object) == "null" {
		return []byte(`{"accepted":true}`), nil
	}
	mutated, changed, err := sys.Mutate(r)
	if err != nil {
		return reject(err.Error()), nil
	}
	if !changed {
		return []byte(`{"accepted":true}`), nil
	}
	answer = append(mutated, '}')
	return answer, nil
}
