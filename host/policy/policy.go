package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/wasi"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/sdk/fastjson"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

var (
	// ErrInvalidSettings: the policy rejected its settings (the message is the policy's).
	ErrInvalidSettings = errors.New("settings rejected by the policy")
	// ErrSettingsNotObject: settings must be a JSON object (or empty).
	ErrSettingsNotObject = errors.New("settings must be a JSON object")
	// ErrInvalidResponse: the policy answered something that is not a valid ValidationResponse.
	ErrInvalidResponse = errors.New("invalid policy response")
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
	// the waPC policies loaded (wasm.Config.MemoryBudgetBytes; zero: derived).
	MemoryBudgetBytes uint64
}

// Host loads policies. Policies whose modules have the same digest and memory
// limit share one compiled module. A Host is safe for concurrent use.
type Host struct {
	engine     *wasm.Engine
	logger     *slog.Logger
	logDropped func(policy string)

	mu     sync.Mutex
	shared map[sharedKey]*sharedPool

	trim *trimmer
	// recycle is HostOptions.InstanceRecycleGrowth as a PoolConfig.RecycleGrowth.
	recycle uint64
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
	h := &Host{engine: e, logger: logger, logDropped: o.GuestLogDropped, shared: map[sharedKey]*sharedPool{}, trim: newTrimmer()}
	switch {
	case o.InstanceRecycleGrowth == 0:
		h.recycle = wasm.DefaultRecycleGrowth
	case o.InstanceRecycleGrowth > 0:
		h.recycle = uint64(o.InstanceRecycleGrowth)
	}
	return h, nil
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
	mod, err := h.engine.Compile(ctx, module, wasm.ModuleConfig{})
	if err != nil {
		return "", err
	}
	defer mod.Release()
	pool, err := mod.NewPool(ctx, 1)
	if err != nil {
		return "", err
	}
	defer pool.Close(ctx)
	out, err := pool.Call(ctx, DefaultTimeout, "protocol_version", []byte("{}"))
	if err != nil {
		return "", fmt.Errorf("protocol_version: %w", err)
	}
	var v string
	if err := json.Unmarshal(out, &v); err != nil {
		return "", fmt.Errorf("protocol_version: %w: want a JSON string, got %.60q", ErrInvalidResponse, out)
	}
	return v, nil
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
	id   string
	md   *metadata.Metadata
	mod  *wasm.Module
	pool *wasm.Pool
	// wasi is the module of an executionMode wasi policy (mod and pool are nil).
	wasi      *wasi.Module
	aheadSize int
	digest    string
	settings  json.RawMessage
	timeout   time.Duration
	maxResp   int
	hostCall  wasm.HostCallHandler
	// hostHandler is p.handleHostCall, bound once.
	hostHandler wasm.HostCallHandler
	// inlineHostCalls: Spec.HostCallsInline.
	inlineHostCalls bool
	logger          *slog.Logger
	guestLog        guestLog
	// shared is the pool the policy shares with others (Spec.ShareInstances),
	// nil when pool is its own; leave gives it back on Close.
	shared *sharedPool
	leave  sync.Once

	// rego is the module of an executionMode opa or gatekeeper policy (opa.go).
	rego *regoPolicy
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
	if mode == metadata.ExecutionModeWasi {
		return h.loadWasi(ctx, h.newPolicy(s, md, settings), s)
	}
	if isRegoMode(mode) {
		return h.loadRego(ctx, h.newPolicy(s, md, settings), s, mode)
	}
	mod, err := h.engine.Compile(ctx, s.Module, wasm.ModuleConfig{MemoryLimitBytes: s.MemoryLimitBytes, Digest: s.Digest})
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", s.ID, hintWasi(err, s.Module))
	}
	size := s.PoolSize
	if size <= 0 {
		size = runtime.GOMAXPROCS(0)
	}
	p := h.newPolicy(s, md, settings)
	p.mod = mod
	if s.ShareInstances {
		sp, err := h.acquirePool(p.withHostCalls(ctx), mod, size, s.ShareGroup)
		if err != nil {
			mod.Release()
			return nil, fmt.Errorf("policy %s: %w", s.ID, err)
		}
		p.pool, p.shared = sp.pool, sp
	} else {
		// The start of an instance (start function, _initialize) is bounded
		// like an evaluation, but by no less than wasm.DefaultStartTimeout:
		// a standard-Go module's runtime start takes a while on a busy node.
		pool, err := mod.NewPoolConfig(p.withHostCalls(ctx), wasm.PoolConfig{Size: size, RecycleGrowth: h.recycle, StartTimeout: max(p.timeout, wasm.DefaultStartTimeout)})
		if err != nil {
			mod.Release()
			return nil, fmt.Errorf("policy %s: %w", s.ID, err)
		}
		p.pool = pool
	}
	if err := p.validateSettings(ctx); err != nil {
		p.Close(ctx)
		return nil, fmt.Errorf("policy %s: %w", s.ID, err)
	}
	return p, nil
}

