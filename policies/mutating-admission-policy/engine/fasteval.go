package engine

import (
	"context"
	"math"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation/dynamic"
	sigsjson "sigs.k8s.io/json"
)

const (
	runtimeCELCostBudget                = celconfig.RuntimeCELCostBudget
	runtimeCELCostBudgetMatchConditions = celconfig.RuntimeCELCostBudgetMatchConditions
)

// The lean evaluation of CEL programs used by the fast path.
//
// The apiserver's evaluators (plugincel's condition and mutating evaluators)
// build an activation that converts every variable up front: the object, the
// old object, the params and the namespace to unstructured, and the
// AdmissionRequest to unstructured by reflection, for every expression
// evaluated. In Wasm that was a third of an evaluation, mostly for variables
// the expressions never read. lazyActivation resolves the same names to the
// same values, computed on first use.
//
// The fast path only ever vouches for successful evaluations: an evaluation
// error, a conversion error, an exhausted cost budget or a result of an
// unexpected type marks the evaluation failed (fastState.failed), and
// Evaluate redoes the request with the apiserver's evaluators, which produce
// the apiserver's error, message and failurePolicy outcome. So the messages
// need not be reproduced here, only the successful values, and for those the
// program, the variables and the budget arithmetic are the apiserver's.

// lazyActivation is the apiserver's evaluationActivation with every variable
// computed on first use.
//
// The apiserver converts every variable up front and fails the evaluation
// if a conversion fails, even for a variable no expression reads. Here the
// inputs are typed objects decoded by the engine, parameter objects from
// the settings, a Namespace and the AdmissionRequest built from the
// request, whose conversions to unstructured do not fail; a conversion that
// does fail when it is computed still marks the evaluation for the exact
// path.
type lazyActivation struct {
	versioned *admission.VersionedAttributes
	request   func() *admissionRequestInput
	params    runtime.Object
	namespace *corev1.Namespace
	authz     authorizer.Authorizer
	cctx      plugincel.CompositionContext
	fast      *fastState

	resolved uint16
	values   [8]any
}

// admissionRequestInput is what CreateAdmissionRequest needs: the request
// variable is converted once per dispatch, shared by every activation.
type admissionRequestInput struct {
	content map[string]any
	err     error
}

const (
	slotObject = iota
	slotOldObject
	slotParams
	slotRequest
	slotNamespace
	slotAuthorizer
	slotResourceAuthorizer
	slotVariables
)

// toResolveVal is the apiserver's objectToResolveVal: nil for no object,
// otherwise the unstructured content.
func (a *lazyActivation) toResolveVal(obj runtime.Object) any {
	if obj == nil || reflect.ValueOf(obj).IsNil() {
		return nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		a.fast.failed = true
		return nil
	}
	return u
}

func (a *lazyActivation) slot(i int, compute func() any) any {
	if a.resolved&(1<<i) == 0 {
		a.values[i] = compute()
		a.resolved |= 1 << i
	}
	return a.values[i]
}

// ResolveName resolves the names the apiserver's activation resolves, to
// the same values.
func (a *lazyActivation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.slot(slotObject, func() any { return a.toResolveVal(a.versioned.VersionedObject) }), true
	case plugincel.OldObjectVarName:
		return a.slot(slotOldObject, func() any { return a.toResolveVal(a.versioned.VersionedOldObject) }), true
	case plugincel.ParamsVarName:
		return a.slot(slotParams, func() any { return a.toResolveVal(a.params) }), true
	case plugincel.RequestVarName:
		return a.slot(slotRequest, func() any {
			in := a.request()
			if in.err != nil {
				a.fast.failed = true
				return nil
			}
			return in.content
		}), true
	case plugincel.NamespaceVarName:
		return a.slot(slotNamespace, func() any {
			if a.namespace == nil {
				return nil
			}
			return a.toResolveVal(a.namespace)
		}), true
	case plugincel.AuthorizerVarName:
		if a.authz == nil {
			return nil, false
		}
		return a.slot(slotAuthorizer, func() any { return library.NewAuthorizerVal(a.versioned.GetUserInfo(), a.authz) }), true
	case plugincel.RequestResourceAuthorizerVarName:
		if a.authz == nil {
			return nil, false
		}
		return a.slot(slotResourceAuthorizer, func() any {
			return library.NewResourceAuthorizerVal(a.versioned.GetUserInfo(), a.authz, a.versioned)
		}), true
	case plugincel.VariableVarName:
		return a.slot(slotVariables, func() any {
			if a.cctx == nil {
				return nil
			}
			return a.cctx.Variables(a)
		}), true
	}
	return nil, false
}

