package gkdiff

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/tollgate-dev/tollgate/host/policy"
)

// Side is one way of running the tollgate module: its engine natively, or
// the Wasm module through tollgate's host.
type Side interface {
	Name() string
	// Load compiles settings; an error is a refusal.
	Load(settings []byte) (Loaded, error)
	Close()
}

// Loaded is a side loaded with one settings object.
type Loaded interface {
	// Evaluate returns the outcome; an error is a failure of the harness
	// or the host (a trap, an invalid answer), never an outcome.
	Evaluate(req Request) (Outcome, error)
	Close()
}

// WasmSide runs the module through tollgate's host.
type WasmSide struct {
	host   *policy.Host
	module []byte
	// pin is a policy of the module loaded for the side's lifetime: the host
	// keeps a compiled module while a policy uses it, so every Load shares
	// one compilation (as policies of one module do in tollgate serve)
	// instead of reading it back from the disk cache.
	pin *Wasm
	mu  sync.Mutex
}

// NewWasmSide starts a host for the module.
func NewWasmSide(module []byte) (*WasmSide, error) {
	h, err := policy.NewHost(context.Background(), policy.HostOptions{})
	if err != nil {
		return nil, err
	}
	pin, err := NewWasm(context.Background(), h, module, []byte(`{}`))
	if err != nil {
		h.Close(context.Background())
		return nil, err
	}
	return &WasmSide{host: h, module: module, pin: pin}, nil
}

func (s *WasmSide) Name() string { return "wasm" }

func (s *WasmSide) Load(settings []byte) (Loaded, error) {
	w, err := NewWasm(context.Background(), s.host, s.module, settings)
	if err != nil {
		return nil, err
	}
	return wasmLoaded{w}, nil
}

func (s *WasmSide) Close() {
	s.pin.Close(context.Background())
	s.host.Close(context.Background())
}

type wasmLoaded struct{ w *Wasm }

func (l wasmLoaded) Evaluate(req Request) (Outcome, error) {
	return l.w.Evaluate(context.Background(), req)
}

func (l wasmLoaded) Close() { l.w.Close(context.Background()) }

// Difference is one disagreement between Gatekeeper and a side.
type Difference struct {
	Side     string
	Settings string
	Request  *Request
	Want     string // Gatekeeper
	Got      string // the side
}

func (d Difference) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "side %s differs from Gatekeeper\nsettings: %s\n", d.Side, d.Settings)
	if d.Request != nil {
		fmt.Fprintf(&b, "request: %s %s/%s %s namespace=%q user=%q\nobject: %s\n", d.Request.Operation, d.Request.Group, d.Request.Version, d.Request.Kind, d.Request.Namespace, d.Request.Username, d.Request.Object)
	}
	fmt.Fprintf(&b, "gatekeeper: %s\n%s: %s", d.Want, d.Side, d.Got)
	return b.String()
}

// SameOutcome compares two outcomes: both rejected, or both unchanged, or
// JSON-equal mutated objects.
func SameOutcome(want, got Outcome) bool {
	if want.Rejected || got.Rejected {
		return want.Rejected == got.Rejected
	}
	return want.Object == got.Object
}
