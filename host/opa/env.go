package opa

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// instantiateEnv makes the `env` host module an OPA module imports:
// opa_abort, opa_println and opa_builtin0..4 (the memory is the module's own,
// see defineMemory).
func instantiateEnv(ctx context.Context, rt wazero.Runtime) error {
	i32 := api.ValueTypeI32
	b := rt.NewHostModuleBuilder("env")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(opaAbort), []api.ValueType{i32}, nil).
		WithParameterNames("addr").Export("opa_abort")
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(opaPrintln), []api.ValueType{i32}, nil).
		WithParameterNames("addr").Export("opa_println")
	for n := 0; n <= 4; n++ {
		params := make([]api.ValueType, 2+n)
		for i := range params {
			params[i] = i32
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(builtinN(n), params, []api.ValueType{i32}).
			Export(fmt.Sprintf("opa_builtin%d", n))
	}
	_, err := b.Instantiate(ctx)
	return err
}

// abortError is what opa_abort panics with: wazero turns it into the error of
// the guest call, and the instance is discarded.
type abortError struct{ msg string }

func (e abortError) Error() string { return "opa_abort: " + e.msg }

func current(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

func opaAbort(ctx context.Context, _ api.Module, stack []uint64) {
	in := current(ctx)
	msg := "(no message)"
	if in != nil {
		if b, err := in.readString(uint32(stack[0]), 64<<10); err == nil {
			msg = string(b)
		}
		if in.state != nil {
			in.state.abort = msg
		}
	}
	panic(abortError{msg})
}

func opaPrintln(ctx context.Context, _ api.Module, stack []uint64) {
	in := current(ctx)
	if in == nil {
		return
	}
	if b, err := in.readString(uint32(stack[0]), 64<<10); err == nil {
		in.m.cfg.Logger.InfoContext(ctx, "rego print", "message", string(b))
	}
}

// builtinN is opa_builtinN(id, ctx, arg1..argN): the arguments are dumped as
// JSON, the builtin computed in Go, its result parsed back into the guest.
func builtinN(n int) api.GoModuleFunc {
	return func(ctx context.Context, _ api.Module, stack []uint64) {
		in := current(ctx)
		if in == nil || in.state == nil {
			panic(fmt.Errorf("opa_builtin%d called outside an evaluation", n))
		}
		st := in.state
		fail := func(err error) {
			st.err = err
			panic(err)
		}
		id := int32(uint32(stack[0]))
		b, ok := in.m.builtins[id]
		if !ok {
			fail(fmt.Errorf("opa_builtin%d: unknown builtin id %d", n, id))
		}
		args := make([][]byte, n)
		for i := range n {
			a, err := in.dumpJSON(ctx, uint32(stack[2+i]), in.m.cfg.MaxOutputBytes)
			if err != nil {
				fail(fmt.Errorf("builtin %s: argument %d: %w", b.name, i, err))
			}
			args[i] = a
		}
		out, err := st.call(b, args)
		if err != nil {
			fail(err)
		}
		if out == nil {
			stack[0] = 0 // undefined
			return
		}
		addr, err := in.loadJSON(ctx, out)
		if err != nil {
			fail(fmt.Errorf("builtin %s: result: %w", b.name, err))
		}
		stack[0] = uint64(addr)
	}
}
