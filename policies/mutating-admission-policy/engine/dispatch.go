package engine

import (
	"context"
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// The dispatch of one policy and its binding, as the apiserver's
// MutatingAdmissionPolicy plugin does it (generic policy dispatcher, policy
// matcher and mutating dispatcher of k8s.io/apiserver): match the policy's
// matchConstraints, then the binding's matchResources, collect the params,
// and for each param evaluate the matchConditions and run the mutations in
// order. Errors are collected per invocation and failurePolicy decides whether
// they reject the request.

// policyError is one error attributed to the policy (and binding).
type policyError struct {
	binding bool
	err     error
	// reason is StatusReasonInvalid for errors of the evaluation (match
	// conditions, mutations); configuration errors keep Forbidden's reason.
	reason metav1.StatusReason
}

func (e *Engine) message(pe policyError) string {
	if pe.binding {
		return fmt.Sprintf("policy '%s' with binding '%s' denied request: %s", e.settings.Policy.Name, e.settings.Binding.Name, pe.err.Error())
	}
	return fmt.Sprintf("policy %q denied request: %s", e.settings.Policy.Name, pe.err.Error())
}

// dispatch returns the object after the mutations (nil when there is no
// object), or a status error that rejects the request. On the fast path a
// mutated object is returned in its canonicalObject, which carries its
// encoding.
//
// With a non-nil fast state, the versioned objects are wrapped in
// canonicalObjects (see canonical.go); the caller must redo the dispatch
// without it when the state reports a failure.
func (e *Engine) dispatch(ctx context.Context, attr admission.Attributes, fast *fastState) (runtime.Object, *apierrors.StatusError) {
	policy, binding := e.settings.Policy, e.settings.Binding
	var errs []policyError

	var result runtime.Object
	run := func() *apierrors.StatusError {
		matches, matchGVR, matchGVK, err := e.matches(attr, policy.Spec.MatchConstraints)
		if err != nil {
			errs = append(errs, policyError{err: fmt.Errorf("failed to configure policy: %w", err)})
			return nil
		}
		if !matches {
			return nil
		}
		if binding.Spec.MatchResources != nil {
			matches, _, _, err = e.matches(attr, binding.Spec.MatchResources)
			if err != nil {
				errs = append(errs, policyError{binding: true, err: fmt.Errorf("failed to configure binding: %w", err)})
				return nil
			}
			if !matches {
				return nil
			}
		}
		versioned, err := admission.NewVersionedAttributes(attr, matchGVK, e.objects)
		if err != nil {
			errs = append(errs, policyError{err: fmt.Errorf("failed to configure policy: %w", err)})
			return nil
		}
		if fast != nil {
			versioned.VersionedObject = wrapTyped(versioned.VersionedObject, fast)
			versioned.VersionedOldObject = wrapTyped(versioned.VersionedOldObject, fast)
			fast.request = newRequestInput(attr, matchGVR, matchGVK)
			fast.object, _ = versioned.VersionedObject.(*canonicalObject)
		}
		params, err := e.collectParams(attr.GetNamespace())
		if err != nil {
			errs = append(errs, policyError{binding: true, err: fmt.Errorf("failed to configure binding: %w", err)})
			return nil
		}
		if len(params) == 0 {
			return nil
		}

		var namespace *corev1.Namespace
		namespaceName := attr.GetNamespace()
		if gvk := attr.GetKind(); gvk.Kind == "Namespace" && gvk.Version == "v1" && gvk.Group == "" {
			namespaceName = ""
		}
		if namespaceName != "" {
			if namespace, err = e.namespaces.Get(namespaceName); err != nil {
				// Only a cluster's namespaces fail (the settings' never do).
				errs = append(errs, policyError{binding: true, err: fmt.Errorf("failed to get the namespace object: %w", err)})
				return nil
			}
		}

		for _, param := range params {
			ictx := ctx
			if e.evaluator.compiler != nil {
				ictx = e.evaluator.compiler.CreateContext(ctx)
			}
			if fast != nil && e.evaluator.matcher != nil {
				matches := e.fastMatch(ictx, versioned, param, fast)
				if fast.failed {
					return nil // redone on the exact path
				}
				if !matches {
					continue
				}
			} else if e.evaluator.matcher != nil {
				res := e.evaluator.matcher.Match(ictx, versioned, param, e.authorizer)
				if res.Error != nil {
					errs = append(errs, policyError{binding: true, err: res.Error, reason: metav1.StatusReasonInvalid})
					continue
				}
				if !res.Matches {
					continue
				}
			}
			for i, patcher := range e.evaluator.patchers {
				if versioned.VersionedObject == nil {
					continue
				}
				err := e.patchOne(ictx, patcher, &e.evaluator.mutations[i], versioned, namespace, matchGVR, plugincel.OptionalVariableBindings{VersionedParams: param, Authorizer: e.authorizer}, fast)
				if fast != nil && fast.failed {
					return nil // redone on the exact path
				}
				if err != nil {
					var se *apierrors.StatusError
					if errors.As(err, &se) {
						return se
					}
					errs = append(errs, policyError{binding: true, err: err, reason: metav1.StatusReasonInvalid})
				}
			}
		}
		if versioned.VersionedObject != nil && versioned.Dirty {
			result = versioned.VersionedObject
			if fast == nil {
				result = unwrap(result)
			}
		}
		return nil
	}
	if se := run(); se != nil {
		return nil, se
	}
	if *policy.Spec.FailurePolicy == admissionregistrationv1.Fail && len(errs) > 0 {
		status := apierrors.NewForbidden(attr.GetResource().GroupResource(), attr.GetName(), errors.New("admission request denied by policy"))
		status.ErrStatus.Message = e.message(errs[0])
		if errs[0].reason != "" {
			status.ErrStatus.Reason = errs[0].reason
		}
		for _, pe := range errs {
			status.ErrStatus.Details.Causes = append(status.ErrStatus.Details.Causes, metav1.StatusCause{Message: e.message(pe)})
		}
		return nil, status
	}
	if result == nil {
		return attr.GetObject(), nil
	}
	return result, nil
}

// patchOne is the mutating dispatcher's dispatchOne.
func (e *Engine) patchOne(ctx context.Context, patcher patch.Patcher, mutation *compiledMutation, versioned *admission.VersionedAttributes, namespace *corev1.Namespace, resource schema.GroupVersionResource, vars plugincel.OptionalVariableBindings, fast *fastState) error {
	tc := e.types.GetTypeConverter(versioned.VersionedKind)
	if _, wrapped := versioned.VersionedObject.(*canonicalObject); wrapped && tc != nil {
		tc = canonicalConverter{tc}
	}
	req := patch.Request{
		MatchedResource:     resource,
		VersionedAttributes: versioned,
		ObjectInterfaces:    e.objects,
		OptionalVariables:   vars,
		Namespace:           namespace,
		TypeConverter:       tc,
	}
	var obj runtime.Object
	if fast != nil {
		if obj = e.fastPatch(ctx, mutation, req, fast); fast.failed {
			return nil // the caller stops
		}
	} else {
		var err error
		if obj, err = patcher.Patch(ctx, req, celconfig.RuntimeCELCostBudget); err != nil {
			return err
		}
	}
	// A JSONPatch whose test failed returns the object it was given.
	obj = unwrap(obj)
	if _, ok := versioned.VersionedObject.(*unstructured.Unstructured); !ok {
		u, isUnstructured := obj.(*unstructured.Unstructured)
		if fast != nil && isUnstructured {
			// An apply configuration's result: ConvertToVersion would
			// convert it by reflection; typedFromUnstructured gives the same
			// object through JSON, or declines.
			var ok bool
			if obj, ok = e.spliceResult(versioned, u.Object, false); ok {
				obj.GetObjectKind().SetGroupVersionKind(versioned.VersionedKind)
			} else if obj, ok = e.typedFromUnstructured(u, versioned.VersionedKind, versioned.GetKind()); !ok {
				fast.failed = true
				return nil
			}
		} else {
			var err error
			obj, err = e.objects.GetObjectConvertor().ConvertToVersion(obj, versioned.GetKind().GroupVersion())
			if err != nil {
				return err
			}
		}
	}
	e.objects.GetObjectDefaulter().Default(obj)
	versioned.Dirty = true
	versioned.VersionedObject = obj
	if fast != nil {
		versioned.VersionedObject = wrapTyped(obj, fast)
	}
	return nil
}

// rulesMayMatch is false when the policy's resource rules alone rule the
// request out (no rule matches, or an excluded rule does). Rules read only
// the request's attributes, not its objects, and when they rule a request
// out, matches returns false without an error whatever the selectors say;
// Evaluate uses this to accept such requests before decoding their objects.
// A policy whose matchConstraints dispatch would report as an error (nil
// selectors) is left to dispatch.
func (e *Engine) rulesMayMatch(attr admission.Attributes) bool {
	m := e.settings.Policy.Spec.MatchConstraints
	if m == nil || m.NamespaceSelector == nil || m.ObjectSelector == nil {
		return true
	}
	if excluded, _, _, _ := e.matchRules(m.ExcludeResourceRules, m.MatchPolicy, attr); excluded {
		return false
	}
	if len(m.ResourceRules) == 0 {
		return true
	}
	matched, _, _, _ := e.matchRules(m.ResourceRules, m.MatchPolicy, attr)
	return matched
}

// matches is the apiserver's matching.Matcher.Matches for one MatchResources:
// namespace selector, object selector, excluded rules, rules.
func (e *Engine) matches(attr admission.Attributes, m *admissionregistrationv1.MatchResources) (bool, schema.GroupVersionResource, schema.GroupVersionKind, error) {
	var none schema.GroupVersionResource
	var noKind schema.GroupVersionKind
	if m.NamespaceSelector == nil {
		return false, none, noKind, errors.New("a nil namespace selector was passed, please ensure selectors are initialized properly")
	}
	if m.ObjectSelector == nil {
		return false, none, noKind, errors.New("a nil object selector was passed, please ensure selectors are initialized properly")
	}
	nsMatches, nsErr := e.matchNamespace(attr, m.NamespaceSelector)
	if !nsMatches && nsErr == nil {
		return false, none, noKind, nil
	}
	objMatches, objErr := matchObjectSelector(attr, m.ObjectSelector)
	if !objMatches && objErr == nil {
		return false, none, noKind, nil
	}
	if excluded, _, _, err := e.matchRules(m.ExcludeResourceRules, m.MatchPolicy, attr); excluded || err != nil {
		return false, none, noKind, err
	}
	isMatch, gvr, gvk := true, attr.GetResource(), attr.GetKind()
	if len(m.ResourceRules) > 0 {
		var err error
		isMatch, gvr, gvk, err = e.matchRules(m.ResourceRules, m.MatchPolicy, attr)
		if err != nil {
			return false, none, noKind, err
		}
	}
	if !isMatch {
		return false, none, noKind, nil
	}
	if nsErr != nil {
		return false, none, noKind, nsErr
	}
	if objErr != nil {
		return false, none, noKind, objErr
	}
	return true, gvr, gvk, nil
}

func (e *Engine) matchRules(named []admissionregistrationv1.NamedRuleWithOperations, policy *admissionregistrationv1.MatchPolicyType, attr admission.Attributes) (bool, schema.GroupVersionResource, schema.GroupVersionKind, error) {
	for _, r := range named {
		m := rules.Matcher{Rule: admissionregistrationv1.RuleWithOperations(r.RuleWithOperations), Attr: attr}
		if !m.Matches() {
			continue
		}
		if len(r.ResourceNames) == 0 {
			return true, attr.GetResource(), attr.GetKind(), nil
		}
		for _, n := range r.ResourceNames {
			if n == attr.GetName() {
				return true, attr.GetResource(), attr.GetKind(), nil
			}
		}
	}
	// matchPolicy Equivalent would now try the resources equivalent to the
	// request's (the same objects served under another group/version). The
	// sandbox has no discovery to know them, exactly like an apiserver whose
	// equivalent-resource registry lists none, so Equivalent adds nothing here.
	return false, schema.GroupVersionResource{}, schema.GroupVersionKind{}, nil
}

func (e *Engine) matchNamespace(attr admission.Attributes, sel *metav1.LabelSelector) (bool, error) {
	if attr.GetNamespace() == "" && attr.GetResource().Resource != "namespaces" {
		return true, nil // cluster-scoped objects other than namespaces are never exempted
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if selector.Empty() {
		return true, nil
	}
	var nsLabels map[string]string
	if attr.GetResource().Resource == "namespaces" && attr.GetSubresource() == "" &&
		(attr.GetOperation() == admission.Create || attr.GetOperation() == admission.Update) {
		accessor, err := meta.Accessor(attr.GetObject())
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		nsLabels = accessor.GetLabels()
	} else {
		ns, err := e.namespaces.Get(attr.GetNamespace())
		if err != nil {
			return false, err // only a cluster's namespaces fail
		}
		nsLabels = ns.Labels
	}
	return selector.Matches(labels.Set(nsLabels)), nil
}

func matchObjectSelector(attr admission.Attributes, sel *metav1.LabelSelector) (bool, error) {
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if selector.Empty() {
		return true, nil
	}
	return matchObject(attr.GetObject(), selector) || matchObject(attr.GetOldObject(), selector), nil
}

func matchObject(obj runtime.Object, selector labels.Selector) bool {
	if obj == nil {
		return false
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return selector.Matches(labels.Set(accessor.GetLabels()))
}

// collectParams is the apiserver's CollectParams: the params of one binding,
// a single nil when the policy has no paramKind or the binding no paramRef.
func (e *Engine) collectParams(namespace string) ([]runtime.Object, error) {
	kind, ref := e.settings.Policy.Spec.ParamKind, e.settings.Binding.Spec.ParamRef
	if kind == nil || ref == nil {
		return []runtime.Object{nil}, nil
	}
	namespaced := e.paramsNamespaced
	var gvk schema.GroupVersionKind // of the params read from the cluster
	if e.cluster != nil {
		gv, err := schema.ParseGroupVersion(kind.APIVersion)
		if err != nil {
			return nil, fmt.Errorf("paramKind.apiVersion %q: %w", kind.APIVersion, err)
		}
		gvk = gv.WithKind(kind.Kind)
		if namespaced, err = e.cluster.ParamsNamespaced(kind.APIVersion, kind.Kind); err != nil {
			return nil, fmt.Errorf("failed to find the scope of paramKind %s: %w", gvk.String(), err)
		}
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
	var selector labels.Selector
	switch {
	case ref.Name != "":
		if ref.Selector != nil {
			return nil, errors.New("paramRef.name and paramRef.selector are mutually exclusive")
		}
	case ref.Selector != nil:
		var err error
		if selector, err = metav1.LabelSelectorAsSelector(ref.Selector); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	var params []runtime.Object
	switch {
	case e.cluster != nil:
		var err error
		if params, err = e.clusterParams(gvk, paramsNamespace, ref.Name, selector); err != nil {
			return nil, err
		}
	case selector == nil:
		for _, p := range e.params {
			if p.namespace == paramsNamespace && p.name == ref.Name {
				params = []runtime.Object{p.obj}
				break
			}
		}
	default:
		for _, p := range e.params {
			if (!namespaced || p.namespace == paramsNamespace) && selector.Matches(labels.Set(p.labels)) {
				params = append(params, p.obj)
			}
		}
	}
	if len(params) == 0 && ref.ParameterNotFoundAction != nil && *ref.ParameterNotFoundAction == admissionregistrationv1.DenyAction {
		return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
	}
	return params, nil
}
