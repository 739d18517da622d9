package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/policy/eval"
	"github.com/tollgate-dev/tollgate/host/wapc"
	"github.com/tollgate-dev/tollgate/host/wasi"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

var (
	// ErrInvalidSettings: the policy rejected its settings (the message is the policy's).
	ErrInvalidSettings = eval.ErrInvalidSettings
	// ErrSettingsNotObject: settings must be a JSON object (or empty).
	ErrSettingsNotObject = errors.New("settings must be a JSON object")
	// ErrInvalidResponse: the policy answered something that is not a valid ValidationResponse.
	ErrInvalidResponse = eval.ErrInvalidResponse
	// ErrUnsupportedModule: the module's execution mode is not one tollgate runs.
	ErrUnsupportedModule = errors.New("unsupported policy module")
	// ErrNotRaw / ErrRaw: a raw request to a Kubernetes policy, or the reverse.
	ErrWrongPolicyType = errors.New("wrong request type for this policy")
)

// DefaultTimeout bounds one evaluation when Spec.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// DefaultMaxResponseBytes caps a policy's answer.
const DefaultMaxResponseBytes = 16 << 20

// HostOptions configure a Host.
type HostOptions struct {
	// CacheDir is the directory of compiled modules: wazero's compilation
	// cache and host/wasm's load cache ("" = user cache dir).
	CacheDir string
	// DisableCache turns both on-disk caches off.
	DisableCache bool
	// Logger receives policy logs (with the policy id) and guest output.
	Logger *slog.Logger
	// GuestLogDropped, when set, is called with the policy id for each log
	// line of a guest dropped by its rate limit (see guestlog.go).
	GuestLogDropped func(policy string)
	// InstanceRecycleGrowth: a waPC instance whose linear memory grew by more
	// than this many bytes during one call is closed after it and replaced
	// when needed (wasm.PoolConfig.RecycleGrowth). Zero means
	// wasm.DefaultRecycleGrowth; a negative value keeps instances whatever
	// they grow to (up to the memory limit).
	InstanceRecycleGrowth int64
	// Limits are the structural limits of modules (wasm.Config.Limits);
	// CompileTimeout and CompileMemoryBytes the budget of one compile
	// (wasm.Config); zero values are the engine's defaults.
	Limits             wasm.Limits
	CompileTimeout     time.Duration
	CompileMemoryBytes uint64
	// MemoryBudgetBytes bounds the compiled code and instance memory of
	// the policies loaded, of every execution mode (wasm.Config.MemoryBudgetBytes,
	// wasm.Engine.Reserve for WASI and Rego; zero: derived).
	MemoryBudgetBytes uint64
}

// Host loads policies. Policies whose modules have the same digest and memory
// limit share one compiled module. A Host is safe for concurrent use.
type Host struct {
	engine     *wasm.Engine
	logger     *slog.Logger
	logDropped func(policy string)

	// wapc runs kubewarden-wapc policies and keeps their shared pools.
	wapc *wapc.Host

	trim *trimmer
}

// NewHost creates a Host.
func NewHost(ctx context.Context, o HostOptions) (*Host, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e, err := wasm.NewEngine(ctx, wasm.Config{CacheDir: o.CacheDir, DisableCache: o.DisableCache, Logger: logger,
		Limits: o.Limits, CompileTimeout: o.CompileTimeout, CompileMemoryBytes: o.CompileMemoryBytes,
		MemoryBudgetBytes: o.MemoryBudgetBytes})
	if err != nil {
		return nil, err
	}
	// recycle is HostOptions.InstanceRecycleGrowth as a PoolConfig.RecycleGrowth.
	var recycle uint64
	switch {
	case o.InstanceRecycleGrowth == 0:
		recycle = wasm.DefaultRecycleGrowth
	case o.InstanceRecycleGrowth > 0:
		recycle = uint64(o.InstanceRecycleGrowth)
	}
	return &Host{engine: e, logger: logger, logDropped: o.GuestLogDropped, wapc: wapc.NewHost(e, recycle), trim: newTrimmer()}, nil
}

// Modules is how many distinct compiled modules the host holds (policies
// sharing a module digest and memory limit share one).
func (h *Host) Modules() int { return h.engine.Modules() }

// CacheDir is the compilation cache in use ("" when disabled).
func (h *Host) CacheDir() string { return h.engine.CacheDir() }

// Close releases all compiled modules. Close policies first.
func (h *Host) Close(ctx context.Context) error { return h.engine.Close(ctx) }

// ProtocolVersion asks a waPC module for the Kubewarden protocol version it
// speaks (its `protocol_version` operation, which policy SDKs register), as
// kwctl annotate does when metadata.yml does not say.
func (h *Host) ProtocolVersion(ctx context.Context, module []byte) (string, error) {
	return h.wapc.ProtocolVersion(ctx, module, DefaultTimeout)
}

