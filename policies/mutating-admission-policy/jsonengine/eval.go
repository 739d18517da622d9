package jsonengine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/lazy"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/internal/nulls"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Engine is one compiled MutatingAdmissionPolicy with its binding, candidate
// parameter objects and namespaces.
type Engine struct {
	s             *settings
	variables     []compiledVariable
	variablesType *apiservercel.DeclType
	conditions    []namedCompiled
	mutations     []compiledMutation
	namespaces    map[string]map[string]any
	authorize     authorizerFunc
	// cluster, when set (WithCluster), answers namespaces, params and the
	// authorizer's checks instead of the settings.
	cluster Cluster
}

// Result is the outcome of one request: accepted unchanged (Object nil),
// accepted with the mutated object, or rejected with the apiserver's
// message and code.
type Result struct {
	Accepted bool
	Object   json.RawMessage
	Message  string
	Code     int32
}

// Compile decodes and compiles the settings.
func Compile(data []byte) (*Engine, error) {
	s, err := decodeSettings(data)
	if err != nil {
		return nil, err
	}
	e := &Engine{s: s, namespaces: map[string]map[string]any{}, authorize: newAuthorizer(s.RBAC)}
	for _, ns := range s.Namespaces {
		md := ns["metadata"].(map[string]any)
		labels, _ := md["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
			md["labels"] = labels
		}
		name := str(md["name"])
		if _, ok := labels["kubernetes.io/metadata.name"]; !ok {
			labels["kubernetes.io/metadata.name"] = name
		}
		ns["apiVersion"], ns["kind"] = "v1", "Namespace"
		typedNS, err := roundTripObject(ns, "", "v1", "Namespace", false)
		if err != nil {
			return nil, fmt.Errorf("%w: namespaces: %s: %v", ErrInvalidSettings, name, err)
		}
		e.namespaces[name] = typedNS
	}
	for i, p := range s.Params {
		gv := str(p["apiVersion"])
		g, v, found := strings.Cut(gv, "/")
		if !found {
			g, v = "", gv
		}
		typedParam, err := roundTripObject(p, g, v, str(p["kind"]), false)
		if err != nil {
			return nil, fmt.Errorf("%w: params[%d]: %v", ErrInvalidSettings, i, err)
		}
		s.Params[i] = typedParam
	}
	if err := e.compilePolicy(&s.Policy); err != nil {
		return nil, err
	}
	return e, nil
}

// policyError is an error of one invocation, reported with the policy (and
// the binding) as the apiserver's dispatcher reports it.
type policyError struct {
	binding bool
	err     error
}

func (e *Engine) message(pe policyError) string {
	if pe.binding {
		return fmt.Sprintf("policy '%s' with binding '%s' denied request: %s", e.s.Policy.Name, e.s.Binding.Name, pe.err.Error())
	}
	return fmt.Sprintf("policy %q denied request: %s", e.s.Policy.Name, pe.err.Error())
}

