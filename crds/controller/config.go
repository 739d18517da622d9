package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

// ErrPolicyRefused marks a policy that the policy server would refuse: buildConfig leaves it out
// of policies.yml (one bad policy must not make the server reject the whole file) and the error
// names the spec field and value at fault.
var ErrPolicyRefused = errors.New("the policy server would refuse this policy")

// ErrSources marks a PolicyServer whose insecureSources or sourceAuthorities the policy server
// would refuse.
var ErrSources = errors.New("invalid sources")

// allCapabilities is the hostCapabilities of a policy that may make every host call.
var allCapabilities = []string{"*"}

// BuildPolicyEntry returns a policy's id and its entry in policies.yml, in Kubewarden's shape:
// namespacedName, module, policyMode, allowedToMutate, settings, contextAwareResources,
// message, timeoutEvalSeconds and hostCapabilities for a policy; namespacedName, policyMode,
// policies, expression, message (and hostCapabilities per member) for a group. The entry is
// validated by host/config's parser exactly as the policy server will parse it: an error wraps
// ErrPolicyRefused and names the spec field and value at fault.
//
// Cluster-wide policies get every host capability. Namespaced policies (a tenant's) get the
// PolicyServer's namespacedPoliciesCapabilities, none when it is unset or ps is nil, and may
// use only its namespacedPoliciesModuleSchemes (never file://): a module of another scheme is
// refused. It makes no client call, so the policy reconcilers use it to report refused policies.
func BuildPolicyEntry(p v1.Policy, ps *v1.PolicyServer, o Options) (id string, entry config.Entry, err error) {
	id = v1.PolicyID(p.PolicyKind(), p.GetNamespace(), p.GetName())
	caps := allCapabilities
	if p.IsNamespaced() {
		caps = []string{}
		if ps != nil {
			for _, c := range ps.Spec.NamespacedPoliciesCapabilities {
				caps = append(caps, string(c))
			}
		}
	}
	mode := string(p.Webhook().Mode)
	if mode == "" {
		mode = string(v1.ModeProtect)
	}
	entry = config.Entry{
		NamespacedName: &config.NamespacedName{Namespace: p.GetNamespace(), Name: p.GetName()},
		PolicyMode:     config.Mode(mode),
	}
	fail := func(field, value, reason string) (string, config.Entry, error) {
		return id, config.Entry{}, fmt.Errorf("%w: %s %s: spec.%s: value %s: %s", ErrPolicyRefused, p.PolicyKind(), policyRef(p.GetNamespace(), p.GetName()), field, value, reason)
	}
	single := func(m v1.ModuleSpec, mutating bool, resources []v1.ContextAwareResource, message string) error {
		if err := tenantScheme(p, ps, "module", m.Module); err != nil {
			return err
		}
		if err := moduleFields(&entry, m, resources); err != nil {
			return err
		}
		entry.AllowedToMutate = &mutating
		entry.HostCapabilities = caps
		entry.Message = message
		return nil
	}
	group := func(g v1.GroupSpec, members map[string]config.Entry) {
		entry.Expression = g.Expression
		entry.Message = g.Message
		entry.Policies = members
	}
	member := func(name string, m v1.ModuleSpec, resources []v1.ContextAwareResource) (config.Entry, error) {
		e := config.Entry{HostCapabilities: caps}
		if err := tenantScheme(p, ps, "policies."+name+".module", m.Module); err != nil {
			return config.Entry{}, err
		}
		if err := moduleFields(&e, m, resources); err != nil {
			err.field = "policies." + name + "." + err.field
			return config.Entry{}, err
		}
		return e, nil
	}
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		err = single(p.Spec.ModuleSpec, p.Spec.Mutating, p.Spec.ContextAwareResources, p.Spec.Message)
	case *v1.AdmissionPolicy:
		err = single(p.Spec.ModuleSpec, p.Spec.Mutating, nil, p.Spec.Message)
	case *v1.ClusterAdmissionPolicyGroup:
		members := map[string]config.Entry{}
		for name, m := range p.Spec.Policies {
			if members[name], err = member(name, m.ModuleSpec, m.ContextAwareResources); err != nil {
				break
			}
		}
		group(p.Spec.GroupSpec, members)
	case *v1.AdmissionPolicyGroup:
		members := map[string]config.Entry{}
		for name, m := range p.Spec.Policies {
			if members[name], err = member(name, m.ModuleSpec, nil); err != nil {
				break
			}
		}
		group(p.Spec.GroupSpec, members)
	default:
		return id, config.Entry{}, fmt.Errorf("%w: unknown policy type %T", ErrPolicyRefused, p)
	}
	if err == nil {
		if se := shadowEntry(p, ps, &entry); se != nil {
			err = se
		}
	}
	if err != nil {
		var se *settingsError
		if errors.As(err, &se) {
			value := se.value
			if value == "" {
				value = "<settings>"
			}
			return fail(se.field, value, se.reason)
		}
		return id, config.Entry{}, fmt.Errorf("%w: %s %s: %v", ErrPolicyRefused, p.PolicyKind(), policyRef(p.GetNamespace(), p.GetName()), err)
	}
	doc, err := json.Marshal(map[string]config.Entry{id: entry})
	if err != nil {
		return id, config.Entry{}, fmt.Errorf("%w: %s %s: %v", ErrPolicyRefused, p.PolicyKind(), policyRef(p.GetNamespace(), p.GetName()), err)
	}
	if _, _, err := config.ParsePolicies(v1.PoliciesKey, doc); err != nil {
		return id, config.Entry{}, fmt.Errorf("%w: %s %s: %s", ErrPolicyRefused, p.PolicyKind(), policyRef(p.GetNamespace(), p.GetName()), configErrorMessage(err, fieldErrorMessage))
	}
	return id, entry, nil
}

