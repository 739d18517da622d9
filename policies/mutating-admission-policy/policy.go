package main

import (
	"bytes"
	"context"
	"sync"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

// compiled caches the engines by their settings bytes. The host sends the
// settings with every validate call and one policy instance normally sees one
// settings value, so the cache is tiny and the lookup a byte comparison with
// the most recent settings (no hashing of the whole policy per request).
var compiled struct {
	sync.Mutex
	entries []compiledEntry // most recently used first
}

type compiledEntry struct {
	settings []byte
	engine   *engine.Engine
}

const maxCachedSettings = 4

func engineFor(settings []byte) (*engine.Engine, error) {
	compiled.Lock()
	defer compiled.Unlock()
	for i, c := range compiled.entries {
		if bytes.Equal(c.settings, settings) {
			if i > 0 {
				copy(compiled.entries[1:i+1], compiled.entries[:i])
				compiled.entries[0] = c
			}
			return c.engine, nil
		}
	}
	e, err := engine.Compile(settings)
	if err != nil {
		return nil, err
	}
	if e.Settings().FromCluster {
		e = e.WithCluster(newHostCluster(capabilities.Host{Call: guest.HostCall}))
	}
	if len(compiled.entries) >= maxCachedSettings {
		compiled.entries = compiled.entries[:maxCachedSettings-1]
	}
	entry := compiledEntry{settings: bytes.Clone(settings), engine: e}
	compiled.entries = append([]compiledEntry{entry}, compiled.entries...)
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
		return mutateResponse(res.Object), nil
	default:
		return kubewarden.AcceptRequest()
	}
}

// mutateResponse is kubewarden.MutateRequest(object) for an object the engine
// encoded: compact JSON from encoding/json (or a pruned copy of it), which
// MutateRequest would validate and compact again, two passes of
// encoding/json's scanner over the object. TestMutateResponse checks that the
// bytes are the same.
func mutateResponse(object []byte) []byte {
	const head, tail = `{"accepted":true,"mutated_object":`, `}`
	out := make([]byte, 0, len(head)+len(object)+len(tail))
	out = append(out, head...)
	out = append(out, object...)
	return append(out, tail...)
}
