package examples_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/host/policy"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// BenchmarkUniqueIngressHostList: the context-aware example on a cluster of n Ingresses, its
// list_resources_all answered by a constant list shaped as the host's masked answer, so the
// figure is the guest's and the host's share of an evaluation without the capability's.
func BenchmarkUniqueIngressHostList(b *testing.B) {
	request := testfixture.File(b, "examples/unique-ingress-host/testdata/ingress-shop-web.json")
	module, err := os.ReadFile(testfixture.Path("examples/unique-ingress-host/policy.wasm"))
	if err != nil {
		b.Fatalf("%v: run make policies", err)
	}
	ctx := context.Background()
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	for _, n := range []int{10, 100, 1000} {
		var items []string
		for i := range n {
			ns, name := fmt.Sprintf("list-bench-%d", i%10), fmt.Sprintf("app-%d", i)
			items = append(items, `{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"creationTimestamp":"2026-11-26T10:00:00Z","generation":1,`+
				`"labels":{"app":"`+name+`","team":"`+ns+`"},"name":"`+name+`","namespace":"`+ns+`","resourceVersion":"`+fmt.Sprint(1000+i)+
				`","uid":"0c5b2d6e-8f7a-4b1e-9c3d-`+fmt.Sprintf("%012d", i)+`"},"spec":{"rules":[{"host":"`+name+"."+ns+`.example.com"}]}}`)
		}
		list := []byte(`{"apiVersion":"networking.k8s.io/v1","kind":"IngressList","metadata":{},"items":[` + strings.Join(items, ",") + `]}`)
		b.Run(fmt.Sprintf("ingresses=%d", n), func(b *testing.B) {
			p, err := h.Load(ctx, policy.Spec{ID: fmt.Sprint("uih-", n), Module: module, PoolSize: 1, HostCallsInline: true,
				HostCalls: func(context.Context, string, string, string, []byte) ([]byte, error) { return list, nil }})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			b.SetBytes(int64(len(list)))
			rss0 := vmRSS(b)
			for b.Loop() {
				res, err := p.Validate(ctx, request)
				if err != nil || !res.Response.Accepted {
					b.Fatalf("%v %+v", err, res)
				}
			}
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(vmRSS(b)-rss0)/1e6, "rss-growth-MB")
			b.ReportMetric(float64(ms.HeapInuse)/1e6, "go-heap-MB")
		})
	}
}

// vmRSS is this process's resident set, in bytes.
func vmRSS(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb * 1024
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}
