package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/tollgate-dev/tollgate/host/capabilities"
	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const (
	opaDumpData        = "test/testdata/policies/opa-dump-data"
	gatekeeperDumpData = "test/testdata/policies/gatekeeper-dump-data"
)

var (
	namespaces = capabilities.Resource{APIVersion: "v1", Kind: "Namespace"}
	configMaps = capabilities.Resource{APIVersion: "v1", Kind: "ConfigMap"}
	secrets    = capabilities.Resource{APIVersion: "v1", Kind: "Secret"}
	cmGVR      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func kobj(kind, ns, name string, data map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind,
		"metadata": map[string]any{"name": name}}}
	if ns != "" {
		u.SetNamespace(ns)
	}
	if data != nil {
		u.Object["data"] = data
	}
	return u
}

// memCluster is the Kubernetes capability on client-go's in-memory dynamic
// client: namespaces default and other, config maps default/one and
// other/two, a secret default/token.
func memCluster(t testing.TB, maxCached int) (*capabilities.Kubernetes, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "namespaces"}: "NamespaceList", cmGVR: "ConfigMapList", {Version: "v1", Resource: "secrets"}: "SecretList",
	},
		kobj("Namespace", "", "default", nil), kobj("Namespace", "", "other", nil),
		kobj("ConfigMap", "default", "one", map[string]any{"k": "v"}), kobj("ConfigMap", "other", "two", nil),
		kobj("Secret", "default", "token", map[string]any{"t": "c2VjcmV0"}))
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	k, err := capabilities.NewKubernetes(capabilities.KubeOptions{Dynamic: dyn, Mapper: mapper, MaxCachedObjects: maxCached})
	if err != nil {
		t.Fatal(err)
	}
	return k, dyn
}

// dump evaluates a request with a dump fixture and returns its message as JSON.
func dump(t *testing.T, p *policy.Policy) map[string]any {
	t.Helper()
	res, err := p.Validate(context.Background(), testfixture.File(t, opaExample+"/testdata/pod-labelled.json"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Response.Accepted || message(res) == "" {
		t.Fatalf("want a rejection carrying the data, got %+v", res.Response)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(message(res)), &m); err != nil {
		t.Fatalf("%v: %s", err, message(res))
	}
	return m
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), `"resourceVersion":"1",`, "")
}

// TestRegoClusterData: a context-aware Rego policy's data holds the objects
// of the resources it is granted, shaped as Kubewarden shapes them, and
// nothing of the kinds it is not granted.
func TestRegoClusterData(t *testing.T) {
	h, _ := newHost(t)
	k, _ := memCluster(t, -1)
	caps := capabilities.New(capabilities.Options{Kubernetes: k})
	t.Cleanup(caps.Close)
	const (
		one   = `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"one","namespace":"default"}}`
		two   = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"two","namespace":"other"}}`
		nsDef = `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}`
		nsOth = `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}`
	)
	tests := []struct {
		name, module, settings string
		granted                []capabilities.Resource
		want                   string
	}{
		{"opa: kubernetes replaces a setting of that name", opaDumpData, `{"setting":"s","kubernetes":"replaced"}`, []capabilities.Resource{namespaces, configMaps},
			`{"kubernetes":{"configmaps":{"default":{"one":` + one + `},"other":{"two":` + two + `}},"namespaces":{"default":` + nsDef + `,"other":` + nsOth + `}},"setting":"s"}`},
		{"opa: nothing granted, no kubernetes", opaDumpData, `{"setting":"s","kubernetes":"kept"}`, nil,
			`{"kubernetes":"kept","setting":"s"}`},
		{"gatekeeper: inventory by scope, apiVersion and kind", gatekeeperDumpData, `{"p":1}`, []capabilities.Resource{configMaps, namespaces},
			`{"inventory":{"cluster":{"v1":{"Namespace":{"default":` + nsDef + `,"other":` + nsOth + `}}},"namespace":{"default":{"v1":{"ConfigMap":{"one":` + one + `}}},"other":{"v1":{"ConfigMap":{"two":` + two + `}}}}},"parameters":{"p":1}}`},
		{"gatekeeper: nothing granted, no inventory", gatekeeperDumpData, `{}`, nil,
			`{"inventory":"absent","parameters":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, h, policy.Spec{ID: "dump", Module: testfixture.Module(t, tt.module), Settings: json.RawMessage(tt.settings),
				Cluster: caps.Cluster("dump", tt.granted)})
			if got := jsonOf(t, dump(t, p)); got != tt.want {
				t.Fatalf("data\ngot  %s\nwant %s", got, tt.want)
			}
			if strings.Contains(jsonOf(t, dump(t, p)), "token") {
				t.Fatal("the data holds a Secret, which the policy is not granted")
			}
		})
	}
}

