package main

import (
	"container/list"
	"context"
	"sync"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

// compiled caches the engines by their settings bytes, the least recently
// used evicted past maxCachedSettings. The host sends the settings with every
// call, and the host shares one pool of instances between all the policies of
// this module (policy.Spec.ShareInstances): an instance answers policies of
// many settings, one after another. The lookup compares the most recently
// used settings first (the common case: the same policy again), then looks
// the bytes up in a map. An engine depends on its settings alone, so an
// evicted one is compiled again when its settings come back: slower (about
// 0.2 s), never a different answer.
var compiled struct {
	sync.Mutex
	byKey map[string]*list.Element // string(settings) -> element of lru
	lru   list.List                // of *compiledEntry, most recently used first
}

type compiledEntry struct {
	settings string
	engine   *engine.Engine
}

// maxCachedSettings bounds the compiled policies an instance keeps: 64, more
// than the policies of this module a server usually loads. One takes about
// 0.8 MB of the instance's linear memory, the collector's headroom included
// (the documented sidecar and authorizer settings): an instance grows from 40
// MB with one to 92 MB with 64, against 33-40 MB for an instance per policy
// (see RATIONALE.md "Why is the compiled policy cached by the settings
// bytes").
const maxCachedSettings = 64

func engineFor(settings []byte) (*engine.Engine, error) {
	compiled.Lock()
	defer compiled.Unlock()
	if f := compiled.lru.Front(); f != nil {
		if c := f.Value.(*compiledEntry); c.settings == string(settings) {
			return c.engine, nil
		}
	}
	if el, ok := compiled.byKey[string(settings)]; ok {
		compiled.lru.MoveToFront(el)
		return el.Value.(*compiledEntry).engine, nil
	}
	e, err := engine.Compile(settings)
	if err != nil {
		return nil, err
	}
	if e.Settings().FromCluster {
		e = e.WithCluster(newHostCluster(capabilities.Host{Call: guest.HostCall}))
	}
	if compiled.byKey == nil {
		compiled.byKey = map[string]*list.Element{}
	}
	for compiled.lru.Len() >= maxCachedSettings {
		last := compiled.lru.Back()
		delete(compiled.byKey, last.Value.(*compiledEntry).settings)
		compiled.lru.Remove(last)
	}
	entry := &compiledEntry{settings: string(settings), engine: e}
	compiled.byKey[entry.settings] = compiled.lru.PushFront(entry)
	return e, nil
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := engineFor(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}

func validate(payload []byte) ([]byte, error) {
	vr, err := decodeValidationRequest(payload)
	if err != nil {
		return nil, err
	}
	e, err := engineFor(vr.Settings)
	if err != nil {
		return nil, err
	}
	res, err := e.Evaluate(context.Background(), &vr.Request)
	if err != nil {
		return nil, err
	}
	switch {
	case !res.Accepted:
		return kubewarden.RejectRequest(kubewarden.Message(res.Message), kubewarden.Code(res.Code))
	case res.Object != nil:
		// the engine encoded the object (compact JSON from encoding/json, or a
		// pruned copy of it): kubewarden.MutateRequest would validate and
		// compact it again, two passes of encoding/json's scanner over it
		// (TestMutateResponse: the bytes are the same)
		return fastjson.MutateRequest(res.Object), nil
	default:
		return kubewarden.AcceptRequest()
	}
}
