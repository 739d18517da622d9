package opa

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/policy/eval"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Evaluator is the opa or the gatekeeper execution mode of a policy: the
// same Rego module runner, with the input and the answer shaped as
// Kubewarden shapes them for each (evaluate).
type Evaluator struct {
	cfg    eval.Config
	mod    *Module
	mode   string // metadata.ExecutionModeOPA or metadata.ExecutionModeGatekeeper
	digest string
	// cluster builds the data of a context-aware policy (nil: none).
	cluster *clusterData
}

var _ eval.Evaluator = (*Evaluator)(nil)

// Load loads a policy of executionMode opa or gatekeeper: a pool of
// cfg.PoolSize instances, each with the data document loaded once (the
// settings for opa, {} for gatekeeper). cluster gives the objects of the
// resources the policy is granted, put in its data before each evaluation
// (data.kubernetes for opa, data.inventory for gatekeeper); nil or no
// resource: no cluster data.
func Load(ctx context.Context, engine *wasm.Engine, cfg eval.Config, mode string, cluster *capabilities.Cluster) (*Evaluator, error) {
	data := []byte("{}")
	if mode == metadata.ExecutionModeOPA {
		data = cfg.Settings
	}
	mod, err := Compile(ctx, engine.CompilationCache(), cfg.Module, Config{
		MemoryLimitBytes: cfg.MemoryLimitBytes, MaxOutputBytes: cfg.MaxResponseBytes,
		PoolSize: cfg.PoolSize, Data: data, Logger: cfg.Logger, Engine: engine,
	})
	if err != nil {
		return nil, fmt.Errorf("executionMode %s: %w", mode, err)
	}
	e := &Evaluator{cfg: cfg, mod: mod, mode: mode, digest: cfg.Digest}
	if cluster != nil && len(cluster.Resources()) > 0 {
		if e.cluster, err = newClusterData(cluster, mode, cfg.Settings); err != nil {
			_ = mod.Close(ctx)
			return nil, err
		}
	}
	if e.digest == "" {
		e.digest = wasm.Digest(cfg.Module)
	}
	return e, nil
}

// Mode is opa or gatekeeper.
func (e *Evaluator) Mode() string { return e.mode }

// Digest is the module's digest.
func (e *Evaluator) Digest() string { return e.digest }

// ValidateSettings accepts any settings: Kubewarden does not validate the
// settings of Rego policies.
func (e *Evaluator) ValidateSettings(context.Context) error { return nil }

// Instances is how many instances are alive now, and the most kept.
func (e *Evaluator) Instances() (live, size int) { return e.mod.Live(), e.mod.Size() }

// Close stops the instances and releases the module.
func (e *Evaluator) Close(ctx context.Context) { _ = e.mod.Close(ctx) }

// ClusterBuilds is how many data documents a context-aware policy built
// (tests, benchmarks).
func (e *Evaluator) ClusterBuilds() int64 {
	if e.cluster == nil {
		return 0
	}
	return e.cluster.builds.Load()
}

// Rejection texts, as Kubewarden's policy-evaluator gives them.
const (
	msgGatekeeperRaw = "Gatekeeper does not support raw validation requests"
	msgOPANoResult   = "cannot interpret OPA policy result"
	msgClusterData   = "cannot build the Kubernetes context of the policy"
)

// Evaluate evaluates a request, shaping input and output as Kubewarden
// does: opa gets {"request": R} and answers an AdmissionResponse in
// result.response; gatekeeper gets {"parameters": settings, "review": R}
// and answers a list of violations [{"msg": ...}].
func (e *Evaluator) Evaluate(ctx context.Context, req eval.Request) (*eval.Result, error) {
	start := time.Now()
	request := req.Request
	var input []byte
	switch e.mode {
	case metadata.ExecutionModeGatekeeper:
		if req.Raw {
			return rejected(start, msgGatekeeperRaw, 500), nil
		}
		input = make([]byte, 0, len(request)+len(e.cfg.Settings)+28)
		input = append(input, `{"parameters":`...)
		input = append(input, e.cfg.Settings...)
		input = append(input, `,"review":`...)
		input = appendCompact(input, request)
		input = append(input, '}')
	default:
		input = make([]byte, 0, len(request)+12)
		input = append(input, `{"request":`...)
		input = appendCompact(input, request)
		input = append(input, '}')
	}
	var data *Data
	timeout := e.cfg.Timeout
	if e.cluster != nil {
		// The lists and the guest share the evaluation's deadline.
		deadline := start.Add(e.cfg.Timeout)
		dctx, cancel := context.WithDeadline(ctx, deadline)
		var err error
		data, err = e.cluster.data(dctx)
		cancel()
		if err != nil {
			e.cfg.Logger.Error("cannot build the Kubernetes data of a context-aware Rego policy", "error", err)
			return rejected(start, msgClusterData+": "+err.Error(), 500), nil
		}
		if timeout = time.Until(deadline); timeout <= 0 {
			return nil, fmt.Errorf("policy %s: %w after %s: building the Kubernetes data took the whole evaluation time", e.cfg.ID, wasm.ErrTimeout, e.cfg.Timeout)
		}
	}
	callStart := time.Now()
	out, err := e.mod.Eval(ctx, timeout, input, data)
	guest := time.Since(callStart)
	if err != nil {
		if errors.Is(err, ErrOutputLimit) {
			err = fmt.Errorf("%w: %w", eval.ErrInvalidResponse, err)
		}
		return nil, fmt.Errorf("policy %s: %w", e.cfg.ID, err)
	}
	var res *eval.Result
	if e.mode == metadata.ExecutionModeGatekeeper {
		res = gatekeeperResult(out)
	} else {
		res = opaResult(out)
	}
	res.GuestDuration = guest
	res.Duration = time.Since(start)
	return res, nil
}

