package capabilities

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"
)

func TestGetResource(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{})
	f := newTestHost(t, Options{Kubernetes: k}, Allow{Resources: allResources})
	tests := []struct {
		name, payload, want, wantErr string
	}{
		{name: "cluster object, namespace empty as policy-sdk-go sends it",
			payload: `{"api_version":"v1","kind":"Namespace","name":"default","namespace":"","disable_cache":false}`,
			want:    `{"apiVersion":"v1","kind":"Namespace","metadata":{"labels":{"team":"a"},"name":"default"}}`},
		{name: "namespaced object",
			payload: `{"api_version":"v1","kind":"ConfigMap","name":"one","namespace":"default","disable_cache":true}`,
			want:    `{"apiVersion":"v1","data":{"k":"v","k2":"v2"},"kind":"ConfigMap","metadata":{"labels":{"app":"x"},"name":"one","namespace":"default"}}`},
		{name: "field masks keep metadata, apiVersion and kind",
			payload: `{"api_version":"v1","kind":"ConfigMap","name":"one","namespace":"default","disable_cache":false,"field_masks":["data.k"]}`,
			want:    `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"labels":{"app":"x"},"name":"one","namespace":"default"}}`},
		{name: "not found, no namespace",
			payload: `{"api_version":"v1","kind":"Namespace","name":"nope","disable_cache":false}`,
			wantErr: `Callback evaluation failure: Cannot find v1/Namespace named 'nope' inside of namespace 'None'`},
		{name: "not found in a namespace",
			payload: `{"api_version":"v1","kind":"ConfigMap","name":"nope","namespace":"default","disable_cache":false}`,
			wantErr: `Callback evaluation failure: Cannot find v1/ConfigMap named 'nope' inside of namespace 'Some("default")'`},
		{name: "namespaced kind without namespace",
			payload: `{"api_version":"apps/v1","kind":"Deployment","name":"x","disable_cache":false}`,
			wantErr: `Callback evaluation failure: Resource apps/v1/Deployment is namespaced, but no namespace was provided`},
		{name: "disable_cache is required",
			payload: `{"api_version":"v1","kind":"Namespace","name":"default"}`,
			wantErr: "missing field `disable_cache`"},
		{name: "not JSON",
			payload: `{"api_version":`,
			wantErr: "invalid host call payload: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := call(t, f, "kubernetes", "get_resource", tt.payload)
			if tt.wantErr != "" {
				wantErr(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got = noRV(got); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestGetResourceFromCache(t *testing.T) {
	k, dyn := fakeCluster(t, KubeOptions{})
	h := New(Options{Kubernetes: k})
	defer h.Close()
	f, _ := h.ForPolicy("p", Allow{Resources: allResources})
	const p = `{"api_version":"v1","kind":"Namespace","name":"default","namespace":"","disable_cache":false}`
	if _, err := call(t, f, "kubernetes", "get_resource", p); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, k, nsGVR)
	before := len(dyn.Actions())
	for i := 0; i < 10; i++ {
		if _, err := call(t, f, "kubernetes", "get_resource", p); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(dyn.Actions()) - before; n != 0 {
		t.Fatalf("%d apiserver calls for cached gets, want 0: %v", n, dyn.Actions()[before:])
	}
	// the cache follows the cluster
	if _, err := dyn.Resource(nsGVR).Create(context.Background(), obj("v1", "Namespace", "", "new", map[string]string{"x": "y"}, nil), metav1CreateOptions); err != nil {
		t.Fatal(err)
	}
	got, err := call(t, f, "kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"new","disable_cache":false}`)
	if err != nil || !strings.Contains(got, `"x":"y"`) {
		t.Fatalf("got %s, %v", got, err)
	}
	// an update reaches cached answers (a new resourceVersion: encoded again)
	upd := obj("v1", "Namespace", "", "default", map[string]string{"team": "b"}, nil)
	upd.SetResourceVersion("2")
	if _, err := dyn.Resource(nsGVR).Update(context.Background(), upd, metav1UpdateOptions); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := call(t, f, "kubernetes", "get_resource", p)
		if err == nil && strings.Contains(got, `"team":"b"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cached answer did not follow the update: %s, %v", got, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// disable_cache goes to the apiserver
	before = len(dyn.Actions())
	if _, err := call(t, f, "kubernetes", "get_resource", strings.Replace(p, `"disable_cache":false`, `"disable_cache":true`, 1)); err != nil {
		t.Fatal(err)
	}
	if n := len(dyn.Actions()) - before; n != 1 {
		t.Fatalf("%d apiserver calls with disable_cache, want 1", n)
	}
}

func TestListResources(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{})
	f := newTestHost(t, Options{Kubernetes: k}, Allow{Resources: allResources})
	tests := []struct {
		name, op, payload, want, wantErr string
		cachedOnly                       bool // the fake client ignores field selectors
	}{
		{name: "by namespace", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"ConfigMap","namespace":"default","field_masks":["metadata.name"]}`,
			want:    `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"app":"x"},"name":"one","namespace":"default"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"app":"y"},"name":"two","namespace":"default"}}]}`},
		{name: "by namespace, label selector", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"ConfigMap","namespace":"default","label_selector":"app=y","field_masks":["metadata"]}`,
			want:    `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"app":"y"},"name":"two","namespace":"default"}}]}`},
		{name: "all namespaces, label selector", op: "list_resources_all",
			payload: `{"api_version":"v1","kind":"ConfigMap","label_selector":"app=x","field_selector":null,"field_masks":["metadata"]}`,
			want:    `{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"app":"x"},"name":"one","namespace":"default"}},{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"app":"x"},"name":"three","namespace":"other"}}]}`},
		{name: "field selector on metadata.name", op: "list_resources_all",
			payload:    `{"api_version":"v1","kind":"Namespace","field_selector":"metadata.name=other"}`,
			want:       `{"apiVersion":"v1","kind":"NamespaceList","metadata":{},"items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}]}`,
			cachedOnly: true},
		{name: "empty list", op: "list_resources_all",
			payload: `{"api_version":"apps/v1","kind":"Deployment"}`,
			want:    `{"apiVersion":"apps/v1","kind":"DeploymentList","metadata":{},"items":[]}`},
		{name: "cluster kind in a namespace", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"Namespace","namespace":"default"}`,
			wantErr: `Callback evaluation failure: resource v1/Namespace is cluster wide. Cannot search for it inside of a namespace`},
		{name: "bad label selector", op: "list_resources_all",
			payload: `{"api_version":"v1","kind":"ConfigMap","label_selector":"a in ("}`,
			wantErr: `Callback evaluation failure: invalid label_selector "a in ("`},
		{name: "namespace is required", op: "list_resources_by_namespace",
			payload: `{"api_version":"v1","kind":"ConfigMap"}`,
			wantErr: "missing field `namespace`"},
	}
	for _, cached := range []bool{false, true} {
		if cached {
			if _, err := call(t, f, "kubernetes", "list_resources_all", `{"api_version":"v1","kind":"Namespace"}`); err != nil {
				t.Fatal(err)
			}
			waitSynced(t, k, cmGVR)
			waitSynced(t, k, nsGVR)
			waitSynced(t, k, depGVR)
		}
		for _, tt := range tests {
			if tt.cachedOnly && !cached {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				got, err := call(t, f, "kubernetes", tt.op, tt.payload)
				if tt.wantErr != "" {
					if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
						t.Fatalf("error %v, want %q", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got = noRV(got); got != tt.want {
					t.Fatalf("cached=%v\ngot  %s\nwant %s", cached, got, tt.want)
				}
			})
		}
	}
}

func TestCacheCap(t *testing.T) {
	k, dyn := fakeCluster(t, KubeOptions{MaxCachedObjects: 2})
	h := New(Options{Kubernetes: k})
	defer h.Close()
	f, _ := h.ForPolicy("p", Allow{Resources: allResources})
	const p = `{"api_version":"v1","kind":"ConfigMap"}` // 3 config maps > cap 2
	if _, err := call(t, f, "kubernetes", "list_resources_all", p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		k.mu.Lock()
		c := k.caches[cmGVR]
		k.mu.Unlock()
		if c != nil && c.state.Load() == cacheOverCap {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cache did not give up at its cap")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := len(dyn.Actions())
	got, err := call(t, f, "kubernetes", "list_resources_all", p)
	if err != nil || strings.Count(got, `"kind":"ConfigMap"`) != 3 {
		t.Fatalf("got %s, %v", got, err)
	}
	if n := len(dyn.Actions()) - before; n != 1 {
		t.Fatalf("%d apiserver calls over the cap, want 1 (direct)", n)
	}
	k.updateSizes()
	if v := gaugeValue(t, h, "tollgate_capability_cache_objects", "v1/ConfigMap"); v != -1 {
		t.Fatalf("cache size gauge %v, want -1", v)
	}
}

func TestCanI(t *testing.T) {
	calls := 0
	k, _ := fakeCluster(t, KubeOptions{Reviews: func(_ context.Context, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
		calls++
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "alice" && ra.Resource == "pods" && ra.Verb == "create" && ra.Namespace == "ns1"
		return sar, nil
	}})
	// can_i is not limited by contextAwareResources
	f := newTestHost(t, Options{Kubernetes: k}, Allow{})
	rust := `{"subject_access_review":{"groups":null,"resource_attributes":{"group":"","name":null,"namespace":"ns1","resource":"pods","subresource":null,"verb":"create","version":null},"user":"alice"},"disable_cache":false}`
	goSDK := `{"subject_access_review":{"groups":["g"],"resourceAttributes":{"namespace":"ns1","resource":"pods","verb":"create"},"user":"bob"},"disable_cache":false}`
	for i, tt := range []struct{ payload, want string }{
		{rust, `{"allowed":true}`},
		{rust, `{"allowed":true}`}, // cached
		{goSDK, `{"allowed":false}`},
	} {
		got, err := call(t, f, "kubernetes", "can_i", tt.payload)
		if err != nil || got != tt.want {
			t.Fatalf("%d: got %s, %v; want %s", i, got, err, tt.want)
		}
	}
	if calls != 2 {
		t.Fatalf("%d SubjectAccessReviews, want 2 (one answer cached)", calls)
	}
	_, err := call(t, f, "kubernetes", "can_i", `{"subject_access_review":{"user":"x"},"disable_cache":false}`)
	wantErr(t, err, "missing field `resource_attributes`")
}

func TestNoKubernetesClient(t *testing.T) {
	f := newTestHost(t, Options{}, Allow{Resources: allResources})
	_, err := call(t, f, "kubernetes", "get_resource", `{"api_version":"v1","kind":"Namespace","name":"x","disable_cache":false}`)
	wantErr(t, err, "Callback evaluation failure: kube::Client was not initialized properly")
}

func TestUnknownKind(t *testing.T) {
	k, _ := fakeCluster(t, KubeOptions{})
	f := newTestHost(t, Options{Kubernetes: k}, Allow{Resources: []Resource{{"example.com/v1", "Widget"}}})
	_, err := call(t, f, "kubernetes", "list_resources_all", `{"api_version":"example.com/v1","kind":"Widget"}`)
	wantErr(t, err, "Callback evaluation failure: Cannot find resource example.com/v1/Widget")
}

// An apiserver that never answers: the guest gets an error before the
// evaluation deadline, with time left to act on it.
func TestUnreachableAPIServerAnswersWithinDeadline(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	k, err := NewKubernetesForConfig(&rest.Config{Host: srv.URL}, KubeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := newTestHost(t, Options{Kubernetes: k}, Allow{Resources: allResources})
	for _, tc := range []struct{ op, payload string }{
		{"get_resource", `{"api_version":"v1","kind":"Namespace","name":"x","disable_cache":false}`},
		{"can_i", `{"subject_access_review":{"resource_attributes":{"resource":"pods","verb":"get"},"user":"u"},"disable_cache":true}`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		_, err = f(ctx, "kubewarden", "kubernetes", tc.op, []byte(tc.payload))
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s: no error from a silent apiserver", tc.op)
		}
		if !strings.HasPrefix(err.Error(), "Callback evaluation failure: ") {
			t.Fatalf("%s: %v", tc.op, err)
		}
		if took > 450*time.Millisecond {
			t.Fatalf("%s: answered after %v, want before the 500ms deadline minus the margin", tc.op, took)
		}
	}
}

// noRV drops the fixtures' resourceVersion "1" from an answer.
func noRV(s string) string { return strings.ReplaceAll(s, `,"resourceVersion":"1"`, "") }

// TestMaskedAnswersFromCache: with field_masks, a cached answer (encoded once per object version
// and mask set) is byte for byte the answer the apiserver path gives, for several mask sets of
// the same objects, in any order of the paths, and follows an update.
func TestMaskedAnswersFromCache(t *testing.T) {
	k, dyn := fakeCluster(t, KubeOptions{})
	h := New(Options{Kubernetes: k})
	defer h.Close()
	f, _ := h.ForPolicy("p", Allow{Resources: allResources})
	list := func(masks, disable string) string {
		t.Helper()
		got, err := call(t, f, "kubernetes", "list_resources_by_namespace",
			`{"api_version":"v1","kind":"ConfigMap","namespace":"default","disable_cache":`+disable+`,"field_masks":`+masks+`}`)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	list(`["data.k"]`, "false")
	waitSynced(t, k, cmGVR)
	for i, masks := range []string{`["data.k"]`, `["data.k2","data.k"]`, `["data.k","data.k2","data.k"]`, `["data"]`, `["metadata.name"]`, `["nothing.here"]`, `[]`, `["data.k"]`} {
		direct := list(masks, "true")
		for range 2 { // the first fills the variant, the second reads it
			if cached := list(masks, "false"); cached != direct {
				t.Fatalf("masks %s (#%d): cached\n  %s\ndirect\n  %s", masks, i, cached, direct)
			}
		}
	}
	// An update reaches every mask set's cached answer.
	upd := obj("v1", "ConfigMap", "default", "one", map[string]string{"app": "x"}, map[string]any{"data": map[string]any{"k": "changed", "k2": "v2"}})
	upd.SetResourceVersion("2")
	if _, err := dyn.Resource(cmGVR).Namespace("default").Update(context.Background(), upd, metav1UpdateOptions); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(list(`["data.k"]`, "false"), `"k":"changed"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the masked cached answer did not follow the update: %s", list(`["data.k"]`, "false"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cached, direct := list(`["data.k2","data.k"]`, "false"), list(`["data.k2","data.k"]`, "true"); cached != direct {
		t.Fatalf("after the update: cached\n  %s\ndirect\n  %s", cached, direct)
	}
}
