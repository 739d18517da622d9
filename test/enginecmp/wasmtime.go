package enginecmp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

// wasmtimeVersion keys the serialized modules on disk: wasmtime refuses to
// deserialize code compiled by another version or configuration anyway.
const wasmtimeVersion = "v39.0.1"

// epochDeadline is set before every call: the generated code checks the epoch
// at function entries and loop back-edges, as in Kubewarden's configuration
// (where a thread ticks the epoch to enforce the deadline; nothing ticks here,
// the check's cost is the same).
const epochDeadline = 1 << 32

// wasmtimeRunner implements the waPC host protocol on wasmtime. With fresh
// set, every Validate runs on a new store and instance, instantiated from the
// precompiled module and started before the call (Kubewarden's policy-server
// evaluates this way); otherwise one instance serves every call.
type wasmtimeRunner struct {
	engine *wasmtime.Engine
	linker *wasmtime.Linker
	module *wasmtime.Module
	fresh  bool

	settings []byte
	inst     *wasmInstance // the reused instance (fresh unset)
}

// wasmInstance is one started waPC instance in its own store.
type wasmInstance struct {
	store     *wasmtime.Store
	state     *wapcState
	guestCall *wasmtime.Func
}

// wapcState is the waPC invocation state of one store: what the host
// functions read and write during a __guest_call.
type wapcState struct {
	op, req  []byte
	resp     []byte
	guestErr []byte
	hostResp []byte
	hostErr  []byte
	// hostCalls counts __host_call invocations (for tests).
	hostCalls int
}

func newWasmtime(m *Loaded, dir string, fresh bool) (Runner, error) {
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	engine := wasmtime.NewEngineWithConfig(cfg)
	module, err := wasmtimeModule(engine, m.Wasm, dir)
	if err != nil {
		return nil, err
	}
	linker := wasmtime.NewLinker(engine)
	if err := linker.DefineWasi(); err != nil {
		return nil, err
	}
	if err := defineWapc(linker); err != nil {
		return nil, err
	}
	r := &wasmtimeRunner{engine: engine, linker: linker, module: module, fresh: fresh, settings: m.Settings}
	// Start one instance now (and validate the settings once, as tollgate
	// does at load): a module that cannot run on wasmtime fails here.
	inst, err := r.start()
	if err != nil {
		r.Close()
		return nil, err
	}
	if _, err := inst.invoke("validate_settings", m.Settings); err != nil {
		inst.close()
		r.Close()
		return nil, fmt.Errorf("validate_settings: %w", err)
	}
	if fresh {
		inst.close()
	} else {
		r.inst = inst
	}
	return r, nil
}

// wasmtimeModule compiles wasm, or deserializes what an earlier run compiled
// (Cranelift takes seconds on a standard-Go module, minutes on 66 MB).
func wasmtimeModule(engine *wasmtime.Engine, wasm []byte, dir string) (*wasmtime.Module, error) {
	path := filepath.Join(dir, digest(wasm)+"-"+wasmtimeVersion+"-epoch.cwasm")
	if mod, err := wasmtime.NewModuleDeserializeFile(engine, path); err == nil {
		return mod, nil
	}
	mod, err := wasmtime.NewModule(engine, wasm)
	if err != nil {
		return nil, err
	}
	if b, err := mod.Serialize(); err == nil {
		if os.MkdirAll(dir, 0o700) == nil {
			tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
			if os.WriteFile(tmp, b, 0o600) == nil {
				_ = os.Rename(tmp, path)
			}
		}
	}
	return mod, nil
}