func (a *lazyActivation) Parent() interpreter.Activation { return nil }

// evalProgram evaluates one compiled expression as the apiserver's
// activation.Evaluate does on success, and returns the value and the budget
// left. Anything that is not a plain success marks the fast state failed
// (the apiserver's evaluator reports those) and returns a nil value.
func evalProgram(ctx context.Context, act *lazyActivation, res *plugincel.CompilationResult, budget int64) (ref.Val, int64) {
	fail := func() (ref.Val, int64) {
		act.fast.failed = true
		return nil, -1
	}
	if res.Error != nil || res.Program == nil || act.fast.failed {
		return fail()
	}
	val, details, err := res.Program.ContextEval(ctx, act)
	if act.cctx != nil {
		cost := act.cctx.GetAndResetCost()
		if cost > budget {
			return fail()
		}
		budget -= cost
	}
	if err != nil || details == nil || act.fast.failed {
		return fail()
	}
	cost := details.ActualCost()
	if cost == nil || *cost > math.MaxInt64 || int64(*cost) > budget {
		return fail()
	}
	return val, budget - int64(*cost)
}

// newRequestInput returns the request variable's content, converted once:
// plugincel.CreateAdmissionRequest with the matched resource and kind, then
// the same reflection conversion as the apiserver's activation.
func newRequestInput(attr admission.Attributes, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) func() *admissionRequestInput {
	var in *admissionRequestInput
	return func() *admissionRequestInput {
		if in == nil {
			in = &admissionRequestInput{}
			req := plugincel.CreateAdmissionRequest(attr, metav1.GroupVersionResource(gvr), metav1.GroupVersionKind(gvk))
			in.content, in.err = runtime.DefaultUnstructuredConverter.ToUnstructured(req)
		}
		return in
	}
}

// fastMatch evaluates the match conditions as the apiserver's matcher does,
// for the outcomes without errors: all true (matches) or one false (does
// not). The conditions share one activation and one composition context and
// the match-conditions budget. Any other outcome marks the fast state
// failed.
func (e *Engine) fastMatch(ctx context.Context, versioned *admission.VersionedAttributes, param runtime.Object, fast *fastState) bool {
	// The matcher's attributes are the request's; its request variable uses
	// the request's resource and the versioned kind.
	act := &lazyActivation{
		versioned: versioned,
		request:   newRequestInput(versioned.Attributes, versioned.GetResource(), versioned.VersionedKind),
		params:    param,
		authz:     e.authorizer,
		cctx:      e.evaluator.compiler.CreateContext(ctx),
		fast:      fast,
	}
	// The apiserver evaluates every condition before it looks at the
	// results (a later condition exhausting the budget makes the whole
	// match an error even after a false one), so all are evaluated here
	// too, and any of them that is not a plain true or false hands the
	// request to the exact path.
	budget := int64(runtimeCELCostBudgetMatchConditions)
	matches := true
	for i := range e.evaluator.conditions {
		var val ref.Val
		if val, budget = evalProgram(act.cctx, act, &e.evaluator.conditions[i], budget); fast.failed {
			return false
		}
		switch val {
		case types.False:
			matches = false
		case types.True:
		default:
			fast.failed = true
			return false
		}
	}
	return matches
}

// fastPatch runs one mutation (the patcher's expression, evaluated with a
// lazy activation) and returns the patched object as the apiserver's patcher
// would. Anything else marks the fast state failed.
func (e *Engine) fastPatch(ctx context.Context, m *compiledMutation, req patch.Request, fast *fastState) runtime.Object {
	act := &lazyActivation{
		versioned: req.VersionedAttributes,
		request:   fast.request,
		params:    req.OptionalVariables.VersionedParams,
		namespace: req.Namespace,
		authz:     req.OptionalVariables.Authorizer,
		fast:      fast,
	}
	act.cctx, _ = ctx.(plugincel.CompositionContext)
	val, _ := evalProgram(ctx, act, &m.result, runtimeCELCostBudget)
	if fast.failed {
		return nil
	}
	var obj runtime.Object
	switch m.kind {
	case mutationApply:
		obj = e.fastApplyConfiguration(val, req)
	case mutationJSONPatch:
		obj = e.fastJSONPatch(val, req)
	}
	if fast.failed {
		return nil
	}
	if obj == nil {
		// fastApply or applyJSONPatchOps declined: the apiserver's own
		// patcher finishes the mutation from the value.
		e.declines.Add(1)
		newPatcher := patch.NewApplyConfigurationPatcher
		if m.kind == mutationJSONPatch {
			newPatcher = patch.NewJSONPatcher
		}
		var err error
		if obj, err = newPatcher(evaluated{val}).Patch(ctx, req, runtimeCELCostBudget); err != nil {
			fast.failed = true
			return nil
		}
	}
	return obj
}

