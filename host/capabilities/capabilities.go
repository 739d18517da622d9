package capabilities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Sentinel errors. Errors given to the guest carry Kubewarden's texts; these
// wrap configuration mistakes and file problems returned to the caller.
var (
	// ErrPattern: a hostCapabilities pattern is not valid.
	ErrPattern = errors.New("invalid hostCapabilities pattern")
	// ErrSession: a record/replay session file is unreadable or malformed.
	ErrSession = errors.New("host capabilities session")
	// ErrReplay: a replayed call did not match the next recorded exchange.
	ErrReplay = errors.New("Replay error")
)

// Options configure a Host. The zero value answers oci, net and crypto calls
// (oci only when OCI is set) and fails kubernetes calls as Kubewarden does
// without a cluster client.
type Options struct {
	// Kubernetes answers kubernetes/* calls; nil fails them with
	// "kube::Client was not initialized properly".
	Kubernetes *Kubernetes
	// OCI answers oci/v1/manifest_digest, oci_manifest and
	// oci_manifest_config; nil fails them.
	OCI OCIClient
	// Resolver answers net/v1/dns_lookup_host (nil = net.DefaultResolver).
	Resolver *net.Resolver
	// Logger receives denials and cache events (nil discards).
	Logger *slog.Logger
	// Replay, when set, answers every call from a recorded session instead
	// of the live backends (kwctl --replay-host-capabilities-interactions).
	Replay *Replayer
	// Record, when set, appends every answered call to a session file
	// (kwctl --record-host-capabilities-interactions).
	Record *Recorder
	// Margin is the part of a call's remaining deadline kept for the guest
	// to act on an error answer: a backend call gets the remaining time minus
	// min(remaining/5, Margin). Zero means 100 ms.
	Margin time.Duration
	// Now is the clock of crypto checks (nil = time.Now).
	Now func() time.Time
}

// Host answers host calls for any number of policies. It is safe for
// concurrent use.
type Host struct {
	o       Options
	log     *slog.Logger
	m       *metrics
	live    backend
	ociTTL  *ttlCache
	margin  time.Duration
	resolve *net.Resolver
}

// New makes a Host.
func New(o Options) *Host {
	h := &Host{o: o, log: o.Logger, m: newMetrics(), margin: o.Margin, resolve: o.Resolver}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.margin <= 0 {
		h.margin = 100 * time.Millisecond
	}
	if h.resolve == nil {
		h.resolve = net.DefaultResolver
	}
	if h.o.Now == nil {
		h.o.Now = time.Now
	}
	h.ociTTL = newTTLCache(60*time.Second, 4096, h.o.Now)
	if o.Kubernetes != nil {
		o.Kubernetes.attach(h.m, h.log)
	}
	h.live = liveBackend{h}
	return h
}

// Close stops the Kubernetes caches (when any).
func (h *Host) Close() {
	if h.o.Kubernetes != nil {
		h.o.Kubernetes.Close()
	}
}

// Resource is an apiVersion and kind a policy may read (contextAwareResources).
type Resource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Allow is what one policy may reach.
type Allow struct {
	// Resources are the Kubernetes kinds it may get and list, exact and
	// case-sensitive (can_i is not limited by them, as in Kubewarden).
	Resources []Resource
	// HostCapabilities are Kubewarden's patterns ("*", "oci/*",
	// "kubernetes/get_resource", ...). Nil allows every capability (kwctl's
	// default); an empty non-nil list denies them all.
	HostCapabilities []string
}

// HostCallFunc answers one host call; it has the shape of policy.Spec.HostCalls.
type HostCallFunc = func(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error)

// ForPolicy returns the host-call function of policy id. It fails only when a
// hostCapabilities pattern is invalid.
func (h *Host) ForPolicy(id string, allow Allow) (HostCallFunc, error) {
	caps, err := compilePatterns(allow.HostCapabilities)
	if err != nil {
		return nil, fmt.Errorf("invalid hostCapabilities pattern for policy %s: %w", id, err)
	}
	res := make(map[Resource]bool, len(allow.Resources))
	for _, r := range allow.Resources {
		res[r] = true
	}
	p := &policyCalls{h: h, id: id, caps: caps, resources: res}
	return p.call, nil
}

// policyCalls is one policy's view of the host.
type policyCalls struct {
	h         *Host
	id        string
	caps      capSet
	resources map[Resource]bool
}

// callError is an error answer to the guest whose text is exactly Kubewarden's.
type callError struct{ msg string }

func (e *callError) Error() string { return e.msg }

func errorf(format string, args ...any) error { return &callError{fmt.Sprintf(format, args...)} }

