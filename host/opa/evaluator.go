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

// rego is what the opa and gatekeeper execution modes share: the policy's
// module with its pool of instances, and the data of a context-aware
// policy. OPA and Gatekeeper shape the input and read the answer, each as
// Kubewarden does for its mode.
type rego struct {
	cfg    eval.Config
	mod    *Module
	digest string
	// cluster builds the data of a context-aware policy (nil: none).
	cluster *clusterData
}

// OPA is the opa execution mode of a policy: the input is {"request": R},
// the data document the settings (with data.kubernetes for a context-aware
// policy), the answer an AdmissionResponse in result.response.
type OPA struct{ rego }

// Gatekeeper is the gatekeeper execution mode of a policy: the input is
// {"parameters": settings, "review": R}, the data document {} (with
// data.inventory for a context-aware policy), the answer a list of
// violations [{"msg": ...}].
type Gatekeeper struct{ rego }

var (
	_ eval.Evaluator = (*OPA)(nil)
	_ eval.Evaluator = (*Gatekeeper)(nil)
)

// LoadOPA loads a policy of executionMode opa: a pool of cfg.PoolSize
// instances, each with the settings loaded once as its data document.
// cluster gives the objects of the resources the policy is granted, put in
// data.kubernetes before each evaluation; nil or no resource: none.
func LoadOPA(ctx context.Context, engine *wasm.Engine, cfg eval.Config, cluster *capabilities.Cluster) (*OPA, error) {
	r, err := loadRego(ctx, engine, cfg, metadata.ExecutionModeOPA, cluster)
	if err != nil {
		return nil, err
	}
	return &OPA{r}, nil
}

// LoadGatekeeper loads a policy of executionMode gatekeeper: a pool of
// cfg.PoolSize instances, each with the data document {} loaded once.
// cluster gives the objects of the resources the policy is granted, put in
// data.inventory before each evaluation; nil or no resource: none.
func LoadGatekeeper(ctx context.Context, engine *wasm.Engine, cfg eval.Config, cluster *capabilities.Cluster) (*Gatekeeper, error) {
	r, err := loadRego(ctx, engine, cfg, metadata.ExecutionModeGatekeeper, cluster)
	if err != nil {
		return nil, err
	}
	return &Gatekeeper{r}, nil
}

func loadRego(ctx context.Context, engine *wasm.Engine, cfg eval.Config, mode string, cluster *capabilities.Cluster) (rego, error) {
	data := []byte("{}")
	if mode == metadata.ExecutionModeOPA {
		data = cfg.Settings
	}
	mod, err := Compile(ctx, engine.CompilationCache(), cfg.Module, Config{
		MemoryLimitBytes: cfg.MemoryLimitBytes, MaxOutputBytes: cfg.MaxResponseBytes,
		PoolSize: cfg.PoolSize, Data: data, Logger: cfg.Logger, Engine: engine,
	})
	if err != nil {
		return rego{}, fmt.Errorf("executionMode %s: %w", mode, err)
	}
	r := rego{cfg: cfg, mod: mod, digest: cfg.Digest}
	if cluster != nil && len(cluster.Resources()) > 0 {
		if r.cluster, err = newClusterData(cluster, mode, cfg.Settings); err != nil {
			_ = mod.Close(ctx)
			return rego{}, err
		}
	}
	if r.digest == "" {
		r.digest = wasm.Digest(cfg.Module)
	}
	return r, nil
}

// Mode is opa.
func (e *OPA) Mode() string { return metadata.ExecutionModeOPA }

// Mode is gatekeeper.
func (e *Gatekeeper) Mode() string { return metadata.ExecutionModeGatekeeper }

// Digest is the module's digest.
func (r *rego) Digest() string { return r.digest }

// ValidateSettings accepts any settings: Kubewarden does not validate the
// settings of Rego policies.
func (r *rego) ValidateSettings(context.Context) error { return nil }

// Instances is how many instances are alive now, and the most kept.
func (r *rego) Instances() (live, size int) { return r.mod.Live(), r.mod.Size() }

// Close stops the instances and releases the module.
func (r *rego) Close(ctx context.Context) { _ = r.mod.Close(ctx) }

// ClusterBuilds is how many data documents a context-aware policy built
// (tests, benchmarks).
func (r *rego) ClusterBuilds() int64 {
	if r.cluster == nil {
		return 0
	}
	return r.cluster.builds.Load()
}

// Rejection texts, as Kubewarden's policy-evaluator gives them.
const (
	msgGatekeeperRaw = "Gatekeeper does not support raw validation requests"
	msgOPANoResult   = "cannot interpret OPA policy result"
	msgClusterData   = "cannot build the Kubernetes context of the policy"
)

// Evaluate evaluates a request: {"request": R} in, an AdmissionResponse in
// result.response out.
func (e *OPA) Evaluate(ctx context.Context, req eval.Request) (*eval.Result, error) {
	start := time.Now()
	input := make([]byte, 0, len(req.Request)+12)
	input = append(input, `{"request":`...)
	input = appendCompact(input, req.Request)
	input = append(input, '}')
	return e.eval(ctx, start, input, opaResult)
}

// Evaluate evaluates a request: {"parameters": settings, "review": R} in,
// the violations [{"msg": ...}] out. A raw request is rejected, as with
// Kubewarden.
func (e *Gatekeeper) Evaluate(ctx context.Context, req eval.Request) (*eval.Result, error) {
	start := time.Now()
	if req.Raw {
		return rejected(start, msgGatekeeperRaw, 500), nil
	}
	input := make([]byte, 0, len(req.Request)+len(e.cfg.Settings)+28)
	input = append(input, `{"parameters":`...)
	input = append(input, e.cfg.Settings...)
	input = append(input, `,"review":`...)
	input = appendCompact(input, req.Request)
	input = append(input, '}')
	return e.eval(ctx, start, input, gatekeeperResult)
}

// eval evaluates input (the evaluation having started at start) with the
// cluster data of a context-aware policy, and reads the answer with decode.
func (r *rego) eval(ctx context.Context, start time.Time, input []byte, decode func(out []byte) *eval.Result) (*eval.Result, error) {
	var data *Data
	timeout := r.cfg.Timeout
	if r.cluster != nil {
		// The lists and the guest share the evaluation's deadline.
		deadline := start.Add(r.cfg.Timeout)
		dctx, cancel := context.WithDeadline(ctx, deadline)
		var err error
		data, err = r.cluster.data(dctx)
		cancel()
		if err != nil {
			r.cfg.Logger.Error("cannot build the Kubernetes data of a context-aware Rego policy", "error", err)
			return rejected(start, msgClusterData+": "+err.Error(), 500), nil
		}
		if timeout = time.Until(deadline); timeout <= 0 {
			return nil, fmt.Errorf("policy %s: %w after %s: building the Kubernetes data took the whole evaluation time", r.cfg.ID, wasm.ErrTimeout, r.cfg.Timeout)
		}
	}
	callStart := time.Now()
	out, err := r.mod.Eval(ctx, timeout, input, data)
	guest := time.Since(callStart)
	if err != nil {
		if errors.Is(err, ErrOutputLimit) {
			err = fmt.Errorf("%w: %w", eval.ErrInvalidResponse, err)
		}
		return nil, fmt.Errorf("policy %s: %w", r.cfg.ID, err)
	}
	res := decode(out)
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
