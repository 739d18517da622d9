package jsonengine

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// attrs are the attributes of an admission request the matching reads.
type attrs struct {
	group, version, kind      string
	resourceGroup, resVersion string
	resource, subResource     string
	name, namespace           string
	operation                 string
	object, oldObject         map[string]any
}

func (a *attrs) isNamespaceObject() bool {
	return a.resourceGroup == "" && a.resource == "namespaces"
}

// matches is the apiserver's policy matcher (generic.PolicyMatcher over
// matchResources): namespace selector, object selector, excluded rules,
// rules. An error is reported only when the rules match.
func (e *Engine) matches(a *attrs, m *matchResources) (bool, error) {
	if m.NamespaceSelector == nil {
		return false, errors.New("a nil namespace selector was passed, please ensure selectors are initialized properly")
	}
	if m.ObjectSelector == nil {
		return false, errors.New("a nil object selector was passed, please ensure selectors are initialized properly")
	}
	nsMatches, nsErr := e.matchNamespace(a, m.NamespaceSelector)
	if !nsMatches && nsErr == nil {
		return false, nil
	}
	objMatches, objErr := matchObjectSelector(a, m.ObjectSelector)
	if !objMatches && objErr == nil {
		return false, nil
	}
	if matchRules(m.ExcludeResourceRules, a) {
		return false, nil
	}
	if len(m.ResourceRules) > 0 && !matchRules(m.ResourceRules, a) {
		return false, nil
	}
	if nsErr != nil {
		return false, nsErr
	}
	if objErr != nil {
		return false, objErr
	}
	return true, nil
}

func matchRules(rules []namedRule, a *attrs) bool {
	for _, r := range rules {
		if !ruleMatches(&r, a) {
			continue
		}
		if len(r.ResourceNames) == 0 {
			return true
		}
		for _, n := range r.ResourceNames {
			if n == a.name {
				return true
			}
		}
	}
	return false
}

// ruleMatches is the apiserver's rules.Matcher.
func ruleMatches(r *namedRule, a *attrs) bool {
	return matchScope(r.Scope, a) &&
		matchWild(r.Operations, a.operation) &&
		matchWild(r.APIGroups, a.resourceGroup) &&
		matchWild(r.APIVersions, a.resVersion) &&
		matchResource(r.Resources, a)
}

func matchScope(scope *string, a *attrs) bool {
	if scope == nil || *scope == "*" {
		return true
	}
	switch *scope {
	case "Namespaced":
		return !a.isNamespaceObject() && a.namespace != ""
	case "Cluster":
		return a.isNamespaceObject() || a.namespace == ""
	}
	return false
}

func matchWild(list []string, s string) bool {
	for _, x := range list {
		if x == "*" || x == s {
			return true
		}
	}
	return false
}

func matchResource(list []string, a *attrs) bool {
	for _, r := range list {
		res, sub, _ := strings.Cut(r, "/")
		if (res == "*" || res == a.resource) && (sub == "*" || sub == a.subResource) {
			return true
		}
	}
	return false
}

func (e *Engine) matchNamespace(a *attrs, sel *labelSelector) (bool, error) {
	if a.namespace == "" && a.resource != "namespaces" {
		return true, nil // cluster-scoped objects other than namespaces are never exempted
	}
	s, err := compileSelector(sel)
	if err != nil {
		return false, fmt.Errorf("Internal error occurred: %w", err)
	}
	if s.empty() {
		return true, nil
	}
	var labels map[string]string
	if a.resource == "namespaces" && a.subResource == "" && (a.operation == "CREATE" || a.operation == "UPDATE") {
		labels = stringMap(get(a.object, "metadata", "labels"))
	} else {
		ns, err := e.namespace(a.namespace)
		if err != nil {
			return false, err // only a cluster's namespaces fail
		}
		labels = stringMap(get(ns, "metadata", "labels"))
	}
	return s.matches(labels), nil
}

func matchObjectSelector(a *attrs, sel *labelSelector) (bool, error) {
	s, err := compileSelector(sel)
	if err != nil {
		return false, fmt.Errorf("Internal error occurred: %w", err)
	}
	if s.empty() {
		return true, nil
	}
	match := func(obj map[string]any) bool {
		return obj != nil && s.matches(stringMap(get(obj, "metadata", "labels")))
	}
	return match(a.object) || match(a.oldObject), nil
}

// selector is a compiled metav1.LabelSelector (LabelSelectorAsSelector).
type selector []requirement

type requirement struct {
	key, op string
	values  []string
}

func (s selector) empty() bool { return len(s) == 0 }

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, has := labels[r.key]
		switch r.op {
		case "In":
			if !has || !contains(r.values, v) {
				return false
			}
		case "NotIn":
			if has && contains(r.values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func compileSelector(sel *labelSelector) (selector, error) {
	if sel == nil {
		return nil, nil
	}
	var out selector
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, requirement{key: k, op: "In", values: []string{sel.MatchLabels[k]}})
	}
	for _, x := range sel.MatchExpressions {
		switch x.Operator {
		case "In", "NotIn":
			if len(x.Values) == 0 {
				return nil, fmt.Errorf("values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty")
			}
		case "Exists", "DoesNotExist":
			if len(x.Values) > 0 {
				return nil, fmt.Errorf("values: Invalid value: %#v: values set must be empty for exists and does not exist", x.Values)
			}
		default:
			return nil, fmt.Errorf("%q is not a valid label selector operator", x.Operator)
		}
		out = append(out, requirement{key: x.Key, op: x.Operator, values: x.Values})
	}
	return out, nil
}

// namespace returns the Namespace object of name: the cluster's (WithCluster),
// the settings' one, or one with only the label the apiserver sets on every
// namespace.
func (e *Engine) namespace(name string) (map[string]any, error) {
	if e.cluster != nil {
		return e.clusterNamespace(name)
	}
	if ns, ok := e.namespaces[name]; ok {
		return ns, nil
	}
	ns, _ := roundTripObject(map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"kubernetes.io/metadata.name": name}},
	}, "", "v1", "Namespace", false)
	return ns, nil
}