// evaluated is a mutating evaluator whose expression the fast path has
// already evaluated: it lets the apiserver's patchers finish a mutation.
type evaluated struct{ val ref.Val }

func (e evaluated) ForInput(context.Context, *admission.VersionedAttributes, *admissionv1.AdmissionRequest, plugincel.OptionalVariableBindings, *corev1.Namespace, int64) (plugincel.EvaluationResult, int64, error) {
	return plugincel.EvaluationResult{EvalResult: e.val}, 0, nil
}

func (e evaluated) CompilationErrors() []error { return nil }

// fastApplyConfiguration is the apply-configuration patcher after the
// evaluation, for the values objectValue converts and the patches fastApply
// merges; nil when one of them declines.
func (e *Engine) fastApplyConfiguration(val ref.Val, req patch.Request) runtime.Object {
	objVal, ok := val.(*dynamic.ObjectVal)
	if !ok {
		return nil
	}
	value, ok := objectValue(objVal)
	if !ok {
		return nil
	}
	obj := req.VersionedAttributes.VersionedObject
	gvk := obj.GetObjectKind().GroupVersionKind()
	live, ok := obj.(runtime.Unstructured)
	if !ok || gvk != req.VersionedAttributes.VersionedKind {
		return nil
	}
	s, root, ok := e.types.mergeSchema(gvk)
	if !ok {
		return nil
	}
	// The patcher sets the object's kind on the patch.
	patchObject := &unstructured.Unstructured{Object: value}
	patchObject.SetGroupVersionKind(gvk)
	merged, ok := fastApply(s, root, live.UnstructuredContent(), patchObject.Object)
	if !ok {
		return nil
	}
	return &unstructured.Unstructured{Object: merged}
}

// fastJSONPatch is the JSONPatch patcher after the evaluation: the
// operations applied to the object's unstructured content
// (fastjsonpatch.go), then the patcher's strict decoding of the result; nil
// when one of them declines.
func (e *Engine) fastJSONPatch(val ref.Val, req patch.Request) runtime.Object {
	versioned := req.VersionedAttributes
	ops, ok := decodeJSONPatchOps(val)
	if !ok {
		return nil
	}
	live, ok := versioned.VersionedObject.(runtime.Unstructured)
	if !ok {
		return nil
	}
	out, testFailed, ok := applyJSONPatchOps(live.UnstructuredContent(), ops)
	if !ok {
		return nil
	}
	if testFailed {
		// A failed test leaves the object as it is.
		return versioned.VersionedObject
	}
	obj, _ := e.decodePatched(out, versioned)
	return obj
}

// decodePatched is the JSON patcher's strict decoding of the patched
// document, into the versioned kind (typed, or unstructured for the kinds
// held unstructured), from the patched unstructured content. ok=false for
// anything the decoding would refuse (unknown or duplicate fields, values
// of the wrong type) or decode differently (apiVersion or kind changed).
func (e *Engine) decodePatched(content map[string]any, versioned *admission.VersionedAttributes) (runtime.Object, bool) {
	kind := versioned.VersionedKind
	apiVersion, kindName := kind.ToAPIVersionAndKind()
	if content["apiVersion"] != apiVersion || content["kind"] != kindName {
		return nil, false
	}
	if obj, ok := e.spliceResult(versioned, content, true); ok {
		return obj, true
	}
	b, err := marshalUnstructured(content)
	if err != nil {
		return nil, false
	}
	if _, ok := versioned.VersionedObject.(*unstructured.Unstructured); ok {
		m := map[string]any{}
		if strict, err := sigsjson.UnmarshalStrict(b, &m); err != nil || len(strict) > 0 {
			return nil, false
		}
		return &unstructured.Unstructured{Object: m}, true
	}
	obj, err := e.objects.GetObjectCreater().New(kind)
	if err != nil {
		return nil, false
	}
	if strict, err := sigsjson.UnmarshalStrict(b, obj); err != nil || len(strict) > 0 {
		return nil, false
	}
	return obj, true
}