// Evaluate runs the policy on one admission request.
func (e *Engine) Evaluate(ctx context.Context, req *protocol.KubernetesAdmissionRequest) (*Result, error) {
	switch req.Operation {
	case "CREATE", "UPDATE", "CONNECT":
	default:
		return &Result{Accepted: true}, nil
	}
	if e.cluster != nil {
		// One evaluation asks the cluster each question once.
		e = e.WithCluster(&memoCluster{c: e.cluster})
	}
	a := &attrs{
		group: req.Kind.Group, version: req.Kind.Version, kind: req.Kind.Kind,
		resourceGroup: req.Resource.Group, resVersion: req.Resource.Version, resource: req.Resource.Resource,
		subResource: req.SubResource, name: req.Name, namespace: req.Namespace, operation: req.Operation,
	}
	var err error
	if a.object, err = decodeObject(req.Object); err != nil {
		return nil, fmt.Errorf("request.object: %w", err)
	}
	if a.oldObject, err = decodeObject(req.OldObject); err != nil {
		return nil, fmt.Errorf("request.oldObject: %w", err)
	}
	// decodeObject's maps are the evaluation's own: converted in place.
	roundTripRequest := roundTripRequestObject
	if slowPaths {
		roundTripRequest = func(obj map[string]any, _ []byte, group, version, kind string) (map[string]any, error) {
			return roundTripObject(obj, group, version, kind, false)
		}
	}
	if a.object, err = roundTripRequest(a.object, req.Object, a.group, a.version, a.kind); err != nil {
		return nil, fmt.Errorf("request.object: %w", err)
	}
	if a.oldObject, err = roundTripRequest(a.oldObject, req.OldObject, a.group, a.version, a.kind); err != nil {
		return nil, fmt.Errorf("request.oldObject: %w", err)
	}
	object, errs, se := e.dispatch(ctx, a, req)
	if se != nil {
		return &Result{Message: se.message, Code: se.code}, nil
	}
	if *e.s.Policy.Spec.FailurePolicy == "Fail" && len(errs) > 0 {
		return &Result{Message: e.message(errs[0]), Code: 403}, nil
	}
	if object == nil || a.object == nil {
		return &Result{Accepted: true}, nil
	}
	return e.result(a.object, object, req.Object, !slowPaths)
}

// result compares the request's object with the mutated one: unchanged if
// they encode alike, else the mutated object's JSON with its null members
// following those of the request's object as sent (raw). fast compares them
// without encoding the request's object where sameJSON can tell.
func (e *Engine) result(object, mutated map[string]any, raw json.RawMessage, fast bool) (*Result, error) {
	if fast {
		if after, err := encodeJSON(mutated); err == nil {
			if same, ok := sameJSON(object, mutated); ok {
				if same {
					return &Result{Accepted: true}, nil
				}
				return mutatedResult(after, raw)
			}
		}
	}
	before, err := encodeJSON(object)
	if err != nil {
		return nil, fmt.Errorf("request.object: %w", err)
	}
	after, err := encodeJSON(mutated)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated object: %w", err)
	}
	if bytes.Equal(before, after) {
		return &Result{Accepted: true}, nil
	}
	return mutatedResult(after, raw)
}

// mutatedResult answers with the mutated object's encoding, its null members
// made to follow the request's (creationTimestamp: null, which the typed
// encoding omits), as the standard-Go engine's are: the host's patch holds
// only what the policy changed (test/mapdiff compares the patches).
func mutatedResult(after []byte, raw json.RawMessage) (*Result, error) {
	after, err := nulls.Prune(after, raw)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated object: %w", err)
	}
	return &Result{Accepted: true, Object: after}, nil
}