// TestRegoClusterDataFailures: data that cannot be built rejects the request
// with code 500 and the reason.
func TestRegoClusterDataFailures(t *testing.T) {
	h, _ := newHost(t)
	k, _ := memCluster(t, -1)
	caps := capabilities.New(capabilities.Options{Kubernetes: k})
	t.Cleanup(caps.Close)
	noKube := capabilities.New(capabilities.Options{})
	for _, tt := range []struct {
		name    string
		cluster *capabilities.Cluster
		want    string
	}{
		{"a kind the cluster does not know", caps.Cluster("dump", []capabilities.Resource{{APIVersion: "example.com/v1", Kind: "Widget"}}),
			"cannot build the Kubernetes context of the policy: listing example.com/v1/Widget: Cannot find resource example.com/v1/Widget"},
		{"no Kubernetes client", noKube.Cluster("dump", []capabilities.Resource{configMaps}),
			"cannot build the Kubernetes context of the policy: listing v1/ConfigMap: kube::Client was not initialized properly"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := load(t, h, policy.Spec{ID: "dump", Module: testfixture.Module(t, opaDumpData), Cluster: tt.cluster})
			res, err := p.Validate(context.Background(), testfixture.File(t, opaExample+"/testdata/pod-labelled.json"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Response.Accepted || code(res) != 500 || message(res) != tt.want {
				t.Fatalf("got %+v (message %q), want a 500 rejection %q", res.Response, message(res), tt.want)
			}
		})
	}
}

// TestRegoClusterDataCache: with the resource's cache synced the data is
// built once and kept until an object changes; without caches every
// evaluation builds it.
func TestRegoClusterDataCache(t *testing.T) {
	h, _ := newHost(t)
	for _, tt := range []struct {
		name   string
		cached int
	}{{"informer caches", 0}, {"no caches", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			k, dyn := memCluster(t, tt.cached)
			caps := capabilities.New(capabilities.Options{Kubernetes: k})
			t.Cleanup(caps.Close)
			cl := caps.Cluster("dump", []capabilities.Resource{configMaps})
			p := load(t, h, policy.Spec{ID: "dump", Module: testfixture.Module(t, gatekeeperDumpData), Cluster: cl, PoolSize: 2})
			ctx := context.Background()
			has := func(name string) bool { return strings.Contains(jsonOf(t, dump(t, p)), `"`+name+`":`) }
			dump(t, p) // the first list starts the cache
			if tt.cached == 0 {
				deadline := time.Now().Add(10 * time.Second)
				for _, ok := cl.Version(configMaps); !ok; _, ok = cl.Version(configMaps) {
					if time.Now().After(deadline) {
						t.Fatal("the ConfigMap cache did not sync")
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			before := policy.ClusterBuilds(p)
			for range 5 {
				if d := jsonOf(t, dump(t, p)); !strings.Contains(d, `"one":`) || strings.Contains(d, `"three":`) {
					t.Fatalf("data without default/one, or with default/three: %s", d)
				}
			}
			builds := policy.ClusterBuilds(p) - before
			if tt.cached == 0 && builds > 1 {
				t.Fatalf("%d builds for 5 evaluations of unchanged objects, want at most 1", builds)
			}
			if tt.cached < 0 && builds != 5 {
				t.Fatalf("%d builds for 5 evaluations without caches, want 5", builds)
			}
			if _, err := dyn.Resource(cmGVR).Namespace("default").Create(ctx, kobj("ConfigMap", "default", "three", nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !has("three") {
				if time.Now().After(deadline) {
					t.Fatal("the new ConfigMap never reached the data")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// ingressList is a List of n Ingresses of one host each, as the capability
// answers it, and the objects.
func ingresses(n int) ([]byte, []runtime.Object) {
	var objs []runtime.Object
	var items []json.RawMessage
	for i := range n {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{"name": fmt.Sprintf("ing-%d", i), "namespace": fmt.Sprintf("team-%d", i%20),
				"labels": map[string]any{"app": "web", "team": fmt.Sprintf("team-%d", i%20)}, "uid": fmt.Sprintf("uid-%d", i), "resourceVersion": "1"},
			"spec": map[string]any{"rules": []any{map[string]any{"host": fmt.Sprintf("host-%d.example.net", i),
				"http": map[string]any{"paths": []any{map[string]any{"path": "/", "pathType": "Prefix",
					"backend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": int64(80)}}}}}}}}},
		}}
		objs = append(objs, u)
		b, _ := json.Marshal(u.Object)
		items = append(items, b)
	}
	list, _ := json.Marshal(map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "IngressList", "metadata": map[string]any{}, "items": items})
	return list, objs
}

// BenchmarkRegoClusterData: an evaluation of the context-aware Rego example
// (opa-unique-ingress-host) on a cluster of n Ingresses (about 500 bytes
// each): "kept", the data built once and kept while the informer reports no
// change (the server's case once the cache synced); "rebuilt", the Ingresses
// listed (answered from memory by a replayed session), data.kubernetes
// built and parsed by the guest on every evaluation (no change signal: a
// cache not synced yet, or record and replay).
func BenchmarkRegoClusterData(b *testing.B) {
	const example = "examples/opa-unique-ingress-host"
	ingress := capabilities.Resource{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}
	ingGVR := schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	req := testfixture.File(b, example+"/testdata/ingress-web.json")
	for _, n := range []int{10, 100, 1000} {
		list, objs := ingresses(n)
		for _, mode := range []string{"kept", "rebuilt"} {
			b.Run(fmt.Sprintf("%s-%d", mode, n), func(b *testing.B) {
				h, err := policy.NewHost(context.Background(), policy.HostOptions{CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close(context.Background())
				var caps *capabilities.Host
				if mode == "kept" {
					dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
						map[schema.GroupVersionResource]string{ingGVR: "IngressList"}, objs...)
					mapper := meta.NewDefaultRESTMapper(nil)
					mapper.Add(schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}, meta.RESTScopeNamespace)
					k, err := capabilities.NewKubernetes(capabilities.KubeOptions{Dynamic: dyn, Mapper: mapper})
					if err != nil {
						b.Fatal(err)
					}
					caps = capabilities.New(capabilities.Options{Kubernetes: k})
				} else {
					session := "- type: Exchange\n  request: \"!KubernetesListResourceAll\\napi_version: networking.k8s.io/v1\\nkind: Ingress\\n\"\n" +
						"  response: {type: Success, payload: '" + string(list) + "'}\n" +
						"- type: Exchange\n  request: \"!KubernetesGetResourcePluralName\\napi_version: networking.k8s.io/v1\\nkind: Ingress\\n\"\n" +
						"  response: {type: Success, payload: '\"ingresses\"'}\n"
					r, err := capabilities.ParseSession("bench", []byte(session))
					if err != nil {
						b.Fatal(err)
					}
					r.Repeat()
					caps = capabilities.New(capabilities.Options{Replay: r})
				}
				defer caps.Close()
				cl := caps.Cluster("bench", []capabilities.Resource{ingress})
				p, err := h.Load(context.Background(), policy.Spec{ID: "bench", Module: testfixture.Module(b, example), Cluster: cl, PoolSize: 1})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close(context.Background())
				ctx := context.Background()
				eval := func() {
					res, err := p.Validate(ctx, req)
					if err != nil || !res.Response.Accepted {
						b.Fatalf("%v %+v", err, res)
					}
				}
				eval()
				if mode == "kept" {
					deadline := time.Now().Add(30 * time.Second)
					for _, ok := cl.Version(ingress); !ok; _, ok = cl.Version(ingress) {
						if time.Now().After(deadline) {
							b.Fatal("the Ingress cache did not sync")
						}
						time.Sleep(5 * time.Millisecond)
					}
					eval()
				}
				builds := policy.ClusterBuilds(p)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					eval()
				}
				b.StopTimer()
				b.ReportMetric(float64(len(list)), "list-bytes")
				b.ReportMetric(float64(policy.ClusterBuilds(p)-builds)/float64(b.N), "builds/op")
			})
		}
	}
}
