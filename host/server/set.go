package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/host/server/status"
	"github.com/tollgate-dev/tollgate/host/wasm"
)

// Evaluator is a loaded policy as the server sees it. *policy.Policy
// implements it.
type Evaluator interface {
	Evaluate(ctx context.Context, req *admission.Request) (*policy.Result, error)
	ValidateRaw(ctx context.Context, request []byte) (*policy.Result, error)
	Close(ctx context.Context)
}

// Loader fetches modules and loads policies. HostLoader adapts a
// policy.Host and a module resolver.
type Loader interface {
	// Resolve fetches a module; digest identifies its bytes (sha256:...).
	Resolve(ctx context.Context, uri string) (wasm []byte, digest string, err error)
	// Load compiles (or reuses) the module and validates the settings.
	Load(ctx context.Context, spec policy.Spec) (Evaluator, error)
}

// Resolver is what HostLoader needs from host/module.
type Resolver interface {
	Resolve(ctx context.Context, uri string) ([]byte, error)
}

// DigestResolver is a Resolver that also gives the sha256 digest of a
// module ("sha256:<hex>") when it knows it without hashing the bytes
// (built-in modules), "" when it does not. HostLoader uses it when its
// Resolver implements it; the digest is trusted (policy.Spec.Digest).
type DigestResolver interface {
	Resolver
	ResolveDigest(ctx context.Context, uri string) (wasm []byte, digest string, err error)
}

// ManifestResolver is a Resolver that also names the registry manifest a
// registry:// module came from ("" for other modules): HostLoader reports it
// in GET /policies (manifestDigest), so that a client may pin the module to
// it (registry://host/repository:tag@sha256:...), which the registry client
// then reads from its store without asking the registry.
type ManifestResolver interface {
	ResolveManifest(ctx context.Context, uri string) (wasm []byte, digest, manifest string, err error)
}