// dispatch is the apiserver's generic and mutating dispatchers for one
// policy and binding: it returns the mutated object (nil when nothing
// changed it) and the invocations' errors.
func (e *Engine) dispatch(ctx context.Context, a *attrs, req *protocol.KubernetesAdmissionRequest) (map[string]any, []policyError, *statusError) {
	spec, binding := &e.s.Policy.Spec, &e.s.Binding
	var errs []policyError
	matches, err := e.matches(a, spec.MatchConstraints)
	if err != nil {
		return nil, append(errs, policyError{err: fmt.Errorf("failed to configure policy: %w", err)}), nil
	}
	if !matches {
		return nil, nil, nil
	}
	if binding.Spec.MatchResources != nil {
		matches, err = e.matches(a, binding.Spec.MatchResources)
		if err != nil {
			return nil, append(errs, policyError{binding: true, err: fmt.Errorf("failed to configure binding: %w", err)}), nil
		}
		if !matches {
			return nil, nil, nil
		}
	}
	params, err := e.collectParams(a.namespace)
	if err != nil {
		return nil, append(errs, policyError{binding: true, err: fmt.Errorf("failed to configure binding: %w", err)}), nil
	}
	if len(params) == 0 {
		return nil, nil, nil
	}
	var namespace map[string]any
	nsName := a.namespace
	if a.kind == "Namespace" && a.version == "v1" && a.group == "" {
		nsName = ""
	}
	if nsName != "" {
		if namespace, err = e.namespace(nsName); err != nil {
			// Only a cluster's namespaces fail (the settings' never do).
			return nil, append(errs, policyError{binding: true, err: fmt.Errorf("failed to get the namespace object: %w", err)}), nil
		}
	}
	request := requestValue(a, req)
	authz := newAuthorizerVal(&userInfo{name: req.UserInfo.Username, groups: req.UserInfo.Groups}, e.authorize)
	requestResource := newRequestResourceVal(authz, a)
	object, dirty := a.object, false
	for _, param := range params {
		act := &activation{object: object, oldObject: a.oldObject, request: request, params: param, authorizer: authz, requestResource: requestResource}
		if len(e.conditions) > 0 {
			act.variables = e.newVariables(act)
			ok, err := e.matchConditions(ctx, act)
			if err != nil {
				errs = append(errs, policyError{binding: true, err: err})
				continue
			}
			if !ok {
				continue
			}
		}
		for i := range e.mutations {
			if object == nil {
				continue
			}
			mact := &activation{object: object, oldObject: a.oldObject, request: request, params: param, namespace: namespace, kind: a, authorizer: authz, requestResource: requestResource}
			mact.variables = e.newVariables(mact)
			out, err := e.patch(ctx, &e.mutations[i], mact)
			var se *statusError
			if errors.As(err, &se) {
				return nil, nil, se
			}
			if err != nil {
				errs = append(errs, policyError{binding: true, err: err})
				continue
			}
			if out != nil {
				object, dirty = out, true
			}
		}
	}
	if !dirty {
		return nil, errs, nil
	}
	return object, errs, nil
}

// matchConditions is the apiserver's match-conditions matcher: every
// condition true to match, a false one skips the policy; errors go to the
// failure policy (Ignore: no match). The conditions see no namespaceObject.
func (e *Engine) matchConditions(ctx context.Context, act *activation) (bool, error) {
	budget := int64(celconfig.RuntimeCELCostBudgetMatchConditions)
	fail := *e.s.Policy.Spec.FailurePolicy == "Fail"
	var list []error
	for i := range e.conditions {
		val, rest, err := act.evaluate(ctx, &e.conditions[i].compiled, budget)
		if err != nil {
			if fail {
				return false, err
			}
			return false, nil
		}
		budget = rest
		if val.err != nil {
			list = append(list, val.err)
		}
		if val.val == types.False {
			return false, nil
		}
	}
	if len(list) > 0 {
		if fail {
			return false, aggregate(list)
		}
		return false, nil
	}
	return true, nil
}

// aggregate formats errors as apimachinery's utilerrors.NewAggregate:
// one message alone, several in brackets, duplicates dropped.
func aggregate(list []error) error {
	seen := map[string]bool{}
	var msgs []string
	for _, err := range list {
		m := err.Error()
		if !seen[m] {
			seen[m] = true
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 1 {
		return errors.New(msgs[0])
	}
	return errors.New("[" + strings.Join(msgs, ", ") + "]")
}

// activation is the apiserver's evaluation activation: the variables an
// expression sees.
type activation struct {
	object, oldObject, request, params, namespace map[string]any
	kind                                          *attrs // the request's kind, for the typed decoding of a patch's result
	variables                                     ref.Val
	authorizer                                    authorizerVal
	requestResource                               resourceCheckVal
	cost                                          int64 // of the composited variables evaluated since the last evaluate
}

var _ interpreter.Activation = (*activation)(nil)

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "object":
		return nilMap(a.object), true
	case "oldObject":
		return nilMap(a.oldObject), true
	case "params":
		return nilMap(a.params), true
	case "request":
		return a.request, true
	case "namespaceObject":
		return nilMap(a.namespace), true
	case "variables":
		return a.variables, true
	case authorizerVarName:
		return a.authorizer, true
	case requestResourceVarName:
		return a.requestResource, true
	}
	return nil, false
}

