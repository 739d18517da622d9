package status

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Policy states.
const (
	// StateReady: the policy is loaded and its endpoint evaluates requests.
	StateReady = "ready"
	// StateFailed: the policy is not loaded; its endpoint answers HTTP 500
	// with an AdmissionReview error.
	StateFailed = "failed"
	// StateLoading: this policy's load has not ended yet and no previous
	// version serves it: its endpoint answers HTTP 503 (Generation 0: the
	// server has not published its first set yet, the webhook port is not
	// open). Each policy serves as soon as its own load ended.
	StateLoading = "loading"
)

// Policy kinds.
const (
	KindPolicy = "policy"
	KindGroup  = "group"
)

// Policies is the body of GET /policies.
type Policies struct {
	// Generation of the serving policy set: 1 at start, +1 per adopted reload
	// (the policies of a configuration serve one by one as their loads end,
	// within its generation). 0 only in the instant before the first
	// configuration is published.
	Generation uint64 `json:"generation"`
	// LoadedAt is when the serving set was built (absent while loading).
	LoadedAt time.Time `json:"loadedAt,omitzero"`
	// ConfigDigest is Digest of the exact policies.yml bytes the serving set
	// was built from. Empty for the embedded default configuration.
	ConfigDigest string `json:"configDigest"`
	// Embedded is true when the server serves its embedded default
	// configuration (no --policies).
	Embedded bool `json:"embedded,omitempty"`
	// LastReload is the outcome of the last reload attempt (absent while
	// loading the first configuration).
	LastReload Reload `json:"lastReload,omitzero"`
	// Policies of the serving set, sorted by id.
	Policies []Policy `json:"policies"`
}

// Reload is the outcome of a reload attempt (or of the start).
type Reload struct {
	Time time.Time `json:"time"`
	// OK is true when the file was adopted: it parsed and validated, and it
	// is the serving configuration now (some of its policies may still be
	// failed or stale: see Policy). False when the file was rejected as a
	// whole and the previous configuration keeps serving.
	OK bool `json:"ok"`
	// Error says why the file was rejected (OK false).
	Error string `json:"error,omitempty"`
	// Trigger is what started the attempt: start, file, SIGHUP, retry...
	Trigger string `json:"trigger"`
	// Digest is Digest of the file the attempt read, adopted or not. Empty
	// when the file could not be read (or for the embedded configuration).
	Digest string `json:"digest,omitempty"`
}

// Policy is one policy or policy group of the serving set.
//
// State is what the endpoint does now. Error, when set, is why the version of
// the policy in the serving policies.yml did not load: with State failed,
// nothing serves it; with Stale, the previous version keeps serving it.
type Policy struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // KindPolicy or KindGroup
	// Module and Digest (sha256 of the module bytes) of a single policy; for
	// a stale policy, those of the version that serves. The server writes
	// Module, the members' and every Error with credentials masked
	// ("https://user:xxxxx@host/...", "?token=xxxxx"): compare modules by
	// Digest, not by URI.
	Module string `json:"module,omitempty"`
	Digest string `json:"digest,omitempty"`
	// ManifestDigest is the registry manifest digest of a registry://
	// module (what registry://host/repository:tag@sha256:... pins), when
	// the server knows it.
	ManifestDigest  string `json:"manifestDigest,omitempty"`
	Mode            string `json:"mode"`
	AllowedToMutate bool   `json:"allowedToMutate"`
	State           string `json:"state"` // StateReady, StateFailed or StateLoading
	// Stale is true when the policy's version in the serving policies.yml
	// failed to load (Error says why) and the version loaded before keeps
	// serving its endpoint; Module, Digest, Mode, AllowedToMutate, LoadedAt,
	// Expression and Members describe that previous version. State is then
	// StateReady.
	Stale bool `json:"stale,omitempty"`
	// Loading is true while the policy's version in the serving policies.yml
	// is still loading; State and Stale say what serves meanwhile (its
	// previous version, Stale; its last outcome; or nothing, StateLoading).
	Loading bool   `json:"loading,omitempty"`
	Error   string `json:"error,omitempty"`
	// LoadedAt is when the serving version was loaded (single policies).
	LoadedAt *time.Time `json:"loadedAt,omitempty"`
	// Expression and Members of a group.
	Expression string   `json:"expression,omitempty"`
	Members    []Member `json:"members,omitempty"`
	// Shadow is the policy's candidate version (policies.yml `shadow:`),
	// evaluated beside it on the same requests; absent without one.
	Shadow *Shadow `json:"shadow,omitempty"`
}

