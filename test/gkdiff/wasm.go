package gkdiff

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// ModulePath is the built module, relative to this package.
const ModulePath = "../../policies/gatekeeper-mutation/policy.wasm"

// LoadModule reads the built module (GKDIFF_MODULE overrides the path); a
// missing module is an error saying how to build it, never a skip.
func LoadModule() ([]byte, error) {
	path := ModulePath
	if p := os.Getenv("GKDIFF_MODULE"); p != "" {
		path = p
	}
	b, err := os.ReadFile(path)
	if err != nil {
		abs, _ := filepath.Abs(path)
		return nil, fmt.Errorf("the gatekeeper-mutation module is not built (%v): run `scripts/build-policies.sh policies/gatekeeper-mutation` to build %s", err, abs)
	}
	return b, nil
}

// Wasm is the tollgate module loaded with one settings object through
// tollgate's host, as `tollgate run` and `serve` load it.
type Wasm struct {
	p *policy.Policy
}

// NewWasm loads the module with the settings; an error is the settings
// refused (validate_settings) or a host failure.
func NewWasm(ctx context.Context, h *policy.Host, module, settings []byte) (*Wasm, error) {
	p, err := h.Load(ctx, policy.Spec{ID: "gatekeeper-mutation", Module: module, Settings: settings, Timeout: 30 * time.Second, PoolSize: 1})
	if err != nil {
		return nil, err
	}
	return &Wasm{p: p}, nil
}

// Close releases the policy.
func (w *Wasm) Close(ctx context.Context) { w.p.Close(ctx) }

// AdmissionRequest is req as the host receives it.
func AdmissionRequest(req Request) []byte {
	b, _ := json.Marshal(protocol.KubernetesAdmissionRequest{
		UID:       "00000000-0000-0000-0000-000000000001",
		Kind:      protocol.GroupVersionKind{Group: req.Group, Version: req.Version, Kind: req.Kind},
		Resource:  protocol.GroupVersionResource{Group: req.Group, Version: req.Version, Resource: strings.ToLower(req.Kind) + "s"},
		Name:      req.Name,
		Namespace: req.Namespace,
		Operation: req.Operation,
		UserInfo:  protocol.UserInfo{Username: req.Username, Groups: []string{"system:authenticated"}},
		Object:    req.Object,
		OldObject: oldObject(req),
	})
	return b
}

// oldObject is the object itself for an UPDATE (what it was does not
// matter to mutation), nothing otherwise.
func oldObject(req Request) json.RawMessage {
	if req.Operation == "UPDATE" || req.Operation == "DELETE" {
		return req.Object
	}
	return nil
}

// Evaluate runs one request through the module. A host error (trap,
// invalid answer) is returned as an error: it is never an outcome.
func (w *Wasm) Evaluate(ctx context.Context, req Request) (Outcome, error) {
	return w.evaluate(ctx, AdmissionRequest(req), req.Object)
}

func (w *Wasm) evaluate(ctx context.Context, admissionRequest, object []byte) (Outcome, error) {
	res, err := w.p.Validate(ctx, admissionRequest)
	if err != nil {
		return Outcome{}, err
	}
	resp := res.Response
	if !resp.Accepted {
		o := Outcome{Rejected: true}
		if resp.Message != nil {
			o.Message = *resp.Message
		}
		return o, nil
	}
	if len(resp.MutatedObject) == 0 {
		return Outcome{}, nil
	}
	return mutatedOutcome(object, resp.MutatedObject)
}

// mutatedOutcome is "unchanged" when the mutated object equals the
// original as JSON (Gatekeeper's empty patch).
func mutatedOutcome(original, mutated []byte) (Outcome, error) {
	c, err := Canonical(mutated)
	if err != nil {
		return Outcome{}, fmt.Errorf("mutated_object: %w", err)
	}
	if o, _ := Canonical(original); o == c {
		return Outcome{}, nil
	}
	return Outcome{Object: c}, nil
}
