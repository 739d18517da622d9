package capabilities

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

var (
	nsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	cmGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	depGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

func obj(apiVersion, kind, ns, name string, labels map[string]string, extra map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	u.SetResourceVersion("1")
	if ns != "" {
		u.SetNamespace(ns)
	}
	if labels != nil {
		u.SetLabels(labels)
	}
	for k, v := range extra {
		u.Object[k] = v
	}
	return u
}

// fakeCluster is a Kubernetes capability on client-go's fake dynamic client:
// two namespaces, three config maps, no deployments.
func fakeCluster(t testing.TB, o KubeOptions, more ...runtime.Object) (*Kubernetes, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	objs := []runtime.Object{
		obj("v1", "Namespace", "", "default", map[string]string{"team": "a"}, nil),
		obj("v1", "Namespace", "", "other", nil, nil),
		obj("v1", "ConfigMap", "default", "one", map[string]string{"app": "x"}, map[string]any{"data": map[string]any{"k": "v", "k2": "v2"}}),
		obj("v1", "ConfigMap", "default", "two", map[string]string{"app": "y"}, map[string]any{"data": map[string]any{"k": "w"}}),
		obj("v1", "ConfigMap", "other", "three", map[string]string{"app": "x"}, nil),
	}
	objs = append(objs, more...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		nsGVR: "NamespaceList", cmGVR: "ConfigMapList", depGVR: "DeploymentList",
	}, objs...)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	o.Dynamic, o.Mapper = dyn, mapper
	if o.Reviews == nil {
		o.Reviews = func(_ context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
			sar.Status.Allowed = sar.Spec.User == "alice"
			if !sar.Status.Allowed {
				sar.Status.Reason = "no"
			}
			return sar, nil
		}
	}
	k, err := NewKubernetes(o)
	if err != nil {
		t.Fatal(err)
	}
	return k, dyn
}

// allResources allows the fake cluster's kinds.
var allResources = []Resource{{"v1", "Namespace"}, {"v1", "ConfigMap"}, {"apps/v1", "Deployment"}}

func newTestHost(t testing.TB, o Options, allow Allow) HostCallFunc {
	t.Helper()
	h := New(o)
	t.Cleanup(h.Close)
	f, err := h.ForPolicy("test-policy", allow)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func call(t testing.TB, f HostCallFunc, ns, op, payload string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := f(ctx, "kubewarden", ns, op, []byte(payload))
	return string(b), err
}

// waitSynced waits until the resource's cache is synced.
func waitSynced(t testing.TB, k *Kubernetes, gvr schema.GroupVersionResource) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		k.mu.Lock()
		c := k.caches[gvr]
		k.mu.Unlock()
		if c != nil && c.store() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("cache of %v did not sync", gvr)
}

func compactJSON(t testing.TB, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func wantErr(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if err.Error() != want {
		t.Fatalf("error\n got %q\nwant %q", err.Error(), want)
	}
}

func wantErrContains(t testing.TB, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

var (
	metav1CreateOptions = metav1.CreateOptions{}
	metav1UpdateOptions = metav1.UpdateOptions{}
)

// gaugeValue gathers h's metrics and returns the value of the named metric
// whose one label has the given value (counters and gauges).
func gaugeValue(t testing.TB, h *Host, name, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					if m.Gauge != nil {
						return m.GetGauge().GetValue()
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{...=%q}", name, label)
	return 0
}
