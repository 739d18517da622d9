package wasm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// CoreFeatures are the WebAssembly features of every runtime tollgate makes,
// in every execution mode: WebAssembly 2.0 plus the proposals that wasmtime
// (Kubewarden's engine) accepts and wazero implements: tail calls,
// extended constant expressions and typed function references (which
// `wasm-opt --all-features` writes). See RATIONALE.md ("Why these Wasm
// features?") for those left out.
const CoreFeatures = api.CoreFeaturesV2 |
	experimental.CoreFeaturesTailCall |
	experimental.CoreFeaturesExtendedConst |
	experimental.CoreFeaturesTypedFunctionReferences

// enabledProposals are the wasmbin proposals CoreFeatures enables.
const enabledProposals = wasmbin.ProposalTailCall | wasmbin.ProposalExtendedConst | wasmbin.ProposalFunctionReferences

// refusedWhy says, for proposals wazero implements but tollgate leaves off,
// why.
var refusedWhy = map[wasmbin.Proposal]string{
	wasmbin.ProposalThreads:           "a guest blocked in memory.atomic.wait could not be stopped at its deadline",
	wasmbin.ProposalExceptionHandling: "wasmtime, Kubewarden's engine, leaves it off by default too",
}

// NewRuntimeConfig is the wazero configuration of every tollgate runtime:
// the compiler, CoreFeatures and the given compilation cache (none when nil).
// Callers add what is theirs (close-on-context-done, memory limits).
func NewRuntimeConfig(cache wazero.CompilationCache) wazero.RuntimeConfig {
	rc := wazero.NewRuntimeConfigCompiler().WithCoreFeatures(CoreFeatures)
	if cache != nil {
		rc = rc.WithCompilationCache(cache)
	}
	return rc
}

// ScreenVersion numbers what Screen refuses: raise it whenever Screen
// refuses more, so that load-cache entries of modules screened before are
// screened again (a warm load from a marked entry skips Screen).
const ScreenVersion = 2

// Limits are the structural limits a module is checked against before it
// is compiled (wasmbin.CheckLimitsAndSelect); a zero field means its default
// (wasmbin.DefaultLimits).
type Limits = wasmbin.Limits

// ErrLimit is wrapped by the error for a module over one of its Limits;
// errors.As finds the *wasmbin.LimitError, which names the limit.
var ErrLimit = wasmbin.ErrLimit

// Screen is ScreenLimits with the default limits.
func Screen(code []byte) error { return ScreenLimits(code, Limits{}) }

// ScreenLimits refuses, before wazero compiles it, a module over one of the
// structural limits l (its error wraps ErrCompile and ErrLimit), and a
// module that wazero would compile into something other than its code: one
// with a `select` typed with a typed reference. Both come from one read of
// the module (wasmbin.CheckLimitsAndSelect). Every execution mode calls it on
// the module as given.
func ScreenLimits(code []byte, l Limits) error {
	i, err := wasmbin.CheckLimitsAndSelect(code, l)
	if err != nil {
		if errors.Is(err, ErrLimit) {
			return fmt.Errorf("%w: %w", ErrCompile, err)
		}
		return CompileError(code, err)
	}
	if i >= 0 {
		return fmt.Errorf("%w: function body %d uses a select typed with a typed function reference (function-references), which tollgate's engine (wazero v1.12) compiles wrongly; tollgate refuses the module rather than run other code than it holds", ErrCompile, i)
	}
	return nil
}

// CompileError is the error for code that wazero refused to compile with
// err: when the module uses a proposal tollgate's engine does not run, it
// names the proposal(s) instead of wazero's decoder message; otherwise it is
// err. Either way it wraps ErrCompile.
func CompileError(code []byte, err error) error {
	used, _ := wasmbin.Proposals(code) // what was read before a decoding error still counts
	if missing := used &^ enabledProposals; missing != 0 {
		names := missing.Names()
		var why []string
		for p, w := range refusedWhy {
			if missing&p != 0 {
				why = append(why, p.Names()[0]+": "+w)
			}
		}
		msg := fmt.Sprintf("module uses the %s %s, which tollgate's engine does not support", strings.Join(names, ", "), plural(len(names), "proposal", "proposals"))
		if len(why) > 0 {
			slices.Sort(why)
			msg += " (" + strings.Join(why, "; ") + ")"
		}
		return fmt.Errorf("%w: %s", ErrCompile, msg)
	}
	return fmt.Errorf("%w: %w", ErrCompile, err)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