// Spec describes a policy to load.
type Spec struct {
	// ID names the policy in logs and errors.
	ID string
	// Module is the Wasm module.
	Module []byte
	// Digest is the sha256 digest of Module ("sha256:<hex>") when the caller
	// has computed it already; empty makes Load compute it. It is trusted: a
	// wrong value runs whatever the host compiled or cached under that digest.
	Digest string
	// Settings is the policy's settings as JSON (null, empty and {} are all {}).
	Settings json.RawMessage
	// Timeout bounds one evaluation (DefaultTimeout when zero).
	Timeout time.Duration
	// MemoryLimitBytes caps each instance's linear memory (wasm.DefaultMemoryLimit when zero).
	MemoryLimitBytes uint64
	// PoolSize is the most instances kept (GOMAXPROCS when zero).
	PoolSize int
	// ShareInstances makes the policy draw its instances from one pool
	// shared with every other loaded policy that sets it, of the same module
	// digest, memory limit and PoolSize, instead of a pool of its own: N such
	// policies keep PoolSize instances, not N x PoolSize. Each evaluation
	// still carries the policy's own settings, deadline and host calls, and
	// its errors and logs name the policy; a trap or deadline replaces the
	// instance that hit it, for all of them. The pool lives until the last of
	// them is closed.
	//
	// Set it only for a module whose guest keeps nothing between calls but
	// what it derives from the settings it receives with each call, keyed by
	// them (host/builtin.SettingsKeyed): any other module may answer one
	// policy with another's settings. Ignored for executionMode wasi, opa and
	// gatekeeper modules.
	ShareInstances bool
	// ShareGroup narrows ShareInstances: policies share a pool only with
	// policies of the same ShareGroup. A guest may keep answers of host calls
	// between calls (the MutatingAdmissionPolicy built-in keeps whether its
	// paramKind is namespaced), so host/server puts the policy's grants
	// (contextAwareResources, hostCapabilities) here: a policy then only meets
	// answers it would have got itself.
	ShareGroup string
	// MaxResponseBytes caps the policy's answer (DefaultMaxResponseBytes when zero).
	MaxResponseBytes int
	// HostCalls answers host calls other than logging. Nil answers them with an error.
	HostCalls wasm.HostCallHandler
	// HostCallsInline says that HostCalls returns by its context's deadline
	// itself (host/capabilities' handlers do), so that it is called on the
	// guest's goroutine rather than behind a watchdog goroutine (cheaper by
	// two goroutine switches per host call).
	HostCallsInline bool
	// ExecutionMode is the mode asked for (run/bench -e), "" to follow the
	// module's metadata; see SelectMode.
	ExecutionMode string
	// Cluster gives a Rego policy (executionMode opa or gatekeeper) the
	// objects of the Kubernetes resources it is granted
	// (contextAwareResources), which the host puts in its data before each
	// evaluation: data.kubernetes (opa) or data.inventory (gatekeeper). Nil,
	// or no resource granted: no cluster data. Other modes ignore it (their
	// modules ask through HostCalls).
	Cluster *capabilities.Cluster
}

// Policy is a loaded policy, safe for concurrent evaluations.
type Policy struct {
	id       string
	md       *metadata.Metadata
	settings json.RawMessage
	timeout  time.Duration
	hostCall wasm.HostCallHandler
	logger   *slog.Logger
	guestLog guestLog
	// ev runs the module in the policy's execution mode.
	ev eval.Evaluator
}

