package enginecmp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Answer is an engine's answer to one ValidationRequest.
type Answer struct {
	// Raw is the guest's ValidationResponse as it wrote it (a copy), for
	// engines that hand out the guest's bytes.
	Raw []byte
	// Response is the decoded answer, for tollgate's Evaluate (which decodes
	// it and diffs mutated_object; its Raw is nil).
	Response *protocol.ValidationResponse
}

// Runner runs the validate operation of one module on one engine.
type Runner interface {
	Validate(ctx context.Context, req *Request) (Answer, error)
	Close()
}

// Engine names, in the order tables print them.
const (
	Wazero        = "wazero"
	TollgateGuest = "tollgate-guest"
	Tollgate      = "tollgate"
	Wasmtime      = "wasmtime"
	WasmtimeFresh = "wasmtime-fresh"
	// WazeroInstrumented is plain wazero on the module as host/wasm
	// instruments it (wasmbin.Instrument), not in Engines: it splits
	// tollgate-guest/wazero into the interrupt check and the rest of the call path.
	WazeroInstrumented = "wazero-instrumented"
	defaultTimeout     = 2 // seconds, host/policy's DefaultTimeout
)

// Engines lists every engine compared.
var Engines = []string{Wazero, TollgateGuest, Tollgate, Wasmtime, WasmtimeFresh}

// New starts module m on the named engine, its compiled code cached under
// cacheDir (one subdirectory per engine).
func New(ctx context.Context, engine string, m *Loaded, cacheDir string) (Runner, error) {
	var r Runner
	var err error
	switch engine {
	case Wazero:
		r, err = newWazero(ctx, m, filepath.Join(cacheDir, "wazero"))
	case WazeroInstrumented:
		code, _, ierr := wasmbin.Instrument(m.Wasm)
		if ierr != nil {
			return nil, ierr
		}
		mi := *m
		mi.Wasm = code
		r, err = newWazero(ctx, &mi, filepath.Join(cacheDir, "wazero"))
	case TollgateGuest:
		r, err = newTollgateGuest(ctx, m, filepath.Join(cacheDir, "tollgate"))
	case Tollgate:
		r, err = newTollgate(ctx, m, filepath.Join(cacheDir, "tollgate"))
	case Wasmtime:
		r, err = newWasmtime(m, filepath.Join(cacheDir, "wasmtime"), false)
	case WasmtimeFresh:
		r, err = newWasmtime(m, filepath.Join(cacheDir, "wasmtime"), true)
	default:
		return nil, fmt.Errorf("unknown engine %q (engines: %v)", engine, Engines)
	}
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", m.Name, engine, err)
	}
	return r, nil
}

// DefaultCacheDir is where compiled code is kept between runs: the user's
// cache directory, keyed by nothing but the engines' own keys (each engine's
// cache checks the module's bytes and its own version).
func DefaultCacheDir() string {
	if d := os.Getenv("ENGINECMP_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "tollgate", "enginecmp")
}

// BigModules reports whether ENGINECMP_BIG asks for the large modules.
func BigModules() bool {
	b, _ := strconv.ParseBool(os.Getenv("ENGINECMP_BIG"))
	return b
}

// Canonical decodes a ValidationResponse and encodes it again with
// encoding/json, so that an engine's bytes can be compared with tollgate's
// decoded answer.
func Canonical(a Answer) ([]byte, error) {
	r := a.Response
	if r == nil {
		r = new(protocol.ValidationResponse)
		if err := json.Unmarshal(a.Raw, r); err != nil {
			return nil, fmt.Errorf("not a ValidationResponse: %w (%.120q)", err, a.Raw)
		}
	}
	return json.Marshal(r)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
