package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// BenchmarkAudit10k (make bench-audit, docs/benchmarks.md "Audit"): 10,000 Pods in 100
// namespaces (Pending: a scheduling gate keeps them off the node), 5 active ClusterAdmissionPolicies
// on one PolicyServer of 2 replicas (two `tollgate serve` processes over HTTPS behind a
// round-robin TCP proxy, as a Service spreads connections), and a full `tollgate audit` writing
// one Report per Pod: its wall time and peak RSS, then a second run over the unchanged cluster
// (which must write nothing). Targets: <= 60 s and <= 100 MB.
func BenchmarkAudit10k(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := env.cluster
	cs := c.Client
	const namespaces, perNamespace, policies = 100, 100, 5
	const tgNS, server = "audit-bench-tollgate", "bench"

	// the report CRDs, as the chart installs them
	crds, _ := filepath.Glob(filepath.Join(env.root, "charts", "tollgate", "files", "report-crds", "*.yaml"))
	args := []string{"apply", "--server-side"}
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if _, _, err := c.Kubectl(ctx, args...); err != nil {
		b.Fatal(err)
	}
	if _, _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/reports.openreports.io", "crd/clusterreports.openreports.io"); err != nil {
		b.Fatal(err)
	}

	// the PolicyServer: a Service (the audit looks it up) and two replicas behind a proxy
	if err := ensureNamespace(ctx, cs, tgNS); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), tgNS, metav1.DeleteOptions{}) })
	if _, err := cs.CoreV1().Services(tgNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "policy-server-" + server},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "policy-server", Port: 443}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	ca, err := cluster.NewCA("audit-bench")
	if err != nil {
		b.Fatal(err)
	}
	crt, key, err := ca.ServingCert("policy-server-" + server + "." + tgNS + ".svc")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	for name, data := range map[string][]byte{"ca.pem": ca.CertPEM, "tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	wasm := filepath.Join(env.root, "examples", "required-labels", "policy.wasm")
	var pols strings.Builder
	for i := range policies {
		fmt.Fprintf(&pols, "clusterwide-bench-%d:\n  module: file://%s\n  settings: {mandatory_labels: [label-%d]}\n", i, wasm, i)
	}
	polFile := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(polFile, []byte(pols.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	var backends []string
	for range 2 {
		s := startServe(b, ctx, polFile, "--insecure-http=false", "--cert-file", filepath.Join(dir, "tls.crt"), "--key-file", filepath.Join(dir, "tls.key"), "--workers", "2")
		backends = append(backends, strings.TrimPrefix(s.base, "http://"))
	}
	proxy := roundRobinProxy(b, backends)

	// the policies, active (no controller here: the status is written as it would write it)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	for i := range policies {
		name := fmt.Sprintf("bench-%d", i)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policies.tollgate.dev/v1", "kind": "ClusterAdmissionPolicy",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"policyServer": server, "module": "file://" + wasm, "mutating": false,
				"rules": []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "resources": []any{"pods"}, "operations": []any{"CREATE"}}}},
		}}
		ri := dyn.Resource(policyGVR["ClusterAdmissionPolicy"])
		created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ri.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		_ = unstructured.SetNestedField(created.Object, "active", "status", "policyStatus")
		if _, err := ri.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}

	// 10,000 Pods: each lacks one of the policies' labels in 1 of 5 cases
	begin := time.Now()
	var created atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, namespaces)
	sem := make(chan struct{}, 16)
	for n := range namespaces {
		ns := fmt.Sprintf("audit-bench-%03d", n)
		if err := ensureNamespace(ctx, cs, ns); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
		for j := range perNamespace {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				labels := map[string]string{"app": fmt.Sprintf("app-%d", j)}
				for i := range policies {
					if (n*perNamespace+j)%25 != i { // 1 in 25 misses label-i: 20% of the Pods fail one policy
						labels[fmt.Sprintf("label-%d", i)] = "x"
					}
				}
				_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", j), Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
						SchedulingGates: []corev1.PodSchedulingGate{{Name: "e2e.tollgate.dev/never"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				created.Add(1)
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.Logf("audit bench: %d Pods created in %v", created.Load(), time.Since(begin).Round(time.Millisecond))

	run := func(label string) (time.Duration, int64, string) {
		cmd := exec.CommandContext(ctx, env.bin, "audit", "--kubeconfig", c.Kubeconfig, "--tollgate-namespace", tgNS,
			"--policy-server-url", "https://"+proxy, "--extra-ca", filepath.Join(dir, "ca.pem"), "--parallel-namespaces", "4")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("tollgate audit (%s): %v\n%s", label, err, out)
		}
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024 // KiB to bytes
		return d, rss, lastLine(string(out))
	}
	b.ResetTimer()
	d1, rss1, sum1 := run("first")
	d2, rss2, sum2 := run("unchanged")
	b.StopTimer()
	fmt.Printf("audit bench: full audit of %d Pods x %d policies: %v, peak RSS %d MiB (%.1f MB)\n  %s\n", created.Load(), policies, d1.Round(time.Millisecond), rss1>>20, float64(rss1)/1e6, sum1)
	fmt.Printf("audit bench: second run, nothing changed: %v, peak RSS %d MiB (%.1f MB)\n  %s\n", d2.Round(time.Millisecond), rss2>>20, float64(rss2)/1e6, sum2)
	counts := regexp.MustCompile(`(\d+) evaluated.*reports (\d+) created`).FindStringSubmatch(sum1)
	if counts == nil || atoi(counts[1]) < created.Load() || atoi(counts[2]) < created.Load() {
		b.Errorf("the first run did not audit and report every Pod: %s", sum1)
	}
	if !strings.Contains(sum2, "0 created, 0 updated, 0 deleted") {
		b.Errorf("the second run wrote to an unchanged cluster: %s", sum2)
	}
	if d1 > time.Minute || rss1 > 100e6 {
		b.Errorf("targets missed: %v (<= 60 s), %.1f MB (<= 100 MB)", d1, float64(rss1)/1e6)
	}
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// roundRobinProxy forwards each TCP connection to the next backend, as a Service does.
func roundRobinProxy(tb testing.TB, backends []string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	var next atomic.Int64
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", backends[int(next.Add(1))%len(backends)])
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}