// Load compiles the module (or reuses it), starts an instance, and validates
// the settings with the policy's validate_settings. Shortly after the last of
// a batch of loads returns, the host gives the heap they freed back to the OS
// (runtime/debug.FreeOSMemory).
func (h *Host) Load(ctx context.Context, s Spec) (*Policy, error) {
	h.trim.start()
	defer h.trim.done()
	md, err := metadata.Read(s.Module)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	mode, err := SelectMode(md, s.ExecutionMode, s.Module)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	settings, err := NormalizeSettings(s.Settings)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	p := h.newPolicy(s, md, settings)
	if p.ev, err = h.evaluator(ctx, p, s, mode); err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	if err := p.ev.ValidateSettings(ctx); err != nil {
		p.Close(ctx)
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	return p, nil
}

// evaluator builds the policy's evaluator in its execution mode, each mode
// in its own package (host/policy/eval).
func (h *Host) evaluator(ctx context.Context, p *Policy, s Spec, mode string) (eval.Evaluator, error) {
	size := s.PoolSize
	if size <= 0 {
		size = runtime.GOMAXPROCS(0)
	}
	maxResp := s.MaxResponseBytes
	if maxResp <= 0 {
		maxResp = DefaultMaxResponseBytes
	}
	cfg := eval.Config{
		ID: s.ID, Module: s.Module, Digest: s.Digest, Settings: p.settings,
		Timeout: p.timeout, MaxResponseBytes: maxResp,
		MemoryLimitBytes: s.MemoryLimitBytes, PoolSize: size, Logger: p.logger,
		HostCalls: p.handleHostCall, InlineHostCalls: s.HostCalls != nil && s.HostCallsInline,
	}
	switch mode {
	case metadata.ExecutionModeWasi:
		return wasi.Load(ctx, h.engine, cfg)
	case metadata.ExecutionModeOPA:
		return opa.LoadOPA(ctx, h.engine, cfg, s.Cluster)
	case metadata.ExecutionModeGatekeeper:
		return opa.LoadGatekeeper(ctx, h.engine, cfg, s.Cluster)
	default:
		return h.wapc.Load(ctx, cfg, s.ShareInstances, s.ShareGroup)
	}
}

func (h *Host) newPolicy(s Spec, md *metadata.Metadata, settings json.RawMessage) *Policy {
	p := &Policy{
		id: s.ID, md: md, settings: settings,
		timeout: s.Timeout, hostCall: s.HostCalls,
		logger: h.logger.With("policy", s.ID),
	}
	p.guestLog = newGuestLog(h.logDropped)
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	return p
}

// NormalizeSettings turns null, empty and {} into {} and rejects non-objects.
func NormalizeSettings(s json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(s)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if err := admission.CheckJSON(t); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	if t[0] != '{' {
		return nil, fmt.Errorf("%w, got %.40s", ErrSettingsNotObject, t)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, t); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ID is the policy's id.
func (p *Policy) ID() string { return p.id }

// Metadata is the module's metadata (nil when it has none).
func (p *Policy) Metadata() *metadata.Metadata { return p.md }

// Digest is the module's sha256 digest.
func (p *Policy) Digest() string { return p.ev.Digest() }

// Settings is the normalized settings JSON.
func (p *Policy) Settings() json.RawMessage { return p.settings }

// Timeout is the evaluation deadline.
func (p *Policy) Timeout() time.Duration { return p.timeout }

// Instances is how many instances are alive now, and the most the pool keeps
// (of the shared pool for a policy with Spec.ShareInstances). For a wasi
// policy: the instances kept started ahead of demand.
func (p *Policy) Instances() (live, size int) { return p.ev.Instances() }

// InstanceMemory is the linear memory of the policy's live waPC instances
// (of the shared pool for a policy with Spec.ShareInstances), in bytes; 0
// for other modes.
func (p *Policy) InstanceMemory() int64 {
	if m, ok := p.ev.(eval.MemoryReporter); ok {
		return m.InstanceMemory()
	}
	return 0
}

// Close stops the policy's instances and releases its module.
func (p *Policy) Close(ctx context.Context) { p.ev.Close(ctx) }

// SharesInstances reports whether the policy's instances come from a pool
// shared with other policies (Spec.ShareInstances).
func (p *Policy) SharesInstances() bool {
	s, ok := p.ev.(eval.Sharer)
	return ok && s.SharesInstances()
}

// Mode is the policy's execution mode (kubewarden-wapc, wasi, opa or gatekeeper).
func (p *Policy) Mode() string { return p.ev.Mode() }

// Result is a policy's answer to one request.
type Result = eval.Result

// Evaluate runs a parsed AdmissionRequest through a Kubernetes policy.
func (p *Policy) Evaluate(ctx context.Context, req *admission.Request) (*Result, error) {
	if p.md.IsRaw() {
		return nil, fmt.Errorf("policy %s: %w: it is a raw policy (policyType: raw); send the request to the raw endpoint", p.id, ErrWrongPolicyType)
	}
	return p.ev.Evaluate(ctx, eval.Request{Request: req.Raw, Object: req.Object})
}

// Validate parses an AdmissionRequest (or AdmissionReview) and evaluates it.
func (p *Policy) Validate(ctx context.Context, request []byte) (*Result, error) {
	req, err := admission.ParseReview(request)
	if err != nil {
		return nil, err
	}
	return p.Evaluate(ctx, req)
}

// ValidateRaw runs any JSON request through a policy. A mutated_object is
// diffed against the raw request itself.
func (p *Policy) ValidateRaw(ctx context.Context, request []byte) (*Result, error) {
	if err := admission.CheckJSON(request); err != nil {
		return nil, err
	}
	request = bytes.TrimSpace(request)
	return p.ev.Evaluate(ctx, eval.Request{Request: request, Object: request, Raw: true})
}

// SharedPools is how many instance pools are shared by policies now (see
// Spec.ShareInstances).
func (h *Host) SharedPools() int { return h.wapc.SharedPools() }
