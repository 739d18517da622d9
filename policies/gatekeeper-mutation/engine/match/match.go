// Package match decides whether a mutator applies to an object: applyTo
// (group/version/kind and operation) and match (kinds, scope, namespaces,
// excludedNamespaces, labelSelector, namespaceSelector, name, source), like
// Gatekeeper's pkg/mutation/match and pkg/wildcard.
//
// It must NOT know about JSON, paths or mutators.
package match

import (
	"errors"
	"strconv"
	"strings"
)

// ErrMatch prefixes every error of Matches.
var ErrMatch = errors.New("failed to run Match criteria")

// GVK is a group, version and kind.
type GVK struct{ Group, Version, Kind string }

// String formats like k8s.io/apimachinery's GroupVersionKind.
func (g GVK) String() string { return g.Group + "/" + g.Version + ", Kind=" + g.Kind }

// ApplyTo is one applyTo entry (no globs).
type ApplyTo struct {
	Groups, Versions, Kinds []string
	Operations              []string
}

// Kinds is one match.kinds entry.
type Kinds struct{ APIGroups, Kinds []string }

// Match is a mutator's spec.match.
type Match struct {
	Source             string
	Kinds              []Kinds
	Scope              string
	Namespaces         []string
	ExcludedNamespaces []string
	LabelSelector      *LabelSelector
	NamespaceSelector  *LabelSelector
	Name               string
}

// Namespace is a namespace as the matcher sees it.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Object is what the matchers read of the object being mutated.
type Object struct {
	GVK          GVK // from the object's apiVersion and kind
	Name         string
	GenerateName string
	Namespace    string // metadata.namespace
	Labels       map[string]string
	// LoadLabels, when set, gives Labels the first time a selector needs
	// them (most mutators have none; building the map for every object
	// state the system loop sees is its largest cost with many mutators).
	LoadLabels func() map[string]string
}

// labels returns the object's labels, loading them once.
func (o *Object) labels() map[string]string {
	if o.LoadLabels != nil {
		o.Labels, o.LoadLabels = o.LoadLabels(), nil
	}
	return o.Labels
}

// Target is an object with its namespace (nil for cluster-scoped objects)
// and source.
type Target struct {
	Object    *Object
	Namespace *Namespace
	Source    string
}

func contains(set []string, s string) bool {
	for _, e := range set {
		if e == s {
			return true
		}
	}
	return false
}

// Matches returns true when g's group, version and kind are all listed.
func (a *ApplyTo) Matches(g GVK) bool {
	return contains(a.Groups, g.Group) && contains(a.Versions, g.Version) && contains(a.Kinds, g.Kind)
}

// SupportedOperation: Gatekeeper's mutation webhook runs on CREATE and UPDATE only.
func SupportedOperation(op string) bool { return op == "CREATE" || op == "UPDATE" }

// MatchesOperation mirrors MutationApplyTo.MatchesOperation.
func (a *ApplyTo) MatchesOperation(op string) bool {
	all := len(a.Operations) == 0 || contains(a.Operations, "*")
	if op == "" {
		return all || (contains(a.Operations, "CREATE") && contains(a.Operations, "UPDATE"))
	}
	if !SupportedOperation(op) {
		return false
	}
	return all || contains(a.Operations, op)
}

