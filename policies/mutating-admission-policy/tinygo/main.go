// Command tinygo is the MutatingAdmissionPolicy module built on package
// jsonengine (issue 31): the waPC guest shipped as
// builtin://mutating-admission-policy, built with TinyGo through
// scripts/build-map-tinygo.sh (the dependencies patched at build time):
//
//	scripts/build-map-tinygo.sh -o map-tinygo.wasm policies/mutating-admission-policy/tinygo -- \
//	    -target=./wasip1-map.json -buildmode=c-shared -scheduler=none -no-debug
//
// wasip1-map.json is TinyGo's wasip1 target with an 8 MiB stack instead of
// wasm-ld's default 64 KiB: cel-go's ANTLR parser recurses deeply (with 64
// KiB, 33 of test/mapdiff's 50 cases, even a one-line JSONPatch expression,
// trapped with "out of bounds memory access" in validate_settings).
//
// It also builds with standard Go (GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared), which answers alike. test/mapdiff checks it against
// Kubernetes' plugin (`make map-tinygo-engine` builds it outside the build
// cache and runs test/mapdiff on it); the standard-Go module on package engine
// (the directory above) is kept only as a reference, not shipped.
package main

import (
	// First: k8s.io/klog's init needs os.Args[0], which waPC hosts leave empty.
	_ "github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/argv0"

	"context"
	"sync"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/jsonengine"
	"github.com/tollgate-dev/tollgate/sdk/capabilities"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/kubewarden"
)

func init() {
	guest.RegisterFunctions(map[string]guest.Function{
		"validate":          validate,
		"validate_settings": validateSettings,
	})
}

// main does nothing in the module (a waPC guest answers calls); built with
// -tags mapsteps it prints the per-step profile (steps_on.go).
func main() { runSteps() }

// compiled caches the engines by their settings bytes: the host sends the
// settings with every call and may share an instance between policies.
// Bounded at maxCachedSettings (the oldest half is dropped past it).
var compiled struct {
	sync.Mutex
	engines map[string]*jsonengine.Engine
	order   []string
}

const maxCachedSettings = 64

func engineFor(settings []byte) (*jsonengine.Engine, error) {
	compiled.Lock()
	defer compiled.Unlock()
	if e, ok := compiled.engines[string(settings)]; ok {
		return e, nil
	}
	e, err := jsonengine.Compile(settings)
	if err != nil {
		return nil, err
	}
	if e.FromCluster() {
		e = e.WithCluster(newHostCluster(capabilities.Host{Call: guest.HostCall}))
	}
	if compiled.engines == nil {
		compiled.engines = map[string]*jsonengine.Engine{}
	}
	if len(compiled.order) >= maxCachedSettings {
		for _, k := range compiled.order[:maxCachedSettings/2] {
			delete(compiled.engines, k)
		}
		compiled.order = append([]string(nil), compiled.order[maxCachedSettings/2:]...)
	}
	compiled.engines[string(settings)] = e
	compiled.order = append(compiled.order, string(settings))
	return e, nil
}

func validateSettings(payload []byte) ([]byte, error) {
	if _, err := engineFor(payload); err != nil {
		return kubewarden.RejectSettings(kubewarden.Message(err.Error()))
	}
	return kubewarden.AcceptSettings()
}

func validate(payload []byte) ([]byte, error) {
	req, raw, err := parseRequest(payload)
	if err != nil {
		return nil, err
	}
	e, err := engineFor(raw)
	if err != nil {
		return nil, err
	}
	res, err := e.Evaluate(context.Background(), &req)
	if err != nil {
		return nil, err
	}
	switch {
	case !res.Accepted:
		return kubewarden.RejectRequest(kubewarden.Message(res.Message), kubewarden.Code(res.Code))
	case res.Object != nil:
		// the engine encoded the object (compact, escaped as json.Marshal
		// escapes): kubewarden.MutateRequest would check and compact it again
		// by reflection (TestMutateResponse: the bytes are the same)
		return fastjson.MutateRequest(res.Object), nil
	default:
		return kubewarden.AcceptRequest()
	}
}

// rawSettings keeps the settings' bytes as they came (the cache key).
type rawSettings []byte

func (r *rawSettings) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}