// settingsError is a spec field the policy server would refuse: a settings value that is not
// a JSON object, or a module scheme a namespaced policy may not use.
type settingsError struct{ field, value, reason string }

func (e *settingsError) Error() string { return e.field + ": " + e.reason }

// moduleFields sets module, settings, timeoutEvalSeconds and contextAwareResources of a policy
// or a group member.
func moduleFields(e *config.Entry, m v1.ModuleSpec, resources []v1.ContextAwareResource) *settingsError {
	e.Module = normalizeModule(m.Module)
	settings, err := decodeSettings(m.Settings.Raw)
	if err != nil {
		return &settingsError{field: "settings", reason: err.Error()}
	}
	if e.Settings, err = json.Marshal(settings); err != nil {
		return &settingsError{field: "settings", reason: err.Error()}
	}
	if m.TimeoutEvalSeconds != nil {
		t := *m.TimeoutEvalSeconds
		e.TimeoutEvalSeconds = &t
	}
	e.ContextAwareResources = make([]config.ContextAwareResource, 0, len(resources))
	for _, r := range resources {
		e.ContextAwareResources = append(e.ContextAwareResources, config.ContextAwareResource{APIVersion: r.APIVersion, Kind: r.Kind})
	}
	return nil
}

// shadowEntry sets the entry's shadow from spec.shadow (none without one): a policy's module
// and/or settings, a group's expression and/or members. host/config's parser, which
// BuildPolicyEntry runs on the entry, checks the rest (a new member needs a module, ...).
func shadowEntry(p v1.Policy, ps *v1.PolicyServer, e *config.Entry) *settingsError {
	module := func(field string, sh v1.PolicyShadow) (config.EntryShadow, *settingsError) {
		var es config.EntryShadow
		if sh.Module != "" {
			if err := tenantScheme(p, ps, field+".module", sh.Module); err != nil {
				return es, err
			}
			es.Module = normalizeModule(sh.Module)
		}
		if sh.Settings != nil {
			v, err := decodeSettings(sh.Settings.Raw)
			if err == nil {
				es.Settings, err = json.Marshal(v)
			}
			if err != nil {
				return es, &settingsError{field: field + ".settings", reason: err.Error()}
			}
		}
		return es, nil
	}
	group := func(sh *v1.GroupShadow) *settingsError {
		es := config.EntryShadow{Expression: sh.Expression}
		for name, m := range sh.Policies {
			ms, err := module("shadow.policies."+name, m)
			if err != nil {
				return err
			}
			if es.Policies == nil {
				es.Policies = map[string]config.EntryShadow{}
			}
			es.Policies[name] = ms
		}
		e.Shadow = &es
		return nil
	}
	var single *v1.PolicyShadow
	switch p := p.(type) {
	case *v1.ClusterAdmissionPolicy:
		single = p.Spec.Shadow
	case *v1.AdmissionPolicy:
		single = p.Spec.Shadow
	case *v1.ClusterAdmissionPolicyGroup:
		if p.Spec.Shadow != nil {
			return group(p.Spec.Shadow)
		}
	case *v1.AdmissionPolicyGroup:
		if p.Spec.Shadow != nil {
			return group(p.Spec.Shadow)
		}
	}
	if single == nil {
		return nil
	}
	es, err := module("shadow", *single)
	if err != nil {
		return err
	}
	e.Shadow = &es
	return nil
}

