package mapdiff_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi/openapitest"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
	k8sadmissionv1 "k8s.io/kubernetes/pkg/apis/admissionregistration/v1"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	hostadmission "github.com/tollgate-dev/tollgate/host/admission"
)

// The reference: Kubernetes' MutatingAdmissionPolicy plugin, as its own unit
// tests run it (generic.PolicyTestContext: fake clients and informers, the
// real policy source, plugin and dispatchers).

// compilePolicy is the apiserver's compilePolicy (unexported in
// k8s.io/apiserver), written against the same public packages.
func compilePolicy(policy *admissionregistrationv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return mutating.PolicyEvaluator{Error: err}
	}
	var vars []plugincel.NamedExpressionAccessor
	for _, v := range policy.Spec.Variables {
		vars = append(vars, &validating.Variable{Name: v.Name, Expression: v.Expression})
	}
	compiler.CompileAndStoreVariables(vars, opts, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if conds := policy.Spec.MatchConditions; len(conds) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(conds))
		for i := range conds {
			acc[i] = (*matchconditions.MatchCondition)(&conds[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(acc, opts, environment.StoredExpressions), policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	patchOpts := opts
	patchOpts.HasPatchTypes = true
	var patchers []patch.Patcher
	for _, m := range policy.Spec.Mutations {
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch != nil {
				patchers = append(patchers, patch.NewJSONPatcher(compiler.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, patchOpts, environment.StoredExpressions)))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration != nil {
				patchers = append(patchers, patch.NewApplyConfigurationPatcher(compiler.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, patchOpts, environment.StoredExpressions)))
			}
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}
}

// referenceTypeConverters gives the type converters of the reference: for the
// built-in kinds the schemas client-go v0.36.6 compiles in (generated from
// the OpenAPI a 1.36 apiserver publishes; client-go's openapitest documents
// are from an older release and lack newer fields such as a container's
// restartPolicy), and for the test kind example.com/v1 Widget the
// converter the apiserver builds from a CRD's OpenAPI schema.
type referenceTypeConverters struct{}

func (referenceTypeConverters) Run(context.Context) {}

var (
	builtinConverter = applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)
	widgetConverter  = widgetTypeConverter()
)

func (referenceTypeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	if gvk.GroupVersion() == widgetGV {
		return widgetConverter
	}
	return builtinConverter
}

var widgetGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

// widgetTypeConverter is the schema a CRD for Widget would publish: spec with
// size, color and tags (a list without x-kubernetes-list-type: atomic).
func widgetTypeConverter() managedfields.TypeConverter {
	str := func() spec.Schema { return *spec.StringProperty() }
	widget := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
		"apiVersion": str(), "kind": str(),
		"metadata": {SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef("#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}},
		"spec": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
			"size":  *spec.Int64Property(),
			"color": str(),
			"tags":  *spec.ArrayProperty(spec.StringProperty()),
		}}},
	}}}
	widget.AddExtension("x-kubernetes-group-version-kind", []any{map[string]any{"group": "example.com", "version": "v1", "kind": "Widget"}})
	schemas := map[string]*spec.Schema{"com.example.v1.Widget": &widget}
	// ObjectMeta and what it references, from the core group's document.
	paths, _ := openapitest.NewEmbeddedFileClient().Paths()
	b, _ := paths["api/v1"].Schema(runtime.ContentTypeJSON)
	var doc spec3.OpenAPI
	if err := json.Unmarshal(b, &doc); err != nil {
		panic(err)
	}
	for name, s := range doc.Components.Schemas {
		if strings.HasPrefix(name, "io.k8s.apimachinery.pkg.apis.meta.v1.") {
			schemas[name] = s
		}
	}
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		panic(err)
	}
	return tc
}

// refSettings is a case's settings decoded for the reference.
type refSettings struct {
	policy     *admissionregistrationv1.MutatingAdmissionPolicy
	binding    *admissionregistrationv1.MutatingAdmissionPolicyBinding
	params     []runtime.Object
	namespaces []*corev1.Namespace
	namespaced bool
}

