package policy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/metadata"
	"github.com/tollgate-dev/tollgate/host/opa"
	"github.com/tollgate-dev/tollgate/host/wasm"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// regoPolicy is the module of an executionMode opa or gatekeeper policy.
type regoPolicy struct {
	mod  *opa.Module
	mode string // metadata.ExecutionModeOPA or metadata.ExecutionModeGatekeeper
	// cluster builds the data of a context-aware policy (nil: none).
	cluster *clusterData
}

// loadRego loads a policy of executionMode opa or gatekeeper (host/opa): a
// pool of PoolSize instances, each with the data document loaded once (the
// settings for opa, {} for gatekeeper). Kubewarden does not validate the
// settings of Rego policies: they are always valid.
func (h *Host) loadRego(ctx context.Context, p *Policy, s Spec, mode string) (*Policy, error) {
	size := s.PoolSize
	if size <= 0 {
		size = runtime.GOMAXPROCS(0)
	}
	data := []byte("{}")
	if mode == metadata.ExecutionModeOPA {
		data = p.settings
	}
	mod, err := opa.Compile(ctx, h.engine.CompilationCache(), s.Module, opa.Config{
		MemoryLimitBytes: s.MemoryLimitBytes, MaxOutputBytes: p.maxResp,
		PoolSize: size, Data: data, Logger: p.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("policy %s: executionMode %s: %w", s.ID, mode, err)
	}
	p.rego = &regoPolicy{mod: mod, mode: mode}
	if s.Cluster != nil && len(s.Cluster.Resources()) > 0 {
		if p.rego.cluster, err = newClusterData(s.Cluster, mode, p.settings); err != nil {
			_ = mod.Close(ctx)
			return nil, fmt.Errorf("policy %s: %w", s.ID, err)
		}
	}
	if p.digest == "" {
		p.digest = wasm.Digest(s.Module)
	}
	return p, nil
}

// Rejection texts, as Kubewarden's policy-evaluator gives them.
const (
	msgGatekeeperRaw = "Gatekeeper does not support raw validation requests"
	msgOPANoResult   = "cannot interpret OPA policy result"
	msgClusterData   = "cannot build the Kubernetes context of the policy"
)

// evaluateRego evaluates a request with a Rego policy, shaping input and
// output as Kubewarden does: opa gets {"request": R} and answers an
// AdmissionResponse in result.response; gatekeeper gets {"parameters":
// settings, "review": R} and answers a list of violations [{"msg": ...}].
func (p *Policy) evaluateRego(ctx context.Context, request []byte, raw bool) (*Result, error) {
	start := time.Now()
	var input []byte
	switch p.rego.mode {
	case metadata.ExecutionModeGatekeeper:
		if raw {
			return rejected(start, msgGatekeeperRaw, 500), nil
		}
		input = make([]byte, 0, len(request)+len(p.settings)+28)
		input = append(input, `{"parameters":`...)
		input = append(input, p.settings...)
		input = append(input, `,"review":`...)
		input = appendCompact(input, request)
		input = append(input, '}')
	default:
		input = make([]byte, 0, len(request)+12)
		input = append(input, `{"request":`...)
		input = appendCompact(input, request)
		input = append(input, '}')
	}
	var data *opa.Data
	timeout := p.timeout
	if p.rego.cluster != nil {
		// The lists and the guest share the evaluation's deadline.
		deadline := start.Add(p.timeout)
		dctx, cancel := context.WithDeadline(ctx, deadline)
		var err error
		data, err = p.rego.cluster.data(dctx)
		cancel()
		if err != nil {
			p.logger.Error("cannot build the Kubernetes data of a context-aware Rego policy", "error", err)
			return rejected(start, msgClusterData+": "+err.Error(), 500), nil
		}
		if timeout = time.Until(deadline); timeout <= 0 {
			return nil, fmt.Errorf("policy %s: %w after %s: building the Kubernetes data took the whole evaluation time", p.id, wasm.ErrTimeout, p.timeout)
		}
	}
	callStart := time.Now()
	out, err := p.rego.mod.Eval(ctx, timeout, input, data)
	guest := time.Since(callStart)
	if err != nil {
		if errors.Is(err, opa.ErrOutputLimit) {
			err = fmt.Errorf("%w: %w", ErrInvalidResponse, err)
		}
		return nil, fmt.Errorf("policy %s: %w", p.id, err)
	}
	var res *Result
	if p.rego.mode == metadata.ExecutionModeGatekeeper {
		res = gatekeeperResult(out)
	} else {
		res = opaResult(out)
	}
	res.GuestDuration = guest
	res.Duration = time.Since(start)
	return res, nil
}

func rejected(start time.Time, msg string, code uint16) *Result {
	res := &Result{Response: newRejection(msg, code)}
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
func opaResult(out []byte) *Result {
	var results []struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) == 0 || len(results[0].Result) == 0 {
		return &Result{Response: newRejection(msgOPANoResult, 500)}
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
		return &Result{Response: newRejection(fmt.Sprintf("%s: %v", msgOPANoResult, err), 500)}
	}
	r := doc.Response
	switch {
	case r == nil:
		return &Result{Response: newRejection(msgOPANoResult+": no response", 500)}
	case r.UID == nil:
		return &Result{Response: newRejection("missing field `uid`", 500)}
	case r.Allowed == nil:
		return &Result{Response: newRejection("missing field `allowed`", 500)}
	}
	res := &Result{}
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
			return &Result{Response: newRejection(fmt.Sprintf("%s: patch is not a base64-encoded JSON document", msgOPANoResult), 500)}
		}
		if r.PatchType != nil && *r.PatchType != "JSONPatch" {
			return &Result{Response: newRejection(fmt.Sprintf("%s: patchType %q (want JSONPatch)", msgOPANoResult, *r.PatchType), 500)}
		}
		res.Patch = patch
	}
	return res
}

// gatekeeperResult reads result[0].result as the violations [{"msg": ...}]:
// none accepts; otherwise the request is rejected with the messages joined by
// ", " and no code. A result of any other shape counts as no violation, as
// with Kubewarden.
func gatekeeperResult(out []byte) *Result {
	var results []struct {
		Result []struct {
			Msg *string `json:"msg"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) == 0 || len(results[0].Result) == 0 {
		return &Result{Response: protocol.ValidationResponse{Accepted: true}}
	}
	msgs := make([]string, 0, len(results[0].Result))
	for _, v := range results[0].Result {
		if v.Msg != nil {
			msgs = append(msgs, *v.Msg)
		} else {
			msgs = append(msgs, "")
		}
	}
	return &Result{Response: newRejection(strings.Join(msgs, ", "), 0)}
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
