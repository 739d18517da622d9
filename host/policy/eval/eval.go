package eval

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

var (
	// ErrInvalidSettings: the policy rejected its settings (the message is the policy's).
	ErrInvalidSettings = errors.New("settings rejected by the policy")
	// ErrInvalidResponse: the policy answered something that is not a valid ValidationResponse.
	ErrInvalidResponse = errors.New("invalid policy response")
)

// Evaluator runs requests through the module of one loaded policy, in one
// execution mode. It is safe for concurrent use.
type Evaluator interface {
	// Mode is the execution mode (kubewarden-wapc, wasi, opa or gatekeeper).
	Mode() string
	// Digest is the module's sha256 digest ("sha256:<hex>").
	Digest() string
	// ValidateSettings asks the module whether Config.Settings are valid:
	// an error wrapping ErrInvalidSettings when it says no. Modes that do
	// not validate settings (Kubewarden's Rego modes) answer nil.
	ValidateSettings(ctx context.Context) error
	// Evaluate runs one request through the module, bounded by
	// Config.Timeout. Errors name the policy (Config.ID).
	Evaluate(ctx context.Context, req Request) (*Result, error)
	// Instances is how many instances are alive now, and the most kept.
	Instances() (live, size int)
	// Close stops the instances and releases the module.
	Close(ctx context.Context)
}

// MemoryReporter is implemented by evaluators that account the linear
// memory of their live instances (kubewarden-wapc).
type MemoryReporter interface {
	InstanceMemory() int64
}

// Sharer is implemented by evaluators whose instances may come from a pool
// shared with other policies (kubewarden-wapc).
type Sharer interface {
	SharesInstances() bool
}

// Request is one request to evaluate.
type Request struct {
	// Request is the AdmissionRequest's JSON, or the raw request's.
	Request []byte
	// Object is what a mutated_object is diffed against: the request's
	// object, the raw request itself; nil for none.
	Object []byte
	// Raw says the request came to the raw endpoint (any JSON, not an
	// AdmissionRequest).
	Raw bool
}

// Config is what every mode is built from: the policy's identity, settings
// and limits, resolved by host/policy (no zero defaults left).
type Config struct {
	// ID names the policy in logs and errors.
	ID string
	// Module is the Wasm module; Digest its sha256 digest, "" when not
	// computed yet (the mode computes it).
	Module []byte
	Digest string
	// Settings is the normalized settings JSON object.
	Settings json.RawMessage
	// Timeout bounds one evaluation.
	Timeout time.Duration
	// MaxResponseBytes caps the policy's answer.
	MaxResponseBytes int
	// MemoryLimitBytes caps each instance's linear memory (0: host/wasm's default).
	MemoryLimitBytes uint64
	// PoolSize is the most instances kept (for wasi: started ahead of demand).
	PoolSize int
	// Logger carries the policy id.
	Logger *slog.Logger
	// HostCalls answers the policy's host calls (its logging included);
	// InlineHostCalls says it returns by its context's deadline itself, so
	// that it may run on the guest's goroutine (wasm.WithInlineHostCallHandler).
	HostCalls       wasm.HostCallHandler
	InlineHostCalls bool
}

// WithHostCalls attaches the policy's host-call handler to ctx, for a waPC
// call (the handler value is made once at load, not per request).
func (c *Config) WithHostCalls(ctx context.Context) context.Context {
	if c.InlineHostCalls {
		return wasm.WithInlineHostCallHandler(ctx, c.HostCalls)
	}
	return wasm.WithHostCallHandler(ctx, c.HostCalls)
}

// Result is a policy's answer to one request.
type Result struct {
	Response protocol.ValidationResponse
	// Patch is the RFC 6902 JSONPatch from the request object to
	// mutated_object, nil when the policy did not mutate.
	Patch []byte
	// Duration is the whole evaluation: encoding, the guest call, decoding and diff.
	Duration time.Duration
	// GuestDuration is the part spent in the guest call (waiting for an instance included).
	GuestDuration time.Duration
	// StartDuration is the part of GuestDuration a wasi policy spent starting
	// its module (Go runtime start, package init); zero when the instance was
	// started ahead of demand, and for waPC policies.
	StartDuration time.Duration
}

// Verdict converts the result for admission.FromVerdict.
func (r *Result) Verdict() admission.Verdict {
	v := admission.Verdict{
		Accepted: r.Response.Accepted, Patch: r.Patch,
		Warnings: r.Response.Warnings, AuditAnnotations: r.Response.AuditAnnotations,
	}
	if r.Response.Message != nil {
		v.Message = *r.Response.Message
	}
	if r.Response.Code != nil {
		v.Code = int32(*r.Response.Code)
	}
	return v
}
