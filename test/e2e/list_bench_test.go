package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkContextAwareList1000 (make bench-capabilities): `tollgate serve` runs the example
// context-aware policy examples/unique-ingress-host, which lists every Ingress of the cluster
// (list_resources_all) on each evaluation, against a real kube-apiserver holding 1,000 Ingresses.
// For each cache cap (--max-cached-objects) it reports the evaluation's p50 and p99 seen by an
// HTTP client, and the server's RSS after start and after the requests: with the default cap the
// 1,000 Ingresses are answered from the informer cache; with a cap below 1,000 the cache gives up
// and every call goes to the apiserver, so the server's memory does not grow with the kind.
func BenchmarkContextAwareList1000(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cs := env.cluster.Client
	const namespaces, perNamespace = 10, 100
	var nss []string
	for i := range namespaces {
		ns := fmt.Sprintf("list-bench-%d", i)
		nss = append(nss, ns)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, namespaces)
	pathType := networkingv1.PathTypePrefix
	for _, ns := range nss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perNamespace {
				name := fmt.Sprintf("app-%d", j)
				ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name, "team": ns}},
					Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: name + "." + ns + ".example.com",
						IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
							Path: "/", PathType: &pathType, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
								Name: name, Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}}}}
				if _, err := cs.NetworkingV1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("created %d Ingresses in %v", namespaces*perNamespace, time.Since(start).Round(time.Millisecond))

	policy := filepath.Join(env.root, "examples/unique-ingress-host/policy.wasm")
	admissionRequest, err := os.ReadFile(filepath.Join(env.root, "examples/unique-ingress-host/testdata/ingress-shop-web.json"))
	if err != nil {
		b.Fatal(err)
	}
	body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":` + string(admissionRequest) + `}`
	dir := b.TempDir()
	pols := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pols, []byte("unique-ingress-host:\n  module: file://"+policy+"\n"+
		"  contextAwareResources: [{apiVersion: networking.k8s.io/v1, kind: Ingress}]\n  hostCapabilities: [kubernetes/list_resources_all]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const requests = 300
	for _, maxCached := range []int{10000, 500} {
		b.Run(fmt.Sprintf("max-cached-objects=%d", maxCached), func(b *testing.B) {
			srv := startServe(b, ctx, pols, "--max-cached-objects", fmt.Sprint(maxCached))
			ready, err := procMemory(srv.pid)
			if err != nil {
				b.Fatal(err)
			}
			review := func() time.Duration {
				t0 := time.Now()
				resp, err := http.Post(srv.base+"/validate/unique-ingress-host", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if !strings.Contains(string(out), `"allowed":true`) {
					b.Fatalf("want allowed (the host is free among 1,000 Ingresses): %s", out)
				}
				return d
			}
			// The first calls fill (or give up on) the cache.
			for range 20 {
				review()
			}
			time.Sleep(2 * time.Second)
			var ds []time.Duration
			for range requests {
				ds = append(ds, review())
			}
			after, err := procMemory(srv.pid)
			if err != nil {
				b.Fatal(err)
			}
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			p50, p99 := ds[len(ds)/2], ds[len(ds)*99/100]
			metrics, err := scrapeMetrics(strings.TrimPrefix(srv.probe, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			hits := metrics.sum("tollgate_capability_cache_requests_total", map[string]string{"result": "hit"})
			b.Logf("max-cached-objects=%d: %d requests, p50 %v, p99 %v, cache hits %.0f; at ready %s; after %s",
				maxCached, requests, p50, p99, hits, ready, after)
			if maxCached >= namespaces*perNamespace && hits < requests {
				b.Errorf("cache hits %.0f, want at least %d: the Ingress cache did not serve the lists", hits, requests)
			}
			if maxCached < namespaces*perNamespace && !strings.Contains(srv.logs.String(), "more objects than the cache cap") {
				b.Errorf("the Ingress cache did not give up at its cap of %d:\n%s", maxCached, srv.logs.String())
			}
			for b.Loop() { // the measurement is the requests above
			}
			b.ReportMetric(float64(p50.Microseconds()), "p50-us")
			b.ReportMetric(float64(p99.Microseconds()), "p99-us")
			b.ReportMetric(after.rss, "rss-MB")
			b.ReportMetric(after.rss-ready.rss, "rss-growth-MB")
		})
	}
}
