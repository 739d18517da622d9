package capabilities

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

const benchGet = `{"api_version":"v1","kind":"Namespace","name":"default","namespace":"","disable_cache":false}`

// warmGet is a host-call function whose Namespace cache is synced.
func warmGet(b testing.TB, more ...runtime.Object) HostCallFunc {
	k, _ := fakeCluster(b, KubeOptions{}, more...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	if _, err := call(b, f, "kubernetes", "get_resource", benchGet); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, nsGVR)
	waitSynced(b, k, nsGVR)
	return f
}

// BenchmarkGetResourceCached: the host side of a cached get_resource
// (decode, allow-list, cache lookup, encode, metrics).
func BenchmarkGetResourceCached(b *testing.B) {
	f := warmGet(b)
	ctx := context.Background()
	p := []byte(benchGet)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(ctx, "kubewarden", "kubernetes", "get_resource", p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000Cached: list_resources_all over 1,000 cached config maps.
func BenchmarkList1000Cached(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		objs = append(objs, obj("v1", "ConfigMap", fmt.Sprintf("ns%d", i%10), fmt.Sprintf("cm%d", i), map[string]string{"app": "bench"},
			map[string]any{"data": map[string]any{"key": strings.Repeat("v", 64)}}))
	}
	k, _ := fakeCluster(b, KubeOptions{}, objs...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	p := []byte(`{"api_version":"v1","kind":"ConfigMap","label_selector":"app=bench"}`)
	if _, err := call(b, f, "kubernetes", "list_resources_all", string(p)); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, cmGVR)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := f(ctx, "kubewarden", "kubernetes", "list_resources_all", p)
		if err != nil || len(out) < 1000*64 {
			b.Fatal(err, len(out))
		}
	}
}

// BenchmarkGetResourceCachedWithDeadline: the same, under an evaluation
// deadline (the backend call gets a derived one).
func BenchmarkGetResourceCachedWithDeadline(b *testing.B) {
	f := warmGet(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	p := []byte(benchGet)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f(ctx, "kubewarden", "kubernetes", "get_resource", p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList1000CachedMasked: the same list with field_masks, as
// examples/unique-ingress-host asks it (the masked encodings are cached per
// object version and mask set).
func BenchmarkList1000CachedMasked(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		objs = append(objs, obj("v1", "ConfigMap", fmt.Sprintf("ns%d", i%10), fmt.Sprintf("cm%d", i), map[string]string{"app": "bench"},
			map[string]any{"data": map[string]any{"key": strings.Repeat("v", 64), "other": strings.Repeat("w", 64)}}))
	}
	k, _ := fakeCluster(b, KubeOptions{}, objs...)
	f := newTestHost(b, Options{Kubernetes: k}, Allow{Resources: allResources})
	p := []byte(`{"api_version":"v1","kind":"ConfigMap","label_selector":"app=bench","field_masks":["data.key"]}`)
	if _, err := call(b, f, "kubernetes", "list_resources_all", string(p)); err != nil {
		b.Fatal(err)
	}
	waitSynced(b, k, cmGVR)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := f(ctx, "kubewarden", "kubernetes", "list_resources_all", p)
		if err != nil || len(out) < 1000*64 || bytes.Contains(out, []byte("wwww")) {
			b.Fatal(err, len(out))
		}
	}
}