// start instantiates the module in a new store and runs its start functions:
// `_initialize` (standard-Go reactors) or `_start` (TinyGo; `-target=wasi`
// ends it with proc_exit(0), which wasmtime reports as an exit that leaves the
// instance usable), then `wapc_init` when exported.
func (r *wasmtimeRunner) start() (*wasmInstance, error) {
	st := &wapcState{}
	store := wasmtime.NewStoreWithData(r.engine, st)
	store.SetWasi(wasmtime.NewWasiConfig())
	store.SetEpochDeadline(epochDeadline)
	inst, err := r.linker.Instantiate(store, r.module)
	if err != nil {
		store.Close()
		return nil, err
	}
	for _, name := range []string{"_initialize", "_start", "wapc_init"} {
		f := inst.GetFunc(store, name)
		if f == nil {
			continue
		}
		if _, err := f.Call(store); err != nil {
			var werr *wasmtime.Error
			if errors.As(err, &werr) {
				if code, ok := werr.ExitStatus(); ok && code == 0 {
					continue
				}
			}
			store.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	gc := inst.GetFunc(store, "__guest_call")
	if gc == nil {
		store.Close()
		return nil, errors.New("the module does not export __guest_call")
	}
	return &wasmInstance{store: store, state: st, guestCall: gc}, nil
}

func (r *wasmtimeRunner) Validate(_ context.Context, req *Request) (Answer, error) {
	inst := r.inst
	if r.fresh {
		var err error
		if inst, err = r.start(); err != nil {
			return Answer{}, err
		}
		defer inst.close()
	}
	out, err := inst.invoke("validate", req.Payload)
	return Answer{Raw: out}, err
}

func (r *wasmtimeRunner) Close() {
	if r.inst != nil {
		r.inst.close()
	}
	if r.linker != nil {
		r.linker.Close()
	}
	if r.module != nil {
		r.module.Close()
	}
	r.engine.Close()
}

// invoke makes one waPC call: __guest_call(len(op), len(payload)), during
// which the guest fetches op and payload with __guest_request and answers with
// __guest_response or __guest_error.
func (i *wasmInstance) invoke(op string, payload []byte) ([]byte, error) {
	st := i.state
	*st = wapcState{op: []byte(op), req: payload, hostCalls: st.hostCalls}
	i.store.SetEpochDeadline(epochDeadline)
	res, err := i.guestCall.Call(i.store, int32(len(op)), int32(len(payload)))
	if err != nil {
		return nil, fmt.Errorf("error invoking guest: %w", err)
	}
	if len(st.guestErr) > 0 {
		return nil, errors.New(string(st.guestErr))
	}
	if ok, _ := res.(int32); ok != 1 {
		return nil, fmt.Errorf("call to %q was unsuccessful", op)
	}
	return st.resp, nil
}

func (i *wasmInstance) close() { i.store.Close() }

var errNoMemory = errors.New("the module exports no memory")

// defineWapc defines the waPC host functions (module "wapc") in the linker.
func defineWapc(l *wasmtime.Linker) error {
	i32 := wasmtime.NewValType(wasmtime.KindI32)
	fn := func(params, results int) *wasmtime.FuncType {
		p := make([]*wasmtime.ValType, params)
		for i := range p {
			p[i] = i32
		}
		r := make([]*wasmtime.ValType, results)
		for i := range r {
			r[i] = i32
		}
		return wasmtime.NewFuncType(p, r)
	}
	type hostFunc = func(c *wasmtime.Caller, st *wapcState, mem []byte, args []wasmtime.Val) (int32, error)
	funcs := []struct {
		name            string
		params, results int
		f               hostFunc
	}{
		{"__guest_request", 2, 0, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			if err := write(mem, a[0], st.op); err != nil {
				return 0, err
			}
			return 0, write(mem, a[1], st.req)
		}},
		{"__guest_response", 2, 0, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			b, err := read(mem, a[0], a[1])
			st.resp = b
			return 0, err
		}},
		{"__guest_error", 2, 0, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			b, err := read(mem, a[0], a[1])
			st.guestErr = b
			return 0, err
		}},
		{"__host_call", 8, 1, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			var parts [4][]byte
			for k := range parts {
				b, err := read(mem, a[2*k], a[2*k+1])
				if err != nil {
					return 0, err
				}
				parts[k] = b
			}
			st.hostCalls++
			st.hostResp, st.hostErr = nil, nil
			out, err := hostCall(context.Background(), string(parts[0]), string(parts[1]), string(parts[2]), parts[3])
			if err != nil {
				st.hostErr = []byte(err.Error())
				return 0, nil
			}
			st.hostResp = out
			return 1, nil
		}},
		{"__host_response_len", 0, 1, func(_ *wasmtime.Caller, st *wapcState, _ []byte, _ []wasmtime.Val) (int32, error) {
			return int32(len(st.hostResp)), nil
		}},
		{"__host_response", 1, 0, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			return 0, write(mem, a[0], st.hostResp)
		}},
		{"__host_error_len", 0, 1, func(_ *wasmtime.Caller, st *wapcState, _ []byte, _ []wasmtime.Val) (int32, error) {
			return int32(len(st.hostErr)), nil
		}},
		{"__host_error", 1, 0, func(_ *wasmtime.Caller, st *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			return 0, write(mem, a[0], st.hostErr)
		}},
		{"__console_log", 2, 0, func(_ *wasmtime.Caller, _ *wapcState, mem []byte, a []wasmtime.Val) (int32, error) {
			_, err := read(mem, a[0], a[1])
			return 0, err
		}},
	}
	for _, h := range funcs {
		h := h
		err := l.FuncNew("wapc", h.name, fn(h.params, h.results), func(c *wasmtime.Caller, args []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			st, _ := c.Data().(*wapcState)
			if st == nil {
				return nil, wasmtime.NewTrap("waPC host function called outside a waPC store")
			}
			var mem []byte
			if ext := c.GetExport("memory"); ext != nil && ext.Memory() != nil {
				mem = ext.Memory().UnsafeData(c)
			} else if h.name != "__host_response_len" && h.name != "__host_error_len" {
				return nil, wasmtime.NewTrap(errNoMemory.Error())
			}
			v, err := h.f(c, st, mem, args)
			if err != nil {
				return nil, wasmtime.NewTrap(h.name + ": " + err.Error())
			}
			if h.results == 0 {
				return nil, nil
			}
			return []wasmtime.Val{wasmtime.ValI32(v)}, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// read copies len bytes at ptr out of the guest's memory.
func read(mem []byte, ptr, n wasmtime.Val) ([]byte, error) {
	p, l := uint64(uint32(ptr.I32())), uint64(uint32(n.I32()))
	if p+l > uint64(len(mem)) {
		return nil, fmt.Errorf("out of bounds: %d bytes at %d, memory is %d bytes", l, p, len(mem))
	}
	return append([]byte(nil), mem[p:p+l]...), nil
}

// write copies b into the guest's memory at ptr.
func write(mem []byte, ptr wasmtime.Val, b []byte) error {
	p := uint64(uint32(ptr.I32()))
	if p+uint64(len(b)) > uint64(len(mem)) {
		return fmt.Errorf("out of bounds: %d bytes at %d, memory is %d bytes", len(b), p, len(mem))
	}
	copy(mem[p:], b)
	return nil
}