// Shadow is a policy's candidate version: whether it is loaded, and how its
// answers compared with the serving version's since it loaded.
type Shadow struct {
	// State is StateReady (loaded: evaluated beside the serving version),
	// StateFailed (Error says why; the serving version is unaffected) or
	// StateLoading.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Module and Digest of a single policy's candidate; Expression and
	// Members of a group's.
	Module     string   `json:"module,omitempty"`
	Digest     string   `json:"digest,omitempty"`
	Expression string   `json:"expression,omitempty"`
	Members    []Member `json:"members,omitempty"`
	// LoadedAt is when the candidate was loaded; the counts are since then.
	LoadedAt *time.Time `json:"loadedAt,omitempty"`
	// Evaluations of the candidate that were compared with the serving
	// answer (errors included).
	Evaluations int64 `json:"evaluations"`
	// Divergences by kind (DivergenceVerdict...): evaluations whose answer
	// differed from the serving one, each counted once, under its first
	// kind in that order.
	Divergences map[string]int64 `json:"divergences"`
	// Dropped are requests whose candidate evaluation was skipped by reason
	// (queue_full, busy, cooling_down, shutdown): the candidate never takes
	// the serving path's workers or queue.
	Dropped map[string]int64 `json:"dropped,omitempty"`
	// Recent are the last few diverging requests, newest first.
	Recent []Divergence `json:"recent,omitempty"`
}

// Kinds of divergence between a candidate's answer and the serving one, in
// the order a divergence is classified.
const (
	// DivergenceError: one of the two evaluations failed, the other did not.
	DivergenceError = "error"
	// DivergenceVerdict: one allowed the request, the other denied it.
	DivergenceVerdict = "verdict"
	// DivergencePatch: both allowed it with different patches.
	DivergencePatch = "patch"
	// DivergenceMessage: same verdict and patch, different message, code or causes.
	DivergenceMessage = "message"
)

// Divergence is one request the candidate answered differently: who asked
// about what, and the two answers (never the object's content).
type Divergence struct {
	Time      time.Time `json:"time"`
	UID       string    `json:"uid,omitempty"`
	Kind      string    `json:"kind,omitempty"` // the request's kind (Pod...)
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	Operation string    `json:"operation,omitempty"`
	// Divergence is the divergence's kind (DivergenceVerdict...).
	Divergence string `json:"divergence"`
	Serving    Answer `json:"serving"`
	Candidate  Answer `json:"shadow"`
}

// Answer is one version's answer to a request, in brief.
type Answer struct {
	Allowed bool `json:"allowed"`
	// Error is the evaluation's failure reason (timeout, trap...), "" when it
	// answered.
	Error   string `json:"error,omitempty"`
	Code    int32  `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// PatchOps is the number of operations of its JSONPatch (0: none).
	PatchOps int `json:"patchOps,omitempty"`
}

// Current reports whether the policy serves exactly the version of the
// serving policies.yml: loaded and not stale.
func (p *Policy) Current() bool { return p.State == StateReady && !p.Stale }

// Member is one policy of a group.
type Member struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	Digest string `json:"digest,omitempty"`
	// ManifestDigest: as Policy's.
	ManifestDigest string `json:"manifestDigest,omitempty"`
	State          string `json:"state"`
	Error          string `json:"error,omitempty"`
}

// Digest is the "sha256:<hex>" form of the SHA-256 of b, as in ConfigDigest.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Reasons Serves gives for a policy that is not active.
var (
	// ErrOtherConfig: the server does not serve the expected policies.yml
	// (not seen yet, or rejected: see LastReload).
	ErrOtherConfig = errors.New("the server serves another policies.yml")
	// ErrNoPolicy: the served policies.yml has no such policy.
	ErrNoPolicy = errors.New("no such policy in the served policies.yml")
	// ErrNotLoaded: the policy's version in the served policies.yml is not
	// loaded (failed, stale with its previous version serving, or still
	// loading at start-up).
	ErrNotLoaded = errors.New("the policy is not loaded")
)

// Serves reports whether the server serves the policies.yml whose digest is
// configDigest, with policy id loaded at the version that file gives. It
// returns nil when it does, and otherwise an error wrapping ErrOtherConfig,
// ErrNoPolicy or ErrNotLoaded that says why (with the server's load error).
func (ps *Policies) Serves(configDigest, id string) error {
	if ps.ConfigDigest != configDigest {
		if !ps.LastReload.OK && ps.LastReload.Digest == configDigest {
			return fmt.Errorf("%w (%s): %s was rejected: %s", ErrOtherConfig, ps.ConfigDigest, configDigest, ps.LastReload.Error)
		}
		return fmt.Errorf("%w: %s, not %s", ErrOtherConfig, ps.ConfigDigest, configDigest)
	}
	for i := range ps.Policies {
		p := &ps.Policies[i]
		if p.ID != id {
			continue
		}
		switch {
		case p.Loading:
			return fmt.Errorf("%w: policy %s: still loading", ErrNotLoaded, id)
		case p.Current():
			return nil
		case p.Stale:
			return fmt.Errorf("%w: policy %s: its new version failed to load (the previous one keeps serving): %s", ErrNotLoaded, id, p.Error)
		case p.State == StateLoading || p.Loading:
			return fmt.Errorf("%w: policy %s: still loading", ErrNotLoaded, id)
		default:
			return fmt.Errorf("%w: policy %s: %s", ErrNotLoaded, id, p.Error)
		}
	}
	return fmt.Errorf("%w: %s", ErrNoPolicy, id)
}
