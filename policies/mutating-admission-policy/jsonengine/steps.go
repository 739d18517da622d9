//go:build mapsteps

package jsonengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apiserver/pkg/cel/mutation/dynamic"

	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// The per-step profile of docs/benchmarks/mutating-admission-policy.md: each
// step of an apply configuration's evaluation timed alone, in the module
// (built with -tags mapsteps, tinygo/steps_on.go) and natively
// (TestSteps). Not in the shipped module.

// Step is the cost of one step, over n runs.
type Step struct {
	Name      string
	Mean, Min time.Duration
}

// TimeStep runs fn n times (n >= 1) and returns the mean and the fastest
// run; the first error stops it, named by the step.
func TimeStep(name string, n int, fn func() error) (Step, error) {
	var total, min time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := fn(); err != nil {
			return Step{}, fmt.Errorf("%s: %w", name, err)
		}
		d := time.Since(start)
		total += d
		if i == 0 || d < min {
			min = d
		}
	}
	return Step{Name: name, Mean: total / time.Duration(n), Min: min}, nil
}

// MeasureSteps times each step of the evaluation of req (its first
// mutation, an apply configuration) n times, and the whole Evaluate.
func MeasureSteps(settings []byte, req *protocol.KubernetesAdmissionRequest, n int) ([]Step, error) {
	e, err := Compile(settings)
	if err != nil {
		return nil, err
	}
	if len(e.mutations) == 0 || e.mutations[0].patchType != "ApplyConfiguration" {
		return nil, errors.New("MeasureSteps: the first mutation is not an apply configuration")
	}
	ctx := context.Background()
	var steps []Step
	measure := func(name string, fn func() error) error {
		s, err := TimeStep(name, n, fn)
		if err == nil {
			steps = append(steps, s)
		}
		return err
	}
	a := &attrs{
		group: req.Kind.Group, version: req.Kind.Version, kind: req.Kind.Kind,
		resourceGroup: req.Resource.Group, resVersion: req.Resource.Version, resource: req.Resource.Resource,
		subResource: req.SubResource, name: req.Name, namespace: req.Namespace, operation: req.Operation,
	}
	var live, patch, merged, result map[string]any
	var ev evaluation
	var parsePatch *smdParse
	run := []struct {
		name string
		fn   func() error
	}{
		{"first use: structured-merge schema decoded (smd_schema.json)", func() error { _, err := decodeSMDSchema(smdSchemaJSON); return err }},
		{"first use: typed table decoded (typed_kinds.json)", func() error { _, err := decodeTypedTable(typedKindsJSON); return err }},
		{"whole evaluation (Evaluate)", func() error { _, err := e.Evaluate(ctx, req); return err }},
		{"request object decoded (decodeObject)", func() (err error) { live, err = decodeObject(req.Object); return err }},
		{"request object decoded and round-tripped to its typed form", func() (err error) {
			if live, err = decodeObject(req.Object); err != nil {
				return err
			}
			live, err = roundTripRequestObject(live, req.Object, a.group, a.version, a.kind)
			return err
		}},
		{"match (rules, selectors, params)", func() error {
			if ok, err := e.matches(a, e.s.Policy.Spec.MatchConstraints); err != nil || !ok {
				return fmt.Errorf("no match: %v", err)
			}
			_, err := e.collectParams(a.namespace)
			return err
		}},
		{"CEL: the activation and the expression evaluated", func() (err error) {
			request := requestValue(a, req)
			authz := newAuthorizerVal(&userInfo{name: req.UserInfo.Username, groups: req.UserInfo.Groups}, e.authorize)
			act := &activation{object: live, oldObject: nil, request: request, kind: a, authorizer: authz, requestResource: newRequestResourceVal(authz, a)}
			act.variables = e.newVariables(act)
			if ev, _, err = act.evaluate(ctx, &e.mutations[0].compiled, celconfig.RuntimeCELCostBudget); err != nil {
				return err
			}
			return ev.err
		}},
		{"SMD: the patch typed and checked (FromUnstructured, atomics)", func() (err error) {
			obj, ok := ev.val.(*dynamic.ObjectVal)
			if !ok {
				return errors.New("not an object")
			}
			patch, _ = obj.Value().(map[string]any)
			patch["apiVersion"], patch["kind"] = a.version, a.kind
			if a.group != "" {
				patch["apiVersion"] = a.group + "/" + a.version
			}
			parsePatch, err = typePatch(a, patch)
			return err
		}},
		{"SMD: the live object checked against the schema (validates)", func() error {
			if !validates(parsePatch.parse.Schema, parsePatch.parse.TypeRef, live, 0) {
				return errors.New("declined")
			}
			return nil
		}},
		{"SMD: merge of the parts the patch reaches (mergeTouched)", func() error {
			var ok bool
			if merged, ok = mergeTouched(parsePatch.parse, live, patch, parsePatch.typed); !ok {
				return errors.New("declined")
			}
			return nil
		}},
		{"result round-tripped where the patch reached (roundTripTouched)", func() (err error) {
			result, err = roundTripTouched(merged, patch, a.group, a.version, a.kind)
			return err
		}},
		{"result compared with the request's object (sameJSON)", func() error {
			if same, ok := sameJSON(live, result); !ok || same {
				return errors.New("not different")
			}
			return nil
		}},
		{"result encoded (encodeJSON)", func() error { _, err := encodeJSON(result); return err }},
	}
	for _, s := range run {
		if err := measure(s.name, s.fn); err != nil {
			return steps, err
		}
	}
	return steps, nil
}