// nilMap gives a missing object as nil (CEL's null), not as a typed nil map.
func nilMap(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

func (a *activation) Parent() interpreter.Activation { return nil }

type evaluation struct {
	val ref.Val
	err error
}

var errOutOfBudget = errors.New("validation failed due to running out of cost budget, no further validation rules will be run")

// evaluate is the apiserver's evaluationActivation.Evaluate: it runs c,
// charges its cost (and that of the composited variables it evaluated) to
// budget, and returns the value or the expression's error.
func (a *activation) evaluate(ctx context.Context, c *compiled, budget int64) (evaluation, int64, error) {
	if c.err != nil {
		return evaluation{err: fmt.Errorf("compilation error: %v", c.err)}, budget, nil
	}
	val, details, err := c.program.ContextEval(ctx, a)
	if a.cost > 0 {
		cost := a.cost
		a.cost = 0
		if cost > budget {
			return evaluation{}, -1, errOutOfBudget
		}
		budget -= cost
	}
	if details == nil || details.ActualCost() == nil {
		return evaluation{}, -1, fmt.Errorf("runtime cost could not be calculated for expression: %v, no further expression will be run", c.expression)
	}
	if rt := *details.ActualCost(); rt > math.MaxInt64 || int64(rt) > budget {
		return evaluation{}, -1, errOutOfBudget
	} else {
		budget -= int64(rt)
	}
	if err != nil {
		return evaluation{err: fmt.Errorf("expression '%v' resulted in error: %v", c.expression, err)}, budget, nil
	}
	return evaluation{val: val}, budget, nil
}

// newVariables is the composition context's lazy "variables" map: each
// variable is evaluated when first used, once per context.
func (e *Engine) newVariables(act *activation) ref.Val {
	m := lazy.NewMapValue(e.variablesTypeOrDyn())
	for i := range e.variables {
		v := &e.variables[i]
		m.Append(v.name, func(*lazy.MapValue) ref.Val {
			if v.err != nil {
				return types.NewErr("composited variable %q fails to compile: %v", v.name, v.err)
			}
			val, details, err := v.program.ContextEval(context.Background(), act)
			if details == nil {
				return types.NewErr("unable to get evaluation details of variable %q", v.name)
			}
			cost := details.ActualCost()
			if cost == nil {
				return types.NewErr("unable to calculate cost of variable %q", v.name)
			}
			c := int64(*cost)
			if *cost > math.MaxInt64 {
				c = math.MaxInt64
			}
			act.cost += c
			if err != nil {
				return types.NewErr("composited variable %q fails to evaluate: %v", v.name, err)
			}
			return val
		})
	}
	return m
}

func (e *Engine) variablesTypeOrDyn() ref.Type {
	if e.variablesType != nil {
		return e.variablesType
	}
	return types.DynType
}

// requestValue is the "request" variable: the apiserver's
// CreateAdmissionRequest as runtime.DefaultUnstructuredConverter gives it.
func requestValue(a *attrs, req *protocol.KubernetesAdmissionRequest) map[string]any {
	gvk := map[string]any{"group": a.group, "version": a.version, "kind": a.kind}
	gvr := map[string]any{"group": a.resourceGroup, "version": a.resVersion, "resource": a.resource}
	user := map[string]any{}
	if req.UserInfo.Username != "" {
		user["username"] = req.UserInfo.Username
	}
	if req.UserInfo.UID != "" {
		user["uid"] = req.UserInfo.UID
	}
	if len(req.UserInfo.Groups) > 0 {
		groups := make([]any, len(req.UserInfo.Groups))
		for i, g := range req.UserInfo.Groups {
			groups[i] = g
		}
		user["groups"] = groups
	}
	if len(req.UserInfo.Extra) > 0 {
		extra := map[string]any{}
		for k, vs := range req.UserInfo.Extra {
			l := make([]any, len(vs))
			for i, v := range vs {
				l[i] = v
			}
			extra[k] = l
		}
		user["extra"] = extra
	}
	r := map[string]any{
		"uid": "", "kind": gvk, "resource": gvr,
		"requestKind": gvk, "requestResource": gvr,
		"operation": a.operation, "userInfo": user,
		"dryRun": req.DryRun != nil && *req.DryRun,
		"object": nil, "oldObject": nil, "options": nil,
	}
	if a.subResource != "" {
		r["subResource"], r["requestSubResource"] = a.subResource, a.subResource
	}
	if a.name != "" {
		r["name"] = a.name
	}
	if a.namespace != "" {
		r["namespace"] = a.namespace
	}
	if opts, err := decodeObject(req.Options); err == nil && opts != nil {
		r["options"] = opts
	}
	return r
}

// collectParams gives the parameter objects of one invocation: [nil] without
// paramKind or paramRef, else the params paramRef selects (the apiserver's
// generic dispatcher).
func (e *Engine) collectParams(namespace string) ([]map[string]any, error) {
	kind, ref := e.s.Policy.Spec.ParamKind, e.s.Binding.Spec.ParamRef
	if kind == nil || ref == nil {
		return []map[string]any{nil}, nil
	}
	namespaced := ref.Namespace != ""
	var candidates []map[string]any
	if e.cluster != nil {
		g, v, err := parseGroupVersion(kind.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("paramKind.apiVersion %q: %w", kind.APIVersion, err)
		}
		if namespaced, err = e.cluster.ParamsNamespaced(kind.APIVersion, kind.Kind); err != nil {
			return nil, fmt.Errorf("failed to find the scope of paramKind %s: %w", gvkString(g, v, kind.Kind), err)
		}
	}
	for _, p := range e.s.Params {
		if str(p["apiVersion"]) != kind.APIVersion || str(p["kind"]) != kind.Kind {
			continue
		}
		if str(get(p, "metadata", "namespace")) != "" {
			namespaced = true
		}
		candidates = append(candidates, p)
	}
	paramsNamespace := ""
	if namespaced {
		paramsNamespace = namespace
		if ref.Namespace != "" {
			paramsNamespace = ref.Namespace
		} else if paramsNamespace == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var sel selector
	switch {
	case ref.Name != "":
		if ref.Selector != nil {
			return nil, errors.New("paramRef.name and paramRef.selector are mutually exclusive")
		}
	case ref.Selector != nil:
		var err error
		if sel, err = compileSelector(ref.Selector); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	var params []map[string]any
	if e.cluster != nil {
		var err error
		if params, err = e.clusterParams(kind.APIVersion, kind.Kind, paramsNamespace, ref.Name, ref.Selector); err != nil {
			return nil, err
		}
		candidates = nil
	}
	for _, p := range candidates {
		ns := str(get(p, "metadata", "namespace"))
		if ref.Selector == nil {
			if ns == paramsNamespace && str(get(p, "metadata", "name")) == ref.Name {
				params = []map[string]any{p}
				break
			}
		} else if (!namespaced || ns == paramsNamespace) && sel.matches(stringMap(get(p, "metadata", "labels"))) {
			params = append(params, p)
		}
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == "Deny" {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}

// DecodeObject decodes a JSON object as unstructured content, as the
// apiserver holds it: integers as int64, other numbers as float64; nil for an
// absent or null object, an error for anything but an object.
func DecodeObject(b []byte) (map[string]any, error) { return decodeObject(b) }

// decodeObject decodes a JSON object as unstructured content: integers as
// int64, other numbers as float64; nil for an absent or null object.
func decodeObject(b json.RawMessage) (map[string]any, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if m, ok := decodeFast(b); ok {
		return m, nil
	}
	return decodeObjectLibrary(b)
}

// decodeObjectLibrary is decodeObject by encoding/json (b trimmed, not null).
func decodeObjectLibrary(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return fromNumbers(m).(map[string]any), nil
}

func fromNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = fromNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromNumbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
