package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/wasi"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

// loadWasi loads a policy of executionMode wasi: a WASI command run once per
// evaluation (host/wasi), with PoolSize instances started ahead of demand.
func (h *Host) loadWasi(ctx context.Context, p *Policy, s Spec) (*Policy, error) {
	ahead := s.PoolSize
	if ahead <= 0 {
		ahead = runtime.GOMAXPROCS(0)
	}
	mod, err := wasi.Compile(ctx, h.engine.CompilationCache(), s.Module, wasi.Config{
		MemoryLimitBytes: s.MemoryLimitBytes, MaxOutputBytes: p.maxResp,
		AheadArgs: []string{"validate"}, Ahead: ahead,
		Engine: h.engine, Digest: s.Digest,
	})
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	p.wasi, p.aheadSize = mod, ahead
	if p.digest == "" {
		p.digest = wasm.Digest(s.Module)
	}
	if err := p.validateSettings(ctx); err != nil {
		p.Close(ctx)
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	return p, nil
}

// call runs a waPC operation (validate, validate_settings) on the policy's
// module, whatever its execution mode, and returns the guest's answer and
// the part of the time spent starting a WASI module (zero for waPC).
func (p *Policy) call(ctx context.Context, operation string, payload []byte) ([]byte, time.Duration, error) {
	if p.wasi == nil {
		out, err := p.pool.Call(p.withHostCalls(ctx), p.timeout, operation, payload)
		return out, 0, err
	}
	cmd := operation
	if operation == "validate_settings" {
		cmd = "validate-settings" // Kubewarden's argv
	}
	res, err := p.wasi.Run(ctx, p.timeout, []string{cmd}, payload, p.hostHandler)
	if err != nil {
		return nil, 0, wasiError(err)
	}
	var start time.Duration
	if !res.Ahead {
		start = res.Start
	}
	if res.ExitCode == 0 {
		if len(bytes.TrimSpace(res.Stderr)) > 0 {
			p.logger.DebugContext(ctx, "policy stderr", "command", cmd, "stderr", string(res.Stderr))
		}
		return res.Stdout, start, nil
	}
	// As Kubewarden: a non-zero exit rejects with code 500 (or invalidates the
	// settings), the message being stderr; a Go runtime's goroutine dump (a
	// panic, a fatal error) stays in the log.
	msg := string(bytes.TrimSpace(res.Stderr))
	if i := goroutineDump(msg); i >= 0 {
		p.logger.WarnContext(ctx, "policy crashed", "command", cmd, "exitCode", res.ExitCode, "stderr", msg)
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

// wasiError classifies host/wasi's errors as the rest of the package does.
func wasiError(err error) error {
	if errors.Is(err, wasi.ErrOutputLimit) {
		return fmt.Errorf("%w: %w", ErrInvalidResponse, err)
	}
	return err
}

// Mode is the policy's execution mode (kubewarden-wapc, wasi, opa or gatekeeper).
func (p *Policy) Mode() string {
	if p.rego != nil {
		return p.rego.mode
	}
	if p.wasi != nil {
		return metadata.ExecutionModeWasi
	}
	return metadata.ExecutionModeWapc
}