func (h *Host) newPolicy(s Spec, md *metadata.Metadata, settings json.RawMessage) *Policy {
	p := &Policy{
		id: s.ID, md: md, settings: settings, digest: s.Digest,
		timeout: s.Timeout, maxResp: s.MaxResponseBytes, hostCall: s.HostCalls,
		logger: h.logger.With("policy", s.ID),
	}
	p.guestLog = newGuestLog(h.logDropped)
	p.hostHandler = p.handleHostCall
	p.inlineHostCalls = s.HostCalls != nil && s.HostCallsInline
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	if p.maxResp <= 0 {
		p.maxResp = DefaultMaxResponseBytes
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

func (p *Policy) validateSettings(ctx context.Context) error {
	out, _, err := p.call(ctx, "validate_settings", p.settings)
	if err != nil {
		return fmt.Errorf("validate_settings: %w", err)
	}
	var r protocol.SettingsValidationResponse
	if err := json.Unmarshal(out, &r); err != nil {
		return fmt.Errorf("validate_settings: %w: %v (answer %.120q)", ErrInvalidResponse, err, out)
	}
	if !r.Valid {
		msg := "no reason given"
		if r.Message != nil && *r.Message != "" {
			msg = *r.Message
		}
		return fmt.Errorf("%w: %s", ErrInvalidSettings, msg)
	}
	return nil
}

// ID is the policy's id.
func (p *Policy) ID() string { return p.id }

// Metadata is the module's metadata (nil when it has none).
func (p *Policy) Metadata() *metadata.Metadata { return p.md }

// Digest is the module's sha256 digest.
func (p *Policy) Digest() string {
	if p.mod != nil {
		return p.mod.Digest()
	}
	return p.digest
}

// Settings is the normalized settings JSON.
func (p *Policy) Settings() json.RawMessage { return p.settings }

// Timeout is the evaluation deadline.
func (p *Policy) Timeout() time.Duration { return p.timeout }

// Instances is how many instances are alive now, and the most the pool keeps
// (of the shared pool for a policy with Spec.ShareInstances). For a wasi
// policy: the instances kept started ahead of demand.
func (p *Policy) Instances() (live, size int) {
	if p.wasi != nil {
		return p.aheadSize, p.aheadSize
	}
	if p.rego != nil {
		return p.rego.mod.Live(), p.rego.mod.Size()
	}
	return p.pool.Live(), p.pool.Size()
}

// InstanceMemory is the linear memory of the policy's live waPC instances
// (of the shared pool for a policy with Spec.ShareInstances), in bytes; 0
// for other modes.
func (p *Policy) InstanceMemory() int64 {
	if p.pool == nil {
		return 0
	}
	return p.pool.MemoryBytes()
}

// Close stops the policy's instances and releases its module.
func (p *Policy) Close(ctx context.Context) {
	if p.wasi != nil {
		_ = p.wasi.Close(ctx)
		return
	}
	if p.rego != nil {
		_ = p.rego.mod.Close(ctx)
		return
	}
	if p.shared != nil {
		// Only the first Close gives back the policy's place in the pool.
		p.leave.Do(func() { p.shared.host.releasePool(ctx, p.shared) })
	} else {
		p.pool.Close(ctx)
	}
	p.mod.Release()
}

// SharesInstances reports whether the policy's instances come from a pool
// shared with other policies (Spec.ShareInstances).
func (p *Policy) SharesInstances() bool { return p.shared != nil }

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

// Evaluate runs a parsed AdmissionRequest through a Kubernetes policy.
func (p *Policy) Evaluate(ctx context.Context, req *admission.Request) (*Result, error) {
	if p.md.IsRaw() {
		return nil, fmt.Errorf("policy %s: %w: it is a raw policy (policyType: raw); send the request to the raw endpoint", p.id, ErrWrongPolicyType)
	}
	if p.rego != nil {
		return p.evaluateRego(ctx, req.Raw, false)
	}
	return p.evaluate(ctx, req.Raw, req.Object)
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
	if p.rego != nil {
		return p.evaluateRego(ctx, request, true)
	}
	return p.evaluate(ctx, request, request)
}

func (p *Policy) evaluate(ctx context.Context, request, object []byte) (*Result, error) {
	start := time.Now()
	buf := payloads.Get().(*[]byte)
	payload := p.appendPayload((*buf)[:0], request)
	callStart := time.Now()
	out, startCost, err := p.call(ctx, "validate", payload)
	guest := time.Since(callStart)
	if p.wasi == nil && cap(payload) <= maxPooledPayload {
		// A waPC call has copied the payload into the guest by the time it
		// returns (a wasi run may still be reading its stdin after a deadline).
		*buf = payload
		payloads.Put(buf)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", p.id, err)
	}
	res := &Result{GuestDuration: guest, StartDuration: startCost}
	defer func() { res.Duration = time.Since(start) }()
	if err := p.decide(res, object, out); err != nil {
		return nil, err
	}
	return res, nil
}

// payloads are ValidationRequest buffers reused from one waPC evaluation to
// the next (the request's size in garbage per request otherwise); buffers
// grown past maxPooledPayload are left to the collector.
var payloads = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledPayload = 256 << 10

// appendPayload appends the ValidationRequest to dst: the request's bytes and
// the settings spliced into {"request":...,"settings":...}, nothing decoded.
func (p *Policy) appendPayload(dst, request []byte) []byte {
	payload := slices.Grow(dst, len(request)+len(p.settings)+26)
	payload = append(payload, `{"request":`...)
	payload = append(payload, request...)
	payload = append(payload, `,"settings":`...)
	payload = append(payload, p.settings...)
	return append(payload, '}')
}

// decide turns the policy's answer into res.Response and res.Patch.
func (p *Policy) decide(res *Result, object, out []byte) error {
	if len(out) > p.maxResp {
		return fmt.Errorf("policy %s: %w: the answer is %d bytes, the limit is %d", p.id, ErrInvalidResponse, len(out), p.maxResp)
	}
	// The fast path decodes the answer without encoding/json's pass over
	// mutated_object; on anything unusual, and on every error, the reference
	// path runs on the same answer so that results and errors are its own.
	if object != nil {
		x := answerIndexes.Get().(*fastjson.Index)
		mo, ok := decodeResponseFast(out, &res.Response, x)
		ok = ok && p.answer(res, object, out, false, scanned{x, mo}) == nil
		if cap(x.Len) <= maxPooledPayload {
			answerIndexes.Put(x)
		}
		if ok {
			return nil
		}
	}
	res.Response, res.Patch = protocol.ValidationResponse{}, nil
	return p.answer(res, object, out, true, scanned{})
}

// answerIndexes are the indexes decodeResponseFast fills with mutated_object
// for the diff, reused from one evaluation to the next.
var answerIndexes = sync.Pool{New: func() any { return new(fastjson.Index) }}

// scanned is where decodeResponseFast found mutated_object in the answer
// (at mo[0]:mo[1], indexed by x); mo[1] is 0 when it did not index it.
type scanned struct {
	x  *fastjson.Index
	mo [2]int
}

// answer checks a decoded ValidationResponse and diffs its mutated_object
// against object. With decode set it first decodes out with json.Unmarshal
// (the reference); without, res.Response was decoded by decodeResponseFast.
func (p *Policy) answer(res *Result, object, out []byte, decode bool, sc scanned) error {
	if decode {
		if err := json.Unmarshal(out, &res.Response); err != nil {
			return fmt.Errorf("policy %s: %w: not a ValidationResponse: %v (answer %.120q)", p.id, ErrInvalidResponse, err, out)
		}
	}
	if mo := bytes.TrimSpace(res.Response.MutatedObject); len(mo) > 0 && string(mo) != "null" {
		if mo[0] != '{' {
			return fmt.Errorf("policy %s: %w: mutated_object must be a JSON object, got %.60s", p.id, ErrInvalidResponse, mo)
		}
		if !res.Response.Accepted {
			return fmt.Errorf("policy %s: %w: a rejection must not carry a mutated_object", p.id, ErrInvalidResponse)
		}
		if object != nil {
			var patch []byte
			var err error
			if sc.mo[1] > 0 {
				patch, err = admission.DiffIndexed(object, out, sc.x, sc.mo[0], sc.mo[1])
			} else {
				patch, err = admission.Diff(object, mo)
			}
			if err != nil {
				return fmt.Errorf("policy %s: %w: mutated_object: %v", p.id, ErrInvalidResponse, err)
			}
			res.Patch = patch
		}
	} else {
		res.Response.MutatedObject = nil
	}
	return nil
}