func decodeInto(t testing.TB, raw any, out any, kind string) {
	t.Helper()
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	_ = json.Unmarshal(b, &m)
	if _, ok := m["spec"]; !ok {
		md := m["metadata"]
		delete(m, "metadata")
		m = map[string]any{"spec": m}
		if md != nil {
			m["metadata"] = md
		}
	}
	m["apiVersion"], m["kind"] = "admissionregistration.k8s.io/v1", kind
	b, _ = json.Marshal(m)
	if errs, err := sigsjson.UnmarshalStrict(b, out); err != nil || len(errs) > 0 {
		t.Fatalf("reference: decoding %s: %v %v", kind, err, errs)
	}
}

// apiDefaults holds Kubernetes' own defaulting of the admissionregistration.k8s.io/v1 objects
// (k8s.io/kubernetes/pkg/apis/admissionregistration/v1, what the apiserver applies when a policy
// or binding is stored), so that the reference starts from the objects a cluster would hold and
// a defaulting mistake of the engine shows as a difference rather than being copied here.
var apiDefaults = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := k8sadmissionv1.RegisterDefaults(s); err != nil {
		panic(err)
	}
	return s
}()

func decodeRefSettings(t testing.TB, settingsYAML string) *refSettings {
	t.Helper()
	var raw struct {
		Policy     any   `json:"policy"`
		Binding    any   `json:"binding"`
		Params     any   `json:"params"`
		Namespaces []any `json:"namespaces"`
	}
	if err := yaml.Unmarshal([]byte(settingsYAML), &raw); err != nil {
		t.Fatal(err)
	}
	s := &refSettings{policy: &admissionregistrationv1.MutatingAdmissionPolicy{}, binding: &admissionregistrationv1.MutatingAdmissionPolicyBinding{}}
	decodeInto(t, raw.Policy, s.policy, "MutatingAdmissionPolicy")
	if s.policy.Name == "" {
		s.policy.Name = "policy"
	}
	apiDefaults.Default(s.policy)
	if raw.Binding != nil {
		decodeInto(t, raw.Binding, s.binding, "MutatingAdmissionPolicyBinding")
	}
	if s.binding.Name == "" {
		s.binding.Name = s.policy.Name + "-binding"
	}
	if s.binding.Spec.PolicyName == "" {
		s.binding.Spec.PolicyName = s.policy.Name
	}
	apiDefaults.Default(s.binding)
	if r := s.binding.Spec.ParamRef; r != nil {
		// Not an API default: the apiserver refuses a paramRef without it; settings may omit it,
		// and the module reads that as Deny (docs/mutating-admission-policy.md).
		if r.ParameterNotFoundAction == nil {
			r.ParameterNotFoundAction = ptr.To(admissionregistrationv1.DenyAction)
		}
		s.namespaced = r.Namespace != ""
	}
	var params []any
	switch p := raw.Params.(type) {
	case []any:
		params = p
	case map[string]any:
		params = []any{p}
	}
	for _, p := range params {
		u := &unstructured.Unstructured{Object: p.(map[string]any)}
		if u.GetNamespace() != "" {
			s.namespaced = true
		}
		if u.GetKind() == "ConfigMap" {
			cm := &corev1.ConfigMap{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cm); err != nil {
				t.Fatal(err)
			}
			s.params = append(s.params, cm)
			continue
		}
		s.params = append(s.params, u)
	}
	for _, n := range raw.Namespaces {
		ns := &corev1.Namespace{}
		b, _ := json.Marshal(n)
		if err := json.Unmarshal(b, ns); err != nil {
			t.Fatal(err)
		}
		s.namespaces = append(s.namespaces, ns)
	}
	return s
}

type reference struct {
	tc *generic.PolicyTestContext[*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, mutating.PolicyEvaluator]
}