// tenantScheme refuses a namespaced policy's module whose scheme its PolicyServer does not
// allow to namespaced policies (namespacedPoliciesModuleSchemes, or its default); file:// is
// never allowed to them. Cluster-wide policies may use every scheme.
func tenantScheme(p v1.Policy, ps *v1.PolicyServer, field, module string) *settingsError {
	if !p.IsNamespaced() {
		return nil
	}
	allowed := v1.DefaultNamespacedPoliciesModuleSchemes
	from := "the default of spec.namespacedPoliciesModuleSchemes"
	if ps != nil && len(ps.Spec.NamespacedPoliciesModuleSchemes) > 0 {
		allowed = ps.Spec.NamespacedPoliciesModuleSchemes
		from = "spec.namespacedPoliciesModuleSchemes"
	}
	scheme, _, _ := strings.Cut(normalizeModule(module), "://")
	scheme = strings.ToLower(scheme)
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
		if scheme == string(a) && scheme != "file" {
			return nil
		}
	}
	server := "its PolicyServer"
	if ps != nil {
		server = fmt.Sprintf("PolicyServer %q", ps.Name)
	}
	reason := fmt.Sprintf("a namespaced policy may not use %s:// modules: %s allows %s to namespaced policies (%s)",
		scheme, server, strings.Join(names, ", "), from)
	if scheme == "file" {
		reason = "a namespaced policy may never use file:// modules (they would be read from the policy server's file system)"
	}
	return &settingsError{field: field, value: strconv.Quote(module), reason: reason}
}

// normalizeModule gives a module URI without a scheme Kubewarden's default, registry://.
func normalizeModule(m string) string {
	if m == "" || strings.Contains(m, "://") {
		return m
	}
	return "registry://" + m
}

// decodeSettings decodes a policy's settings keeping numbers as written (json.Number), so that
// re-encoding sorts the keys without rounding large integers; null or absent settings are {}.
func decodeSettings(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("must be an object")
	}
	return v, nil
}

// specField maps a policies.yml field to the spec field it comes from.
var specField = map[string]string{"policyMode": "mode", "allowedToMutate": "mutating"}

// fieldErrorMessage renders a host/config error in terms of the policy's spec.
func fieldErrorMessage(fe *config.FieldError) string {
	field := fe.Field
	if f, ok := specField[field]; ok {
		field = f
	}
	if fe.Member != "" && !strings.HasPrefix(field, "shadow.") {
		// A shadow's member errors name their whole path (shadow.policies.NAME....).
		field = "policies." + fe.Member + "." + field
	}
	var b strings.Builder
	b.WriteString("spec")
	if field != "" {
		b.WriteString("." + strings.TrimSuffix(field, "."))
	}
	if fe.Value != "" {
		b.WriteString(": value " + fe.Value)
	}
	b.WriteString(": " + fe.Reason)
	return b.String()
}

// configErrorMessage renders the errors host/config joined, each host/config.FieldError with
// format (in terms of the Kubernetes object rather than of the file).
func configErrorMessage(err error, format func(*config.FieldError) string) string {
	var msgs []string
	for _, e := range joinedErrors(err) {
		var fe *config.FieldError
		if errors.As(e, &fe) {
			msgs = append(msgs, format(fe))
		} else {
			msgs = append(msgs, e.Error())
		}
	}
	return strings.Join(msgs, "; ")
}

func joinedErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, joinedErrors(e)...)
		}
		return out
	}
	return []error{err}
}