// manifestLoader is a Loader that gives the manifest digest of what it
// resolves (HostLoader).
type manifestLoader interface {
	ResolveManifest(ctx context.Context, uri string) (wasm []byte, digest, manifest string, err error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, uri string) ([]byte, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, uri string) ([]byte, error) { return f(ctx, uri) }

// HostLoader loads policies with a policy.Host.
type HostLoader struct {
	Host     *policy.Host
	Resolver Resolver
	// HostCalls, when set, makes the host-call handler of each policy (and
	// group member, id "group/member") it loads from what the entry declares:
	// the Kubernetes resources it may read and its hostCapabilities patterns
	// (nil when not given) (host/capabilities); an error fails that policy's
	// load. Nil: policies' host calls (but logging) get an error.
	HostCalls HostCallsFunc
	// Cluster, when set, makes the view of the cluster of each policy (and
	// group member) from the resources its entry declares: a context-aware
	// Rego policy's data (policy.Spec.Cluster). Nil: Rego policies get no
	// cluster data.
	Cluster ClusterFunc
	// ShareInstances, when set, reports whether the module of a digest keeps
	// all its state between calls keyed by the settings of each call
	// (host/builtin.IsSettingsKeyed): the policies of that module then draw
	// their instances from one pool (policy.Spec.ShareInstances). Nil: every
	// policy has a pool of its own.
	ShareInstances func(digest string) bool
}

// ClusterFunc makes a policy's view of the cluster (see HostLoader.Cluster).
type ClusterFunc func(id string, resources []config.ContextAwareResource) *capabilities.Cluster

// HostCallsFunc makes a policy's host-call handler (see HostLoader.HostCalls).
// Its handlers must return by their context's deadline: they run inline on
// the guest's goroutine (policy.Spec.HostCallsInline).
type HostCallsFunc func(id string, resources []config.ContextAwareResource, hostCapabilities []string) (wasm.HostCallHandler, error)

// clusterOf is the loader's cluster view maker, nil when it has none.
func clusterOf(l Loader) ClusterFunc {
	if hl, ok := l.(*HostLoader); ok {
		return hl.Cluster
	}
	return nil
}

// hostCallsOf is the loader's host-call maker, nil when it has none.
func hostCallsOf(l Loader) HostCallsFunc {
	if hl, ok := l.(*HostLoader); ok {
		return hl.HostCalls
	}
	return nil
}

// Resolve fetches the module and digests it (unless the resolver knows the
// digest, see DigestResolver).
func (l *HostLoader) Resolve(ctx context.Context, uri string) ([]byte, string, error) {
	if dr, ok := l.Resolver.(DigestResolver); ok {
		b, d, err := dr.ResolveDigest(ctx, uri)
		if err != nil {
			return nil, "", err
		}
		if d == "" {
			d = wasm.Digest(b)
		}
		return b, d, nil
	}
	b, err := l.Resolver.Resolve(ctx, uri)
	if err != nil {
		return nil, "", err
	}
	return b, wasm.Digest(b), nil
}

// ResolveManifest is Resolve with the manifest digest of a registry://
// module, when the Resolver is a ManifestResolver ("" otherwise).
func (l *HostLoader) ResolveManifest(ctx context.Context, uri string) ([]byte, string, string, error) {
	mr, ok := l.Resolver.(ManifestResolver)
	if !ok {
		b, d, err := l.Resolve(ctx, uri)
		return b, d, "", err
	}
	b, d, m, err := mr.ResolveManifest(ctx, uri)
	if err != nil {
		return nil, "", "", err
	}
	if d == "" {
		d = wasm.Digest(b)
	}
	return b, d, m, nil
}

// Load loads a policy.
func (l *HostLoader) Load(ctx context.Context, spec policy.Spec) (Evaluator, error) {
	if l.ShareInstances != nil && spec.Digest != "" && l.ShareInstances(spec.Digest) {
		spec.ShareInstances = true
	}
	p, err := l.Host.Load(ctx, spec)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// unit is one loaded module with its settings: a policy or a group member.
type unit struct {
	id       string // policy id, or "group/member"
	module   string
	settings json.RawMessage
	timeout  time.Duration
	digest   string
	manifest string // registry manifest digest, "" when unknown
	key      string
	eval     Evaluator
	err      error
	loadedAt time.Time
}

// entry is one policy or group of a set.
type entry struct {
	cfg     config.Policy
	unit    *unit            // single policy
	members map[string]*unit // group
	err     error            // load error (first member error for groups)
	// stale is the load error of the set's configuration of this policy
	// when the entry serves the previous set's loaded version instead (cfg,
	// unit and members are that version's).
	stale error
	// staleCfg is the configuration whose load failed with stale.
	staleCfg config.Policy

	// loading is set while the version of this policy in the serving
	// configuration is still loading: the entry serves, meanwhile, the
	// previous set's entry for the id (cfg, unit, members, err and stale are
	// that entry's), or nothing (unit and members nil: a placeholder, whose
	// endpoint answers 503).
	loading bool

	// pending counts the units still loading while a build runs; the entry
	// settles (err is set) when it reaches 0.
	pending int
}

// addUnits adds e's loaded units to s.units (the units the set serves, by key).
func (s *policySet) addUnits(e *entry) {
	if e.unit != nil && e.unit.eval != nil {
		s.units[e.unit.key] = e.unit
	}
	for _, u := range e.members {
		if u.eval != nil {
			s.units[u.key] = u
		}
	}
}

// placeholder reports whether e serves nothing because it is still loading.
func (e *entry) placeholder() bool { return e.loading && e.unit == nil && e.members == nil }

// serves reports whether e's endpoint evaluates requests: loaded, or stale.
func (e *entry) serves() bool { return e.err == nil && (e.unit != nil || e.members != nil) }

// settle sets the entry's load error once its units' loads ended: a single
// policy's, or a group's first failed member's (by name).
func (e *entry) settle() {
	if e.unit != nil {
		e.err = e.unit.err
		return
	}
	for _, n := range slices.Sorted(maps.Keys(e.members)) {
		if err := e.members[n].err; err != nil {
			e.err = fmt.Errorf("member %s: %w", n, err)
			return
		}
	}
}

func (e *entry) state() string {
	switch {
	case e.err != nil:
		return status.StateFailed
	case e.placeholder():
		return status.StateLoading
	}
	return status.StateReady
}

// policySet is an immutable generation of loaded policies. Requests hold a
// reference while they run; a retired set closes the evaluators it does not
// share with its successor once its last request finished.
type policySet struct {
	gen     uint64
	cfg     *config.Config
	source  []byte // the policies.yml bytes it was built from (nil for embedded)
	digest  string // status.Digest(source), "" without source
	entries map[string]*entry
	// shadows are the policies' candidate versions by policy id (nil when
	// none has one): see shadow.go.
	shadows  map[string]*shadow
	units    map[string]*unit // by key
	loadedAt time.Time

	refs    atomic.Int64
	retired atomic.Bool
	once    sync.Once
	drained chan struct{}
}

func newSet(gen uint64, cfg *config.Config) *policySet {
	return &policySet{gen: gen, cfg: cfg, entries: map[string]*entry{}, units: map[string]*unit{}, drained: make(chan struct{}), loadedAt: time.Now()}
}

func (s *policySet) release() {
	if s.refs.Add(-1) == 0 && s.retired.Load() {
		s.once.Do(func() { close(s.drained) })
	}
}

func (s *policySet) retire() {
	s.retired.Store(true)
	if s.refs.Load() == 0 {
		s.once.Do(func() { close(s.drained) })
	}
}

func (s *policySet) setSource(src []byte) {
	s.source = src
	if src != nil {
		s.digest = status.Digest(src)
	}
}

// failed lists the ids of entries that did not load.
func (s *policySet) failed() []string {
	return s.ids(func(e *entry) bool { return e.err != nil })
}

// staleIDs lists the ids of entries that serve a previous version.
func (s *policySet) staleIDs() []string {
	return s.ids(func(e *entry) bool { return e.stale != nil })
}

// pending reports whether some entry is failed or stale: a retry may help.
func (s *policySet) pending() bool {
	for _, e := range s.entries {
		if e.err != nil || e.stale != nil {
			return true
		}
	}
	return false
}

func (s *policySet) ids(keep func(*entry) bool) []string {
	var out []string
	for id, e := range s.entries {
		if keep(e) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// refusesPrevious reports whether a load error says that the previous
// version must not serve in its place either: an error in its chain with a
// RefusesPrevious() method that returns true (host/verify's refusals: the
// previous module may not satisfy the current verification config).
func refusesPrevious(err error) bool {
	var r interface{ RefusesPrevious() bool }
	return errors.As(err, &r) && r.RefusesPrevious()
}

// unitKey identifies a loaded unit for reuse across reloads: same id, module
// bytes, settings and limits mean the loaded policy can be shared.
func unitKey(id, digest string, settings json.RawMessage, timeout time.Duration, o *config.Options, car []config.ContextAwareResource, caps []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00", id, digest, settings, timeout, o.MemoryLimitBytes, o.Workers)
	b.WriteString(grantsKey(car, caps))
	return b.String()
}

// grantsKey identifies what a policy's host calls may reach: its
// contextAwareResources and hostCapabilities. Policies that share instances
// share them only with policies of the same grants (policy.Spec.ShareGroup):
// a guest may keep host-call answers between calls (the MutatingAdmissionPolicy
// built-in keeps the scope of its paramKind), which are the same for every
// policy with the same grants.
func grantsKey(car []config.ContextAwareResource, caps []string) string {
	var b strings.Builder
	for _, r := range car {
		b.WriteString(r.APIVersion + "/" + r.Kind + ",")
	}
	if caps != nil {
		b.WriteString("\x00caps:" + strings.Join(caps, ","))
	}
	return b.String()
}

// closeUnshared closes the evaluators of old that next does not use. next
// may be nil (shutdown: close everything).
func closeUnshared(ctx context.Context, old, next *policySet) int {
	keep := map[Evaluator]bool{}
	if next != nil {
		for _, u := range next.units {
			keep[u.eval] = true
		}
	}
	n := 0
	for _, u := range old.units {
		if !keep[u.eval] {
			u.eval.Close(ctx)
			n++
		}
	}
	return n
}