// EffectiveOperations are the operations an entry binds for schema conflicts.
func (a *ApplyTo) EffectiveOperations() []string {
	if len(a.Operations) == 0 || contains(a.Operations, "*") {
		return []string{"CREATE", "UPDATE"}
	}
	var ops []string
	for _, op := range []string{"CREATE", "UPDATE"} {
		if contains(a.Operations, op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// Flatten lists the GVKs of an entry.
func (a *ApplyTo) Flatten() []GVK {
	var out []GVK
	for _, g := range a.Groups {
		for _, v := range a.Versions {
			for _, k := range a.Kinds {
				out = append(out, GVK{g, v, k})
			}
		}
	}
	return out
}

// AppliesGVKAndOperation: one entry must match both.
func AppliesGVKAndOperation(applyTo []ApplyTo, g GVK, op string) bool {
	for i := range applyTo {
		if applyTo[i].Matches(g) && applyTo[i].MatchesOperation(op) {
			return true
		}
	}
	return false
}

// ValidateOperations checks applyTo[].operations like Gatekeeper (all
// problems, joined by "; ").
func ValidateOperations(applyTo []ApplyTo) error {
	var errs []string
	for i, a := range applyTo {
		hasWildcard := false
		seen := map[string]bool{}
		for _, op := range a.Operations {
			if seen[op] {
				errs = append(errs, "duplicate operation "+strconv.Quote(op)+" in applyTo["+strconv.Itoa(i)+"].operations")
			}
			seen[op] = true
			if op != "CREATE" && op != "UPDATE" && op != "*" {
				errs = append(errs, "invalid operation "+strconv.Quote(op)+" in applyTo["+strconv.Itoa(i)+"].operations: must be one of CREATE, UPDATE, *")
			}
			if op == "*" {
				hasWildcard = true
			}
		}
		if hasWildcard && len(a.Operations) > 1 {
			errs = append(errs, "wildcard \"*\" in applyTo["+strconv.Itoa(i)+"].operations must not be combined with other operations")
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// IsNamespace: the object is a core Namespace.
func (o *Object) IsNamespace() bool { return o.GVK.Kind == "Namespace" && o.GVK.Group == "" }

type matchErr struct{ msg string }

func (e matchErr) Error() string { return ErrMatch.Error() + ": " + e.msg }
func (e matchErr) Unwrap() error { return ErrMatch }

// Matches applies every criterion of m to t; an absent criterion holds.
func Matches(m *Match, t *Target) (bool, error) {
	if t.Object == nil {
		return false, matchErr{"obj must be non-nil"}
	}
	obj, ns := t.Object, t.Namespace
	// kinds
	if len(m.Kinds) > 0 {
		ok := false
		for _, kk := range m.Kinds {
			if !(len(kk.Kinds) == 0 || contains(kk.Kinds, "*") || contains(kk.Kinds, obj.GVK.Kind)) {
				continue
			}
			if len(kk.APIGroups) == 0 || contains(kk.APIGroups, "*") || contains(kk.APIGroups, obj.GVK.Group) {
				ok = true
				break
			}
		}
		if !ok {
			return false, nil
		}
	}
	// scope
	hasNamespace := obj.Namespace != "" || ns != nil
	switch m.Scope {
	case "Cluster":
		if !(obj.IsNamespace() || !hasNamespace) {
			return false, nil
		}
	case "Namespaced":
		if !(!obj.IsNamespace() && hasNamespace) {
			return false, nil
		}
	}
	// namespaces, excludedNamespaces
	nsName, haveNS := "", true
	switch {
	case obj.IsNamespace():
		nsName = obj.Name
	case ns != nil:
		nsName = ns.Name
	case obj.Namespace != "":
		nsName = obj.Namespace
	default:
		haveNS = false
	}
	if len(m.Namespaces) > 0 && haveNS {
		ok := false
		for _, w := range m.Namespaces {
			if Wildcard(w, nsName) {
				ok = true
				break
			}
		}
		if !ok {
			return false, nil
		}
	}
	if len(m.ExcludedNamespaces) > 0 && haveNS {
		for _, w := range m.ExcludedNamespaces {
			if Wildcard(w, nsName) {
				return false, nil
			}
		}
	}
	// labelSelector
	if m.LabelSelector != nil {
		sel, err := m.LabelSelector.compile()
		if err != nil {
			return false, matchErr{err.Error()}
		}
		if !sel.matches(obj.labels()) {
			return false, nil
		}
	}
	// namespaceSelector
	if m.NamespaceSelector != nil {
		isNS := obj.IsNamespace()
		if !(!isNS && ns == nil && obj.Namespace == "") {
			sel, err := m.NamespaceSelector.compile()
			if err != nil {
				return false, matchErr{err.Error()}
			}
			switch {
			case isNS:
				if !sel.matches(obj.labels()) {
					return false, nil
				}
			case ns == nil:
				return false, matchErr{"namespace selector for namespace-scoped object but missing Namespace"}
			default:
				if !sel.matches(ns.Labels) {
					return false, nil
				}
			}
		}
	}
	// name
	if m.Name != "" {
		if !Wildcard(m.Name, obj.Name) && !WildcardGenerateName(m.Name, obj.GenerateName) {
			return false, nil
		}
	}
	// source
	src := m.Source
	if src == "" {
		src = "All"
	} else if !validSource(src) {
		return false, matchErr{"invalid source field " + strconv.Quote(src)}
	}
	if t.Source == "" && src != "All" {
		return false, matchErr{"source field not specified for resource " + obj.Name}
	}
	if src == "All" {
		return true, nil
	}
	if !validSource(t.Source) {
		return false, matchErr{"invalid source field " + strconv.Quote(t.Source)}
	}
	return src == t.Source, nil
}

func validSource(s string) bool { return s == "All" || s == "Generated" || s == "Original" }

// Wildcard matches candidate against a prefix and/or suffix glob.
func Wildcard(w, candidate string) bool {
	switch {
	case strings.HasPrefix(w, "*") && strings.HasSuffix(w, "*"):
		return strings.Contains(candidate, strings.TrimSuffix(strings.TrimPrefix(w, "*"), "*"))
	case strings.HasPrefix(w, "*"):
		return strings.HasSuffix(candidate, strings.TrimPrefix(w, "*"))
	case strings.HasSuffix(w, "*"):
		return strings.HasPrefix(candidate, strings.TrimSuffix(w, "*"))
	default:
		return w == candidate
	}
}

// WildcardGenerateName matches a generateName (a prefix) against w.
func WildcardGenerateName(w, candidate string) bool {
	switch {
	case strings.HasPrefix(w, "*") && strings.HasSuffix(w, "*"):
		return strings.Contains(candidate, strings.TrimSuffix(strings.TrimPrefix(w, "*"), "*"))
	case strings.HasSuffix(w, "*"):
		return strings.HasPrefix(candidate, strings.TrimSuffix(w, "*"))
	default:
		return false
	}
}
