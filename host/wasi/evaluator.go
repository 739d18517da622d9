package wasi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/policy/eval"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

// Evaluator is the wasi execution mode of a policy: a WASI command run once
// per evaluation, with cfg.PoolSize instances started ahead of demand,
// adapted to Kubewarden's operations as Kubewarden's policy-evaluator does
// (argv validate or validate-settings, the request on stdin, the answer on
// stdout, a non-zero exit a rejection).
type Evaluator struct {
	cfg    eval.Config
	mod    *Module
	digest string
}

var _ eval.Evaluator = (*Evaluator)(nil)

// Load compiles a policy's WASI command (through engine's compilation and
// load caches) and starts cfg.PoolSize instances ahead of demand.
func Load(ctx context.Context, engine *wasm.Engine, cfg eval.Config) (*Evaluator, error) {
	mod, err := Compile(ctx, engine.CompilationCache(), cfg.Module, Config{
		MemoryLimitBytes: cfg.MemoryLimitBytes, MaxOutputBytes: cfg.MaxResponseBytes,
		AheadArgs: []string{"validate"}, Ahead: cfg.PoolSize,
		Engine: engine, Digest: cfg.Digest,
	})
	if err != nil {
		return nil, err
	}
	e := &Evaluator{cfg: cfg, mod: mod, digest: cfg.Digest}
	if e.digest == "" {
		e.digest = wasm.Digest(cfg.Module)
	}
	return e, nil
}

// Mode is wasi.
func (e *Evaluator) Mode() string { return metadata.ExecutionModeWasi }

// Digest is the module's digest.
func (e *Evaluator) Digest() string { return e.digest }

// ValidateSettings runs the command with argv validate-settings.
func (e *Evaluator) ValidateSettings(ctx context.Context) error {
	return e.cfg.ValidateSettings(ctx, e)
}

// Evaluate runs the command with argv validate.
func (e *Evaluator) Evaluate(ctx context.Context, req eval.Request) (*eval.Result, error) {
	return e.cfg.Evaluate(ctx, e, req, false)
}

// Instances is the instances kept started ahead of demand, twice.
func (e *Evaluator) Instances() (live, size int) { return e.cfg.PoolSize, e.cfg.PoolSize }

// Close stops the instances started ahead and releases the module.
func (e *Evaluator) Close(ctx context.Context) { _ = e.mod.Close(ctx) }

// Call runs a waPC operation (validate, validate_settings) as a command and
// returns its answer and the part of the time spent starting the module.
func (e *Evaluator) Call(ctx context.Context, operation string, payload []byte) ([]byte, time.Duration, error) {
	cmd := operation
	if operation == "validate_settings" {
		cmd = "validate-settings" // Kubewarden's argv
	}
	res, err := e.mod.Run(ctx, e.cfg.Timeout, []string{cmd}, payload, e.cfg.HostCalls)
	if err != nil {
		return nil, 0, runError(err)
	}
	var start time.Duration
	if !res.Ahead {
		start = res.Start
	}
	if res.ExitCode == 0 {
		if len(bytes.TrimSpace(res.Stderr)) > 0 {
			e.cfg.Logger.DebugContext(ctx, "policy stderr", "command", cmd, "stderr", string(res.Stderr))
		}
		return res.Stdout, start, nil
	}
	// As Kubewarden: a non-zero exit rejects with code 500 (or invalidates the
	// settings), the message being stderr; a Go runtime's goroutine dump (a
	// panic, a fatal error) stays in the log.
	msg := string(bytes.TrimSpace(res.Stderr))
	if i := goroutineDump(msg); i >= 0 {
		e.cfg.Logger.WarnContext(ctx, "policy crashed", "command", cmd, "exitCode", res.ExitCode, "stderr", msg)
		msg = strings.TrimSpace(msg[:i])
	}
	if msg == "" {
		msg = fmt.Sprintf("the policy exited with code %d", res.ExitCode)
	}
	var out []byte
	if operation == "validate_settings" {
		out, err = json.Marshal(struct {
			Valid   bool   `json:"valid"`
			Message string `json:"message"`
		}{false, msg})
	} else {
		out, err = json.Marshal(struct {
			Accepted bool   `json:"accepted"`
			Message  string `json:"message"`
			Code     int    `json:"code"`
		}{false, msg, 500})
	}
	return out, start, err
}

// goroutineDump is where the Go runtime's goroutine dump starts in stderr
// ("\n\ngoroutine 1 [running]:" after "panic: ..." or "fatal error: ..."),
// -1 without one.
func goroutineDump(stderr string) int {
	for off := 0; ; {
		i := strings.Index(stderr[off:], "\ngoroutine ")
		if i < 0 {
			return -1
		}
		i += off
		rest := stderr[i+len("\ngoroutine "):]
		if n := len(rest) - len(strings.TrimLeft(rest, "0123456789")); n > 0 && strings.HasPrefix(rest[n:], " ") {
			return i
		}
		off = i + 1
	}
}

// runError classifies Run's errors as a policy's: too much output is an
// invalid response.
func runError(err error) error {
	if errors.Is(err, ErrOutputLimit) {
		return fmt.Errorf("%w: %w", eval.ErrInvalidResponse, err)
	}
	return err
}
