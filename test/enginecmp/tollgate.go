package enginecmp

import (
	"context"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

// tollgateGuest is host/wasm's pool call: the module as tollgate runs it
// (instrumented with the interrupt check, memory cap, deadline), one instance.
type tollgateGuest struct {
	engine *wasm.Engine
	mod    *wasm.Module
	pool   *wasm.Pool
	ctx    context.Context
}

func newTollgateGuest(ctx context.Context, m *Loaded, dir string) (Runner, error) {
	e, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: dir})
	if err != nil {
		return nil, err
	}
	r := &tollgateGuest{engine: e, ctx: wasm.WithInlineHostCallHandler(context.Background(), hostCall)}
	r.mod, err = e.Compile(ctx, m.Wasm, wasm.ModuleConfig{})
	if err != nil {
		r.Close()
		return nil, err
	}
	r.pool, err = r.mod.NewPool(r.ctx, 1)
	if err != nil {
		r.Close()
		return nil, err
	}
	if _, err := r.pool.Call(r.ctx, policy.DefaultTimeout, "validate_settings", m.Settings); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *tollgateGuest) Validate(ctx context.Context, req *Request) (Answer, error) {
	// The handler is attached once, as host/policy attaches a value made at load.
	out, err := r.pool.Call(r.ctx, policy.DefaultTimeout, "validate", req.Payload)
	return Answer{Raw: out}, err
}

func (r *tollgateGuest) Close() {
	ctx := context.Background()
	if r.pool != nil {
		r.pool.Close(ctx)
	}
	if r.mod != nil {
		r.mod.Release()
	}
	_ = r.engine.Close(ctx)
}

// tollgateEval is host/policy's Evaluate with one instance: what a request
// costs tollgate's server once it has parsed the AdmissionReview.
type tollgateEval struct {
	host *policy.Host
	p    *policy.Policy
	// Guest and Total sum GuestDuration and Duration of the Results.
	guest, total time.Duration
}

func newTollgate(ctx context.Context, m *Loaded, dir string) (Runner, error) {
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: dir})
	if err != nil {
		return nil, err
	}
	p, err := h.Load(ctx, policy.Spec{ID: m.Name, Module: m.Wasm, Settings: m.Settings, PoolSize: 1})
	if err != nil {
		_ = h.Close(ctx)
		return nil, err
	}
	return &tollgateEval{host: h, p: p}, nil
}

func (r *tollgateEval) Validate(ctx context.Context, req *Request) (Answer, error) {
	res, err := r.p.Evaluate(ctx, req.Parsed)
	if err != nil {
		return Answer{}, err
	}
	r.guest += res.GuestDuration
	r.total += res.Duration
	return Answer{Response: &res.Response}, nil
}

func (r *tollgateEval) Close() {
	ctx := context.Background()
	r.p.Close(ctx)
	_ = r.host.Close(ctx)
}

// HostShare is the part of tollgate's evaluations spent outside the guest
// call so far (0 for other engines).
func HostShare(r Runner) float64 {
	t, ok := r.(*tollgateEval)
	if !ok || t.total == 0 {
		return 0
	}
	return 1 - float64(t.guest)/float64(t.total)
}
