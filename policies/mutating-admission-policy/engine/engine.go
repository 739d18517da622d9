package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	sigsjson "sigs.k8s.io/json"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/nulls"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Engine is one compiled policy with its binding and parameters. It is safe
// for concurrent use; build it once per settings value.
type Engine struct {
	settings         *Settings
	evaluator        policyEvaluator
	params           []paramEntry
	paramsNamespaced bool
	namespaces       namespaceGetter
	authorizer       authorizer.Authorizer
	// cluster, when set (WithCluster), answers namespaces, params and the
	// authorizer instead of the settings.
	cluster Cluster
	types   *typeConverters
	objects admission.ObjectInterfaces
	scheme  *runtime.Scheme
	// exactOnly disables the canonicalObject fast path (tests compare both).
	exactOnly bool
	// failFast makes every fast evaluation report a failed conversion, to
	// test the rerun on the exact path.
	failFast bool
	// fallbacks counts the evaluations the fast path handed to the exact
	// path (a pointer: tests copy the Engine to compare the paths).
	fallbacks *atomic.Int64
	// declines counts the mutations the fast path ran through the
	// apiserver's patch code because fastApply or applyJSONPatchOps declined
	// them (same results, more time); tests check the common cases avoid it.
	declines *atomic.Int64
}

// Fallbacks is how many evaluations the fast path could not vouch for and
// redid on the exact path (evaluation errors, rejections and the rare
// conversions it declines); see fasteval.go.
func (e *Engine) Fallbacks() int64 { return e.fallbacks.Load() }

// Result is the outcome of one evaluation.
type Result struct {
	// Accepted is false when the request must be rejected.
	Accepted bool
	// Object is the mutated object as JSON, nil when the object is unchanged
	// (or the request was rejected).
	Object json.RawMessage
	// Message and Code describe a rejection like the apiserver's status error.
	Message string
	Code    int32
}

// Compile decodes settings (JSON or YAML) and compiles them; see Decode and New.
func Compile(settings []byte) (*Engine, error) {
	s, err := Decode(settings)
	if err != nil {
		return nil, err
	}
	return New(s)
}

// New compiles every CEL expression of the policy once. A policy the
// apiserver would refuse to store (a syntax error, a wrong return type, an
// unknown variable...) is an error wrapping ErrInvalidSettings that names the
// field, the expression and the CEL error with its position.
func New(s *Settings) (*Engine, error) {
	evaluator, errs := compilePolicy(s.Policy)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: MutatingAdmissionPolicy %q: %v", ErrInvalidSettings, s.Policy.Name, errs.ToAggregate())
	}
	sch := objectScheme
	params, namespaced, err := newParams(s.Policy.Spec.ParamKind, s.Params, s.Binding.Spec.ParamRef, sch)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSettings, err)
	}
	e := &Engine{
		settings:         s,
		evaluator:        evaluator,
		params:           params,
		paramsNamespaced: namespaced,
		namespaces:       newNamespaceLister(s.Namespaces),
		authorizer:       newAuthorizer(s.RBAC),
		types:            newTypeConverters(sch),
		objects:          admission.NewObjectInterfacesFromScheme(sch),
		scheme:           sch,
		fallbacks:        new(atomic.Int64),
		declines:         new(atomic.Int64),
	}
	return e, nil
}

// Settings returns the decoded settings the engine was built from.
func (e *Engine) Settings() *Settings { return e.settings }

// Evaluate runs the policy on one admission request.
func (e *Engine) Evaluate(ctx context.Context, req *protocol.KubernetesAdmissionRequest) (*Result, error) {
	op := admission.Operation(req.Operation)
	switch op {
	case admission.Create, admission.Update, admission.Connect:
	default:
		// The MutatingAdmissionPolicy plugin does not handle other operations (DELETE).
		return &Result{Accepted: true}, nil
	}
	gvk := schema.GroupVersionKind{Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind}
	gvr := schema.GroupVersionResource{Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource}
	dryRun := req.DryRun != nil && *req.DryRun
	userInfo := &user.DefaultInfo{Name: req.UserInfo.Username, UID: req.UserInfo.UID, Groups: req.UserInfo.Groups, Extra: req.UserInfo.Extra}
	if !e.rulesMayMatch(admission.NewAttributesRecord(nil, nil, gvk, req.Namespace, req.Name, gvr, req.SubResource, op, nil, dryRun, userInfo)) {
		return &Result{Accepted: true}, nil
	}
	obj, err := e.decodeObject(req.Object, gvk)
	if err != nil {
		return nil, fmt.Errorf("request.object: %w", err)
	}
	oldObj, err := e.decodeObject(req.OldObject, gvk)
	if err != nil {
		return nil, fmt.Errorf("request.oldObject: %w", err)
	}
	var options runtime.Object
	if !isNull(req.Options) {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(req.Options); err == nil {
			options = u
		}
	}
	attr := admission.NewAttributesRecord(obj, oldObj, gvk, req.Namespace, req.Name, gvr, req.SubResource, op, options, dryRun, userInfo)
	if e.cluster != nil {
		// One evaluation asks the cluster each question once, whichever path answers.
		e = e.WithCluster(&memoCluster{c: e.cluster})
	}

	var fast *fastState
	if !e.exactOnly {
		fast = &fastState{}
	}
	mutated, se := e.dispatch(ctx, attr, fast)
	if fast != nil && e.failFast {
		fast.failed = true
	}
	if fast != nil && fast.failed {
		// Something the fast path cannot vouch for: redo it all exactly.
		e.fallbacks.Add(1)
		mutated, se = e.dispatch(ctx, attr, nil)
	}
	if se != nil {
		return &Result{Message: se.ErrStatus.Message, Code: se.ErrStatus.Code}, nil
	}
	if obj == nil || mutated == nil || unwrap(mutated) == obj {
		// No mutation ran (nothing matched, or the conditions were false).
		return &Result{Accepted: true}, nil
	}
	// A mutation ran; it may have left the object as it was (a failed
	// JSONPatch test). Compare the encodings, as the apiserver would store them.
	// The evaluators never modify the object they are given (they return
	// new ones), so obj is still the request's object as decoded.
	var original runtime.Object = obj
	if fast != nil && !fast.failed && fast.object != nil && fast.object.typed == obj {
		original = fast.object
	}
	before, err := encode(original)
	if err != nil {
		return nil, fmt.Errorf("request.object: %w", err)
	}
	after, err := encode(mutated)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated object: %w", err)
	}
	if bytes.Equal(before, after) {
		return &Result{Accepted: true}, nil
	}
	out, err := nulls.Prune(after, req.Object)
	if err != nil {
		return nil, err
	}
	return &Result{Accepted: true, Object: out}, nil
}

// decodeObject decodes a request object the way the apiserver holds it:
// typed for the built-in kinds client-go knows, unstructured otherwise.
func (e *Engine) decodeObject(raw json.RawMessage, gvk schema.GroupVersionKind) (runtime.Object, error) {
	if isNull(raw) {
		return nil, nil
	}
	if e.scheme.Recognizes(gvk) {
		return e.decodeTyped(raw, gvk)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// decodeTyped decodes JSON into a new typed object of kind gvk, as the
// apiserver's JSON decoding does (case-sensitive, integers kept), and sets
// its kind.
func (e *Engine) decodeTyped(raw []byte, gvk schema.GroupVersionKind) (runtime.Object, error) {
	obj, err := e.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}
