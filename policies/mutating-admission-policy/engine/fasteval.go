package engine

import (
	"context"
	gojson "encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"
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

	resolved  uint16
	values    [8]any
	variables ref.Val
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
// left. ok is false (and the fast state failed) for anything that is not a
// plain success: the apiserver's evaluator reports those.
func evalProgram(ctx context.Context, act *lazyActivation, res *plugincel.CompilationResult, budget int64) (ref.Val, int64, bool) {
	if res.Error != nil || res.Program == nil || act.fast.failed {
		act.fast.failed = true
		return nil, -1, false
	}
	val, details, err := res.Program.ContextEval(ctx, act)
	if act.cctx != nil {
		cost := act.cctx.GetAndResetCost()
		if cost > budget {
			act.fast.failed = true
			return nil, -1, false
		}
		budget -= cost
	}
	if err != nil || details == nil || act.fast.failed {
		act.fast.failed = true
		return nil, -1, false
	}
	cost := details.ActualCost()
	if cost == nil || *cost > math.MaxInt64 || int64(*cost) > budget {
		act.fast.failed = true
		return nil, -1, false
	}
	return val, budget - int64(*cost), true
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
// the match-conditions budget.
func (e *Engine) fastMatch(ctx context.Context, versioned *admission.VersionedAttributes, param runtime.Object, fast *fastState) (matches, ok bool) {
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
	matches = true
	for i := range e.evaluator.conditions {
		var val ref.Val
		val, budget, ok = evalProgram(act.cctx, act, &e.evaluator.conditions[i], budget)
		if !ok {
			return false, false
		}
		switch val {
		case types.False:
			matches = false
		case types.True:
		default:
			fast.failed = true
			return false, false
		}
	}
	return matches, true
}

// fastPatch runs one mutation (the patcher's expression, evaluated with a
// lazy activation) and returns the patched object as the apiserver's patcher
// would, or ok=false.
func (e *Engine) fastPatch(ctx context.Context, m *compiledMutation, req patch.Request, fast *fastState) (runtime.Object, bool) {
	act := &lazyActivation{
		versioned: req.VersionedAttributes,
		request:   fast.request,
		params:    req.OptionalVariables.VersionedParams,
		namespace: req.Namespace,
		authz:     req.OptionalVariables.Authorizer,
		fast:      fast,
	}
	act.cctx, _ = ctx.(plugincel.CompositionContext)
	val, _, ok := evalProgram(ctx, act, &m.result, runtimeCELCostBudget)
	if !ok {
		return nil, false
	}
	switch m.kind {
	case mutationApply:
		return e.fastApplyConfiguration(val, req, fast)
	case mutationJSONPatch:
		return e.fastJSONPatch(val, req, fast)
	}
	fast.failed = true
	return nil, false
}

// fastApplyConfiguration is the apply-configuration patcher after the
// evaluation.
func (e *Engine) fastApplyConfiguration(val ref.Val, req patch.Request, fast *fastState) (runtime.Object, bool) {
	objVal, ok := val.(*dynamic.ObjectVal)
	if !ok {
		fast.failed = true
		return nil, false
	}
	value, ok := objectValue(objVal)
	if !ok {
		fast.failed = true
		return nil, false
	}
	obj := req.VersionedAttributes.VersionedObject
	gvk := obj.GetObjectKind().GroupVersionKind()
	patchObject := &unstructured.Unstructured{Object: value}
	patchObject.SetGroupVersionKind(gvk)
	// fastApply merges like structured-merge-diff for the patches it can
	// vouch for; the others (and every error) go through the apiserver's
	// ApplyStructuredMergeDiff.
	if live, ok := obj.(runtime.Unstructured); ok && gvk == req.VersionedAttributes.VersionedKind {
		if s, root, ok := e.types.mergeSchema(gvk); ok {
			if merged, ok := fastApply(s, root, live.UnstructuredContent(), patchObject.Object); ok {
				return &unstructured.Unstructured{Object: merged}, !fast.failed
			}
		}
	}
	e.declines.Add(1)
	patched, err := patch.ApplyStructuredMergeDiff(req.TypeConverter, obj, patchObject)
	if err != nil {
		fast.failed = true
		return nil, false
	}
	return patched, true
}

// fastJSONPatch is the JSONPatch patcher after the evaluation: the same
// operations, applied by the same library to the same encoding, decoded by
// the same strict serializer.
func (e *Engine) fastJSONPatch(val ref.Val, req patch.Request, fast *fastState) (runtime.Object, bool) {
	fail := func() (runtime.Object, bool) {
		fast.failed = true
		return nil, false
	}
	versioned := req.VersionedAttributes
	// The operations applied to the object's unstructured content
	// (fastjsonpatch.go) when they can be vouched for, then the apiserver's
	// strict decoding of the result.
	if ops, ok := decodeJSONPatchOps(val); ok {
		if live, ok := versioned.VersionedObject.(runtime.Unstructured); ok {
			content := live.UnstructuredContent()
			if fast.failed {
				return nil, false
			}
			if out, testFailed, ok := applyJSONPatchOps(content, ops); ok {
				if testFailed {
					// A failed test leaves the object as it is.
					return versioned.VersionedObject, true
				}
				if obj, ok := e.decodePatched(out, versioned); ok {
					return obj, true
				}
			}
		}
	}

	e.declines.Add(1)
	list, ok := val.(traits.Lister)
	if !ok {
		return fail()
	}
	ops := jsonpatch.Patch{}
	for it := list.Iterator(); it.HasNext() == types.True; {
		native, err := it.Next().ConvertToNative(jsonPatchValType)
		if err != nil {
			return fail()
		}
		op, ok := native.(*mutation.JSONPatchVal)
		if !ok {
			return fail()
		}
		o := jsonpatch.Operation{}
		o["op"] = rawJSON(strconv.Quote(op.Op))
		o["path"] = rawJSON(strconv.Quote(op.Path))
		if len(op.From) > 0 {
			o["from"] = rawJSON(strconv.Quote(op.From))
		}
		if op.Val != nil {
			if objVal, ok := op.Val.(*dynamic.ObjectVal); ok && objVal.CheckTypeNamesMatchFieldPathNames() != nil {
				return fail()
			}
			v, err := op.Val.ConvertToNative(structpbValueType)
			if err != nil {
				return fail()
			}
			b, err := gojson.Marshal(v)
			if err != nil {
				return fail()
			}
			o["value"] = rawJSON(string(b))
		}
		ops = append(ops, o)
	}
	serializer := k8sjson.NewSerializerWithOptions(k8sjson.DefaultMetaFactory, req.ObjectInterfaces.GetObjectCreater(), req.ObjectInterfaces.GetObjectTyper(), k8sjson.SerializerOptions{Strict: true})
	objJS, err := runtime.Encode(serializer, versioned.VersionedObject)
	if err != nil {
		return fail()
	}
	patchedJS, err := ops.Apply(objJS)
	if err != nil {
		if errors.Is(err, jsonpatch.ErrTestFailed) {
			// A failed test leaves the object as it is.
			return versioned.VersionedObject, true
		}
		return fail()
	}
	var out runtime.Object
	if _, ok := versioned.VersionedObject.(*unstructured.Unstructured); ok {
		out = &unstructured.Unstructured{}
	} else {
		out, err = req.ObjectInterfaces.GetObjectCreater().New(versioned.VersionedKind)
		if err != nil {
			return fail()
		}
	}
	if out, _, err = serializer.Decode(patchedJS, nil, out); err != nil {
		return fail()
	}
	return out, true
}

var jsonPatchValType = reflect.TypeOf(&mutation.JSONPatchVal{})

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

func rawJSON(s string) *gojson.RawMessage {
	r := gojson.RawMessage(s)
	return &r
}
