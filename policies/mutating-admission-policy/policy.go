package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// compiled caches the engines by the SHA-256 of the settings bytes. The host
// sends the settings with every validate call; one policy instance normally
// sees one settings value, so the cache is tiny.
var compiled struct {
	sync.Mutex
	engines map[[32]byte]*engine.Engine
	order   [][32]byte
}

const maxCachedSettings = 4

func engineFor(settings []byte) (*engine.Engine, error) {
	key := sha256.Sum256(settings)
	compiled.Lock()
	defer compiled.Unlock()
	if e, ok := compiled.engines[key]; ok {
		return e, nil
	}
	e, err := engine.Compile(settings)
	if err != nil {
		return nil, err
	}
	if compiled.engines == nil {
		compiled.engines = map[[32]byte]*engine.Engine{}
	}
	if len(compiled.order) >= maxCachedSettings {
		delete(compiled.engines, compiled.order[0])
		compiled.order = compiled.order[1:]
	}
	compiled.engines[key] = e
	compiled.order = append(compiled.order, key)
	return e, nil
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := engineFor(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}

func validate(payload []byte) ([]byte, error) {
	// One pass over the payload: the ValidationRequest with its request decoded.
	var vr struct {
		Request  protocol.KubernetesAdmissionRequest `json:"request"`
		Settings json.RawMessage                     `json:"settings"`
	}
	if err := json.Unmarshal(payload, &vr); err != nil {
		return nil, fmt.Errorf("decoding the validation request: %w", err)
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
		return kubewarden.MutateRequest(res.Object)
	default:
		return kubewarden.AcceptRequest()
	}
}