func init() {
	// The informers of the reference log at info level; keep the test output readable.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}

// newReference loads the settings into the plugin; authz, if given, replaces
// the test context's authorizer (which allows everything).
func newReference(t testing.TB, settingsYAML string, requestNamespaces []string, authz ...authorizer.Authorizer) *reference {
	t.Helper()
	s := decodeRefSettings(t, settingsYAML)
	// Namespaces are added through the test context's REST mapper.
	mappings := []meta.RESTMapping{{
		Resource:         corev1.SchemeGroupVersion.WithResource("namespaces"),
		GroupVersionKind: corev1.SchemeGroupVersion.WithKind("Namespace"),
		Scope:            meta.RESTScopeRoot,
	}}
	if pk := s.policy.Spec.ParamKind; pk != nil && pk.Kind != "ConfigMap" {
		gv, _ := schema.ParseGroupVersion(pk.APIVersion)
		scope := meta.RESTScopeRoot
		if s.namespaced {
			scope = meta.RESTScopeNamespace
		}
		mappings = append(mappings, meta.RESTMapping{
			Resource:         gv.WithResource(strings.ToLower(pk.Kind) + "s"),
			GroupVersionKind: gv.WithKind(pk.Kind),
			Scope:            scope,
		})
	}
	// Every namespace a request uses exists, with the label the apiserver sets.
	var initial []runtime.Object
	known := map[string]bool{}
	for _, ns := range s.namespaces {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
		known[ns.Name] = true
		initial = append(initial, ns)
	}
	for _, n := range requestNamespaces {
		if n != "" && !known[n] {
			known[n] = true
			initial = append(initial, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelMetadataName: n}}})
		}
	}
	initial = append(initial, s.params...)
	tc, cancel, err := generic.NewPolicyTestContext[*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, mutating.PolicyEvaluator](
		t,
		mutating.NewMutatingAdmissionPolicyAccessor,
		mutating.NewMutatingAdmissionPolicyBindingAccessor,
		compilePolicy,
		func(a authorizer.Authorizer, m *matching.Matcher, _ kubernetes.Interface) generic.Dispatcher[mutating.PolicyHook] {
			if len(authz) > 0 {
				a = authz[0]
			}
			return mutating.NewDispatcher(a, m, referenceTypeConverters{})
		},
		initial,
		mappings,
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	if err := tc.Start(); err != nil {
		t.Fatal(err)
	}
	// The test context files policies and bindings under its own fake kinds,
	// which it infers from objects without a kind.
	s.policy.TypeMeta, s.binding.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
	// UpdateAndWait gives the informers only 5 s, too little on a loaded 2-core
	// machine: update, then wait with a deadline of our own.
	if err := tc.Update(s.policy, s.binding); err != nil {
		t.Fatal(err)
	}
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer waitCancel()
	for _, obj := range []runtime.Object{s.policy, s.binding} {
		if err := tc.WaitForReconcile(waitCtx, obj); err != nil {
			t.Fatalf("waiting for the reference plugin to load %T: %v", obj, err)
		}
	}
	return &reference{tc: tc}
}