// call follows Kubewarden's order: binding, the hostCapabilities gate on
// "<namespace>/<operation>", payload decoding, the contextAwareResources gate
// (kubernetes get/list), the handler.
// A call made under a recording span (a traced admission request) gets a
// span of its own: the capability, the outcome and, for cacheable calls,
// whether a cache answered; never the payload or the answer.
func (p *policyCalls) call(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
	start := time.Now()
	path := namespace + "/" + operation
	capName := capabilityLabel(path)
	var span trace.Span
	if parent := trace.SpanFromContext(ctx); parent.IsRecording() {
		ctx, span = parent.TracerProvider().Tracer(tracerName).Start(ctx, "host_call "+capName,
			trace.WithAttributes(attribute.String("tollgate.host_call.capability", capName), attribute.String("tollgate.policy.id", p.id)))
	}
	out, outcome, err := p.dispatch(ctx, binding, namespace, operation, path, capName, payload)
	p.h.m.observe(p.id, capName, outcome, time.Since(start))
	if span != nil {
		span.SetAttributes(attribute.String("tollgate.host_call.outcome", outcome))
		if outcome != "success" {
			span.SetStatus(codes.Error, outcome)
			span.SetAttributes(attribute.String("error.type", outcome))
		}
		span.End()
	}
	return out, err
}

// tracerName is the instrumentation scope of the host-call spans.
const tracerName = "github.com/tollgate-dev/tollgate/host/capabilities"

// dispatch answers a call; path is "<namespace>/<operation>" and capName its
// metric label (computed once by call).
func (p *policyCalls) dispatch(ctx context.Context, binding, namespace, operation, path, capName string, payload []byte) ([]byte, string, error) {
	if binding != "kubewarden" {
		return nil, "bad_request", errorf("unknown binding: %s", binding)
	}
	if namespace == "tracing" {
		// tracing/log is answered by host/policy; any other tracing operation is unknown.
		return nil, "bad_request", errorf("unknown operation: %s", operation)
	}
	if !p.caps.allows(path) {
		p.h.m.denied(p.id, capName)
		p.h.log.Error("policy tried to use a host capability it has not been granted", "policy", p.id, "capability", path)
		return nil, "denied", errorf("Policy has not been granted access to the '%s' host capability. The violation has been reported.", path)
	}
	req, err := decode(namespace, operation, payload)
	if err != nil {
		return nil, "bad_request", err
	}
	if r, ok := req.resource(); ok && !p.resources[r] {
		return nil, "denied", p.h.denyResource(p.id, capName, r)
	}
	out, err := p.h.answer(ctx, req)
	if err != nil {
		return nil, "error", errorf("Callback evaluation failure: %s", err.Error())
	}
	return out, "success", nil
}

// denyResource counts and logs policy id's attempt to read resource r it
// has not been granted, and returns Kubernetes's denial.
func (h *Host) denyResource(id, capName string, r Resource) error {
	h.m.denied(id, capName)
	h.log.Error("policy tried to read a Kubernetes resource it has not been granted", "policy", id, "resource", r.APIVersion+"/"+r.Kind)
	return errResourceDenied(r)
}

// errResourceDenied is Kubewarden's answer to a read of a resource the
// policy has not been granted.
func errResourceDenied(r Resource) error {
	return errorf("Policy has not been granted access to Kubernetes %s/%s resources. The violation has been reported.", r.APIVersion, r.Kind)
}

// answer answers a decoded request from the live backends or the replayed
// session, recording the exchange when recording.
func (h *Host) answer(ctx context.Context, req *request) ([]byte, error) {
	cctx, cancel := h.callContext(ctx)
	defer cancel()
	var b backend = h.live
	if h.o.Replay != nil {
		b = h.o.Replay
	}
	out, err := b.answer(cctx, req)
	if h.o.Record != nil {
		h.o.Record.add(req, out, err)
	}
	return out, err
}

// callContext bounds a backend call by the evaluation deadline, keeping a
// margin for the guest to act on an error answer.
func (h *Host) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	rem := time.Until(dl)
	m := min(rem/5, h.margin)
	return context.WithDeadline(ctx, dl.Add(-m))
}

// backend answers decoded requests: the live capabilities or a replayed session.
type backend interface {
	answer(ctx context.Context, r *request) ([]byte, error)
}

type liveBackend struct{ h *Host }

func (l liveBackend) answer(ctx context.Context, r *request) ([]byte, error) {
	h := l.h
	switch v := r.value.(type) {
	case *GetResourceRequest:
		return h.kube().get(ctx, v)
	case *ListByNamespaceRequest:
		return h.kube().listByNamespace(ctx, v)
	case *ListAllRequest:
		return h.kube().listAll(ctx, v)
	case *PluralNameRequest:
		return h.kube().pluralName(ctx, v)
	case *CanIRequest:
		return h.kube().canI(ctx, v)
	case *imageRequest:
		return h.oci(ctx, r.tag, v.Image)
	case *dnsRequest:
		return h.dnsLookup(ctx, v.Host)
	case *CertificateRequest:
		return h.certificateTrusted(v.Request)
	case *verifyRequest:
		return nil, fmt.Errorf("sigstore verification (%s) is not supported by tollgate yet", r.tag)
	}
	return nil, fmt.Errorf("no handler for %s", r.tag)
}

// kube is the Kubernetes capability, or one that fails every call.
func (h *Host) kube() *Kubernetes {
	if h.o.Kubernetes == nil {
		return nilKube
	}
	return h.o.Kubernetes
}