func rejected(start time.Time, msg string, code uint16) *eval.Result {
	res := &eval.Result{Response: newRejection(msg, code)}
	res.Duration = time.Since(start)
	return res
}

func newRejection(msg string, code uint16) (r protocol.ValidationResponse) {
	r.Accepted, r.Message = false, &msg
	if code != 0 {
		r.Code = &code
	}
	return r
}

// opaResult reads result[0].result.response as an AdmissionResponse: uid and
// allowed must be there; uid is replaced by the request's (the caller builds
// the response with the request's uid).
func opaResult(out []byte) *eval.Result {
	var results []struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) == 0 || len(results[0].Result) == 0 {
		return &eval.Result{Response: newRejection(msgOPANoResult, 500)}
	}
	var doc struct {
		Response *struct {
			UID     *string `json:"uid"`
			Allowed *bool   `json:"allowed"`
			Status  *struct {
				Message string `json:"message"`
				Code    uint16 `json:"code"`
			} `json:"status"`
			Patch            *string           `json:"patch"`
			PatchType        *string           `json:"patchType"`
			AuditAnnotations map[string]string `json:"auditAnnotations"`
			Warnings         []string          `json:"warnings"`
		} `json:"response"`
	}
	if err := json.Unmarshal(results[0].Result, &doc); err != nil {
		return &eval.Result{Response: newRejection(fmt.Sprintf("%s: %v", msgOPANoResult, err), 500)}
	}
	r := doc.Response
	switch {
	case r == nil:
		return &eval.Result{Response: newRejection(msgOPANoResult+": no response", 500)}
	case r.UID == nil:
		return &eval.Result{Response: newRejection("missing field `uid`", 500)}
	case r.Allowed == nil:
		return &eval.Result{Response: newRejection("missing field `allowed`", 500)}
	}
	res := &eval.Result{}
	res.Response.Accepted = *r.Allowed
	res.Response.Warnings = r.Warnings
	res.Response.AuditAnnotations = r.AuditAnnotations
	if r.Status != nil {
		if r.Status.Message != "" {
			msg := r.Status.Message
			res.Response.Message = &msg
		}
		if r.Status.Code != 0 {
			code := r.Status.Code
			res.Response.Code = &code
		}
	}
	if r.Patch != nil && *r.Patch != "" {
		patch, err := base64.StdEncoding.DecodeString(*r.Patch)
		if err != nil || !json.Valid(patch) {
			return &eval.Result{Response: newRejection(fmt.Sprintf("%s: patch is not a base64-encoded JSON document", msgOPANoResult), 500)}
		}
		if r.PatchType != nil && *r.PatchType != "JSONPatch" {
			return &eval.Result{Response: newRejection(fmt.Sprintf("%s: patchType %q (want JSONPatch)", msgOPANoResult, *r.PatchType), 500)}
		}
		res.Patch = patch
	}
	return res
}

// gatekeeperResult reads result[0].result as the violations [{"msg": ...}]:
// none accepts; otherwise the request is rejected with the messages joined by
// ", " and no code. A result of any other shape counts as no violation, as
// with Kubewarden.
func gatekeeperResult(out []byte) *eval.Result {
	var results []struct {
		Result []struct {
			Msg *string `json:"msg"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) == 0 || len(results[0].Result) == 0 {
		return &eval.Result{Response: protocol.ValidationResponse{Accepted: true}}
	}
	msgs := make([]string, 0, len(results[0].Result))
	for _, v := range results[0].Result {
		if v.Msg != nil {
			msgs = append(msgs, *v.Msg)
		} else {
			msgs = append(msgs, "")
		}
	}
	return &eval.Result{Response: newRejection(strings.Join(msgs, ", "), 0)}
}

// appendCompact appends the JSON document src without the whitespace between
// its tokens. A request read from a file by run or bench is indented (the
// API server sends it compact): the module's JSON parser reads every byte,
// at about half the speed of this loop (the 5 KB Pod indented to 12 KB: 55 us
// more in the guest, 26 us here; encoding/json.Compact takes 130 us). src is
// valid JSON (the request was parsed before).
func appendCompact(dst, src []byte) []byte {
	if bytes.IndexByte(src, '\n') < 0 {
		return append(dst, src...) // compact already (no newline, the common case)
	}
	in := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if in {
			dst = append(dst, c)
			if c == '\\' && i+1 < len(src) {
				i++
				dst = append(dst, src[i])
			} else if c == '"' {
				in = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			in = true
		}
		dst = append(dst, c)
	}
	return dst
}