func policyRef(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// buildConfig returns the policies.yml (JSON, Kubewarden's shape) of the given policies for
// policy server ps, and the policies left out with the reason (by id); build gives each policy's
// entry (BuildPolicyEntry, or the reconciler's memoizing entryCache). Its output depends on its
// input only, byte for byte (keys sorted at every level), so an unchanged reconcile writes
// nothing. Policies are taken in kind, namespace and name order; a later policy whose id
// collides with an earlier one (Kubewarden's "namespaced-<ns>-<name>" is ambiguous) is left out.
func buildConfig(policies []v1.Policy, ps *v1.PolicyServer, o Options, build func(v1.Policy, *v1.PolicyServer, Options) (string, config.Entry, error)) (policiesYML []byte, skipped map[string]error) {
	sorted := append([]v1.Policy(nil), policies...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if ka, kb := kindOrder(a.PolicyKind()), kindOrder(b.PolicyKind()); ka != kb {
			return ka < kb
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
	doc := map[string]config.Entry{}
	owner := map[string]string{}
	for _, p := range sorted {
		id, entry, err := build(p, ps, o)
		where := p.PolicyKind() + " " + policyRef(p.GetNamespace(), p.GetName())
		if err == nil {
			if prev, dup := owner[id]; dup {
				err = fmt.Errorf("%w: %s: id %q is already used by %s", ErrPolicyRefused, where, id, prev)
			}
		}
		if err != nil {
			if skipped == nil {
				skipped = map[string]error{}
			}
			if _, dup := skipped[id]; !dup {
				skipped[id] = err
			}
			continue
		}
		owner[id] = where
		doc[id] = entry
	}
	b, err := config.MarshalPolicies(doc)
	if err != nil { // cannot happen: every value was marshalled once by BuildPolicyEntry
		panic(err)
	}
	return b, skipped
}

func kindOrder(kind string) int {
	for i, k := range v1.PolicyKinds {
		if k == kind {
			return i
		}
	}
	return len(v1.PolicyKinds)
}

// BuildSources returns the sources.yml (JSON, Kubewarden's shape) of a PolicyServer:
// insecure_sources (sorted, without duplicates) and source_authorities, host to
// [{type: Data, data: PEM}]. It is validated by host/config's parser; an error wraps ErrSources.
func BuildSources(ps *v1.PolicyServer) ([]byte, error) {
	insecure := []string{}
	seen := map[string]bool{}
	for _, s := range ps.Spec.InsecureSources {
		if !seen[s] {
			seen[s] = true
			insecure = append(insecure, s)
		}
	}
	sort.Strings(insecure)
	src := config.Sources{InsecureSources: insecure, SourceAuthorities: map[string][]config.Certificate{}}
	for host, pems := range ps.Spec.SourceAuthorities {
		certs := make([]config.Certificate, 0, len(pems))
		for _, pem := range pems {
			certs = append(certs, config.Certificate{Data: []byte(pem)})
		}
		src.SourceAuthorities[host] = certs
	}
	b, err := config.MarshalSources(src)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSources, err)
	}
	if _, err := config.ParseSources(v1.SourcesKey, b); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrSources, configErrorMessage(err, sourcesMessage))
	}
	return b, nil
}

// sourcesMessage renders a sources.yml error in terms of the PolicyServer's spec.
func sourcesMessage(fe *config.FieldError) string {
	field := fe.Field
	switch {
	case strings.HasPrefix(field, "insecure_sources"):
		field = "insecureSources" + strings.TrimPrefix(field, "insecure_sources")
	case strings.HasPrefix(field, "source_authorities."):
		rest := strings.TrimPrefix(field, "source_authorities.")
		host, idx, _ := strings.Cut(rest, "[")
		field = "sourceAuthorities[" + strconv.Quote(host) + "]"
		if idx != "" {
			n, _, _ := strings.Cut(idx, "]")
			field += "[" + n + "]"
		}
	}
	msg := "spec." + field
	if fe.Value != "" {
		msg += ": value " + fe.Value
	}
	return msg + ": " + fe.Reason
}

// ConfigDigest is the digest of a policies.yml as GET /policies reports it (configDigest).
func ConfigDigest(policiesYML []byte) string { return status.Digest(policiesYML) }
