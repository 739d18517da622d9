package engine

import (
	"context"
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
)

// What a cluster would supply to the apiserver's dispatcher, answered from
// the settings.

// paramEntry is one candidate parameter object of paramKind.
type paramEntry struct {
	namespace, name string
	labels          map[string]string
	obj             runtime.Object
}

// newParams keeps the params of kind pk, typed for the built-in kinds (the
// apiserver's informers hold them typed). A paramKind is taken as namespaced
// when a candidate object or the binding's paramRef names a namespace (the
// sandbox has no discovery to ask); otherwise it is cluster-scoped.
func newParams(pk *admissionregistrationv1.ParamKind, params []*unstructured.Unstructured, ref *admissionregistrationv1.ParamRef, sch *runtime.Scheme) ([]paramEntry, bool, error) {
	if pk == nil {
		return nil, false, nil
	}
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return nil, false, fmt.Errorf("spec.paramKind.apiVersion %q: %w", pk.APIVersion, err)
	}
	gvk := gv.WithKind(pk.Kind)
	namespaced := ref != nil && ref.Namespace != ""
	var out []paramEntry
	for i, p := range params {
		if p.GroupVersionKind() != gvk {
			continue // not of paramKind: the cluster's informer for paramKind would not see it
		}
		if p.GetNamespace() != "" {
			namespaced = true
		}
		obj, err := typedParam(p, gvk, sch)
		if err != nil {
			return nil, false, fmt.Errorf("params[%d]: %w", i, err)
		}
		out = append(out, paramEntry{namespace: p.GetNamespace(), name: p.GetName(), labels: p.GetLabels(), obj: obj})
	}
	return out, namespaced, nil
}

// namespaceLister answers from the namespaces of the settings. Every other
// namespace is taken to exist with only the label the apiserver sets on all
// namespaces, kubernetes.io/metadata.name.
type namespaceLister struct {
	known map[string]*corev1.Namespace
}

func newNamespaceLister(list []*corev1.Namespace) *namespaceLister {
	l := &namespaceLister{known: map[string]*corev1.Namespace{}}
	for _, ns := range list {
		ns = ns.DeepCopy()
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		if _, ok := ns.Labels[corev1.LabelMetadataName]; !ok {
			ns.Labels[corev1.LabelMetadataName] = ns.Name
		}
		ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		l.known[ns.Name] = ns
	}
	return l
}

func (l *namespaceLister) List(selector labels.Selector) ([]*corev1.Namespace, error) {
	var out []*corev1.Namespace
	for _, ns := range l.known {
		if selector.Matches(labels.Set(ns.Labels)) {
			out = append(out, ns)
		}
	}
	return out, nil
}

func (l *namespaceLister) Get(name string) (*corev1.Namespace, error) {
	if ns, ok := l.known[name]; ok {
		return ns, nil
	}
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}},
	}, nil
}

// typeConverters gives the structured-merge type converter of a kind: the
// compiled-in schemas of client-go for the built-in types; for any other kind
// a schemaless one, for which every list is atomic.
type typeConverters struct {
	scheme *runtime.Scheme
	known  sync.Map // schema.GroupVersionKind -> bool
}

func newTypeConverters(sch *runtime.Scheme) *typeConverters {
	return &typeConverters{scheme: sch}
}

// GetTypeConverter returns nil when the built-in schema cannot be decoded
// (the patcher then reports an error), which cannot happen with a module
// that passed its tests.
func (t *typeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	// Decoded once per process (sync.Once): no state of its own here, the
	// engine is used concurrently.
	static, err := builtinTypeConverter(t.scheme)
	if err != nil {
		return nil
	}
	known, ok := t.known.Load(gvk)
	if !ok {
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(gvk)
		_, err := static.ObjectToTyped(stub)
		known = err == nil
		t.known.Store(gvk, known)
	}
	if known.(bool) {
		return static
	}
	return &schemalessConverter{}
}

func (t *typeConverters) Run(context.Context) {}

// objectScheme decides which kinds are held typed (as the apiserver holds the
// built-in kinds) rather than unstructured.
var objectScheme = newObjectScheme()