// evaluate runs one request through the plugin.
func (r *reference) evaluate(t testing.TB, rq *request) outcome {
	t.Helper()
	gvk := schema.GroupVersionKind{Group: rq.kind.Group, Version: rq.kind.Version, Kind: rq.kind.Kind}
	gvr := schema.GroupVersionResource{Group: rq.resource.Group, Version: rq.resource.Version, Resource: rq.resource.Resource}
	decode := func(raw json.RawMessage) runtime.Object {
		if raw == nil {
			return nil
		}
		var obj runtime.Object
		if clientgoscheme.Scheme.Recognizes(gvk) {
			obj, _ = clientgoscheme.Scheme.New(gvk)
			if err := json.Unmarshal(raw, obj); err != nil {
				t.Fatal(err)
			}
		} else {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(raw); err != nil {
				t.Fatal(err)
			}
			obj = u
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		return obj
	}
	obj, old := decode(rq.object), decode(rq.oldObject)
	var before []byte
	if obj != nil {
		before, _ = json.Marshal(obj)
	}
	attrs := admission.NewAttributesRecord(obj, old, gvk, rq.namespace, rq.name, gvr, "", admission.Operation(rq.operation), nil, false,
		&user.DefaultInfo{Name: rq.username, Groups: rq.groups})
	err := r.tc.Plugin.Dispatch(r.tc, attrs, admission.NewObjectInterfacesFromScheme(clientgoscheme.Scheme))
	if err != nil {
		var se *apierrors.StatusError
		if !errors.As(err, &se) {
			return outcome{Rejected: true, Code: 500, Message: err.Error()}
		}
		return outcome{Rejected: true, Code: se.ErrStatus.Code, Message: se.ErrStatus.Message}
	}
	if obj == nil {
		return outcome{}
	}
	out := attrs.GetObject()
	after, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if normalize(t, before) == normalize(t, after) {
		return outcome{}
	}
	return outcome{Object: normalize(t, after), Patch: referencePatch(t, rq.object, out, gvk)}
}

// referencePatch is the JSONPatch a webhook answering with the plugin's
// result makes the host send: tollgate's own diff (host/admission.Diff, what
// the host runs on the module's answer) from the request's object, as sent,
// to the plugin's object encoded as the apiserver encodes it (json.Marshal of
// the typed object, or the unstructured content, with its apiVersion and
// kind: typed objects lose them in conversions, the apiserver's encoder sets
// them), with its null-valued members following the request's (nullsLike).
//
// Why nullsLike: a null member and an absent one decode to the same typed
// object (and a custom resource's structural schema prunes nulls), so the
// plugin's result does not say which the patch should give; the request
// does. A webhook whose patch only holds what the policy changed keeps the
// nulls the apiserver sent it (creationTimestamp: null, which apiservers
// before 1.33 send for every object without one) and adds none. Every other
// byte of the typed encoding counts: a zero value the request left out
// (status: {}, a container's resources: {}) is in the reference patch, as it
// is in what the apiserver decodes either way.
func referencePatch(t testing.TB, sent json.RawMessage, obj runtime.Object, gvk schema.GroupVersionKind) string {
	t.Helper()
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	encoded, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := hostadmission.Diff(sent, nullsLike(t, encoded, sent))
	if err != nil {
		t.Fatalf("reference patch: %v", err)
	}
	return string(patch)
}

// nullsLike makes the null-valued members of the objects of doc follow
// those of the same objects of like (the same keys, list items by index): a
// null member like does not have is dropped, a null member like has and doc
// lacks is added.
func nullsLike(t testing.TB, doc, like []byte) []byte {
	t.Helper()
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("nullsLike: %v: %s", err, b)
		}
		return v
	}
	var follow func(v, l any) any
	follow = func(v, l any) any {
		switch tv := v.(type) {
		case map[string]any:
			lm, _ := l.(map[string]any)
			for k, e := range tv {
				le, had := lm[k]
				if e == nil && !had {
					delete(tv, k)
					continue
				}
				tv[k] = follow(e, le)
			}
			for k, le := range lm {
				if _, has := tv[k]; !has && le == nil {
					tv[k] = nil
				}
			}
		case []any:
			ll, _ := l.([]any)
			for i := range tv {
				var le any
				if i < len(ll) {
					le = ll[i]
				}
				tv[i] = follow(tv[i], le)
			}
		}
		return v
	}
	out, err := json.Marshal(follow(decode(doc), decode(like)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// outcome is what both sides are compared on.
type outcome struct {
	Rejected bool   `json:"rejected,omitempty"`
	Code     int32  `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Object   string `json:"object,omitempty"` // normalized JSON of the mutated object; empty when unchanged
	// Patch is the JSONPatch the host sends (for the reference: referencePatch); empty when unchanged.
	Patch string `json:"patch,omitempty"`
}

func (o outcome) String() string {
	b, _ := json.MarshalIndent(o, "", "  ")
	return string(b)
}

// normalize re-encodes JSON with sorted keys, without null-valued keys and
// without the top-level apiVersion and kind (the apiserver's typed objects
// leave them empty after a conversion; a webhook's answer keeps them).
func normalize(t testing.TB, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("normalize: %v: %s", err, b)
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "apiVersion")
		delete(m, "kind")
	}
	var drop func(any) any
	drop = func(v any) any {
		switch tv := v.(type) {
		case map[string]any:
			for k, e := range tv {
				if e == nil {
					delete(tv, k)
					continue
				}
				tv[k] = drop(e)
			}
		case []any:
			for i := range tv {
				tv[i] = drop(tv[i])
			}
		}
		return v
	}
	out, err := json.Marshal(drop(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var _ = fmt.Sprintf
