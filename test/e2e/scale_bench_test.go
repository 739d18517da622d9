package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// BenchmarkOperatorScale measures the operator's scale targets: 200 policies (the four kinds, in a
// few namespaces) on 5 PolicyServers of one replica each. It reports the time the servers take to
// be ready, then the time from the first policy created to every policy active, the controller's memory once settled, and what a
// controller restart (a full reconcile of unchanged objects) writes: the objects whose
// resourceVersion changed, and the controller's non-GET requests. The scenario runs once whatever
// b.N is (it takes minutes): run it with -run '^$' -bench OperatorScale -benchtime 1x (make
// bench-operator).
func BenchmarkOperatorScale(b *testing.B) {
	const servers, policies = 5, 200
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	f := startFleet(b, ctx, "tollgate-scale")
	nss := []string{"scale-a", "scale-b", "scale-c"}

	start := time.Now()
	f.createWorkload(ctx, "scale", servers, policies, nss)
	if err := f.waitActive(ctx, policies, 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	toActive, serversReady := time.Since(f.serversReady), f.serversReady.Sub(start)
	b.Logf("%d servers ready after %v; then %d policies created and active after %v", servers,
		serversReady.Round(time.Millisecond), policies, toActive.Round(time.Millisecond))
	reconciles, err := f.settle(ctx, 5*time.Second, 2*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	mem, err := procMemory(f.ctrl.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	m, err := scrapeMetrics(f.metrics)
	if err != nil {
		b.Fatal(err)
	}
	writes, byMethod := nonGETRequests(m)
	b.Logf("settled: controller %s after %.0f reconciles and %.0f non-GET requests [%s]", mem, reconciles, writes, byMethod)

	res := f.restartResync(ctx, 20*time.Second)
	if res.err != nil {
		b.Fatal(res.err)
	}
	b.Logf("%s", res)
	if err := f.waitActive(ctx, policies, time.Minute); err != nil {
		b.Errorf("after the restart: %v", err)
	}

	b.ReportMetric(serversReady.Seconds(), "s-servers-ready")
	b.ReportMetric(toActive.Seconds(), "s-to-active")
	b.ReportMetric(mem.rss, "MB-ctrl-rss")
	b.ReportMetric(mem.anon, "MB-ctrl-rss-anon")
	b.ReportMetric(mem.hwm, "MB-ctrl-hwm")
	b.ReportMetric(res.mem.rss, "MB-ctrl-rss-after-resync")
	b.ReportMetric(writes, "nonGET-to-active")
	b.ReportMetric(float64(len(res.changed)), "writes-on-resync")
	b.ReportMetric(res.nonGET, "nonGET-on-resync")
	b.ReportMetric(res.reconciles, "reconciles-on-resync")
	if len(res.changed) > 0 {
		b.Errorf("a resync of unchanged objects changed %d objects (target 0):\n%s", len(res.changed), strings.Join(res.changed, "\n"))
	}
}

// fleet is a `tollgate controller` process for its own namespace, which the scenario can restart;
// its PolicyServers are real pods on the node (kube-controller-manager's garbage collector removes
// what they owned).
type fleet struct {
	tb      testing.TB
	ns      string
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	wasm    map[string]string // example name -> policy.wasm
	metrics string            // host:port of the controller's /metrics
	probe   string            // host:port of its /readyz
	ctrl    *controllerProc
	ctrlLog string
	starts  int
	// serversReady is when createWorkload saw every server ready, before creating the policies.
	serversReady time.Time
}

// startFleet pushes the example policies, starts the controller for namespace ns; tb's cleanup
// stops it (with the controller's log when tb failed).
func startFleet(tb testing.TB, ctx context.Context, ns string) *fleet {
	tb.Helper()
	c := env.cluster
	f := &fleet{tb: tb, ns: ns, cs: c.Client, wasm: map[string]string{}}
	for _, name := range []string{"required-labels", "capabilities-drop", "go-image-registries"} {
		f.wasm[name] = policyRef(tb, name)
	}
	var err error
	if f.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		tb.Fatal(err)
	}
	if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	f.metrics, f.probe = "127.0.0.1:"+strconv.Itoa(freePort(tb)), "127.0.0.1:"+strconv.Itoa(freePort(tb))
	if err := f.startController(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := f.stopController(); err != nil {
			tb.Log(err)
		}
		if tb.Failed() {
			tb.Logf("--- %s (last 40 lines) ---\n%s", f.ctrlLog, tailFile(f.ctrlLog, 40))
		}
	})

	return f
}

// startController starts a `tollgate controller` process (default flags but its namespace,
// kubeconfig and listen addresses) and waits for its /readyz.
func (f *fleet) startController(ctx context.Context) error {
	f.starts++
	f.ctrlLog = filepath.Join(env.dir, fmt.Sprintf("controller-%s-%d.log", f.ns, f.starts))
	args := []string{"controller", "--kubeconfig=" + env.cluster.Kubeconfig, "--namespace=" + f.ns,
		"--metrics-bind-address=" + f.metrics, "--health-probe-bind-address=" + f.probe, "--log-fmt=json"}
	p, err := startControllerProc(f.ctrlLog, args)
	if err != nil {
		return err
	}
	f.ctrl = p
	return poll(ctx, time.Minute, 100*time.Millisecond, func() error { return p.ready(f.probe) })
}

// stopController stops the controller process: SIGTERM, then SIGKILL after 15 s.
func (f *fleet) stopController() error {
	if f.ctrl == nil {
		return nil
	}
	defer func() { f.ctrl = nil }()
	return f.ctrl.stop()
}

// createWorkload creates namespaces nss, servers PolicyServers <prefix>-<i> (one replica), waits
// for their replicas to be ready, and creates n policies spread over them: ClusterAdmissionPolicies (the three example modules, a third of them
// mutating, some in monitor mode), AdmissionPolicies in nss, and both kinds of groups. Every
// policy matches only objects in nss, where nothing else writes.
func (f *fleet) createWorkload(ctx context.Context, prefix string, servers, n int, nss []string) {
	f.tb.Helper()
	for _, ns := range nss {
		if _, err := f.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			f.tb.Fatal(err)
		}
	}
	for i := 0; i < servers; i++ {
		ps := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policies.tollgate.dev/v1", "kind": "PolicyServer",
			"metadata": map[string]any{"name": fmt.Sprintf("%s-%d", prefix, i)},
			"spec": map[string]any{"image": env.image, "replicas": int64(1),
				"insecureSources": []any{cluster.PodRegistryHost}},
		}}
		if _, err := f.dyn.Resource(policyGVR["PolicyServer"]).Create(ctx, ps, metav1.CreateOptions{}); err != nil {
			f.tb.Fatal(err)
		}
	}
	// The servers are ready before the policies come, as after an install: `tollgate serve`
	// misses a policies.yml swap made while it loads its first configuration (it watches the
	// file only after loading; see docs/benchmarks.md, Operator), and then serves the old file
	// until the next change.
	for i := 0; i < servers; i++ {
		if _, err := waitServerPods(ctx, f.cs, f.ns, fmt.Sprintf("policy-server-%s-%d", prefix, i), 1, 3*time.Minute); err != nil {
			f.tb.Fatal(err)
		}
	}
	f.serversReady = time.Now()
	for i := 0; i < n; i++ {
		kind, obj := fleetPolicy(prefix, i, servers, nss, f.wasm)
		ri := f.dyn.Resource(policyGVR[kind]).Namespace(obj.GetNamespace())
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			f.tb.Fatalf("create %s %s: %v", kind, obj.GetName(), err)
		}
	}
}

// fleetPolicy is the i-th policy of the workload: out of every 10, 5 ClusterAdmissionPolicies,
// 3 AdmissionPolicies, 1 ClusterAdmissionPolicyGroup and 1 AdmissionPolicyGroup, on server i % servers.
func fleetPolicy(prefix string, i, servers int, nss []string, wasm map[string]string) (string, *unstructured.Unstructured) {
	name := fmt.Sprintf("%s-%03d", prefix, i)
	ns := nss[i%len(nss)]
	resources := []string{"configmaps", "secrets", "services", "pods"}
	spec := map[string]any{
		"policyServer":  fmt.Sprintf("%s-%d", prefix, i%servers),
		"failurePolicy": "Ignore",
		"rules": []any{map[string]any{
			"apiGroups": []any{""}, "apiVersions": []any{"v1"},
			"resources": []any{resources[i%len(resources)]}, "operations": []any{"CREATE", "UPDATE"},
		}},
	}
	if i%7 == 0 {
		spec["mode"] = "monitor"
	}
	inNSS := map[string]any{"matchExpressions": []any{map[string]any{
		"key": "kubernetes.io/metadata.name", "operator": "In", "values": toAny(nss),
	}}}
	var kind string
	switch i % 10 {
	case 0, 1, 2, 3, 9:
		kind, ns = "ClusterAdmissionPolicy", ""
		spec["namespaceSelector"] = inNSS
	case 4, 5, 6:
		kind = "AdmissionPolicy"
	case 7:
		kind, ns = "ClusterAdmissionPolicyGroup", ""
		spec["namespaceSelector"] = inNSS
	case 8:
		kind = "AdmissionPolicyGroup"
	}
	if strings.HasSuffix(kind, "Group") {
		spec["policies"] = map[string]any{
			"owner": map[string]any{"module": wasm["required-labels"],
				"settings": map[string]any{"mandatory_labels": []any{"owner", fmt.Sprintf("g%d", i)}}},
			"team": map[string]any{"module": wasm["required-labels"],
				"settings": map[string]any{"mandatory_labels": []any{"team"}}},
		}
		spec["expression"] = "owner() || team()"
		spec["message"] = fmt.Sprintf("group %s: needs an owner or a team label", name)
	} else {
		switch i % 3 {
		case 0:
			spec["module"] = wasm["required-labels"]
			spec["mutating"] = false
			spec["settings"] = map[string]any{"mandatory_labels": []any{fmt.Sprintf("label-%d", i)}}
		case 1:
			spec["module"] = wasm["go-image-registries"]
			spec["mutating"] = i%2 == 1
			spec["settings"] = map[string]any{"allowedRegistries": []any{fmt.Sprintf("registry-%d.example", i), "ghcr.io/acme"},
				"alwaysPullImages": i%2 == 1}
		case 2:
			spec["module"] = wasm["capabilities-drop"]
			spec["mutating"] = true
		}
	}
	meta := map[string]any{"name": name, "labels": map[string]any{"e2e.tollgate.dev/workload": prefix}}
	if ns != "" {
		meta["namespace"] = ns
	}
	return kind, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.tollgate.dev/v1", "kind": kind, "metadata": meta, "spec": spec,
	}}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

var fleetPolicyKinds = []string{"ClusterAdmissionPolicy", "AdmissionPolicy", "ClusterAdmissionPolicyGroup", "AdmissionPolicyGroup"}

// waitActive waits until want policies (of every kind, in every namespace) are active, and says
// which are not otherwise.
func (f *fleet) waitActive(ctx context.Context, want int, timeout time.Duration) error {
	last := -1
	return poll(ctx, timeout, time.Second, func() error {
		active, total := 0, 0
		var notActive []string
		for _, kind := range fleetPolicyKinds {
			l, err := f.dyn.Resource(policyGVR[kind]).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range l.Items {
				total++
				st, _, _ := unstructured.NestedString(l.Items[i].Object, "status", "policyStatus")
				if st == "active" {
					active++
				} else if len(notActive) < 5 {
					notActive = append(notActive, fmt.Sprintf("%s %s/%s: %q (%s)", kind, l.Items[i].GetNamespace(), l.Items[i].GetName(), st, conditionMessages(&l.Items[i])))
				}
			}
		}
		if active != last {
			f.tb.Logf("%s active: %d of %d", time.Now().UTC().Format("15:04:05"), active, total)
			last = active
		}
		if active < want {
			return fmt.Errorf("%d of %d policies active (want %d); for instance:\n  %s", active, total, want, strings.Join(notActive, "\n  "))
		}
		return nil
	})
}

// settle waits at least min, then until the controller's reconcile count has not moved for 5 s
// (at most max); it returns that count.
func (f *fleet) settle(ctx context.Context, min, max time.Duration) (float64, error) {
	time.Sleep(min)
	deadline := time.Now().Add(max - min)
	prev, since := -1.0, time.Now()
	for {
		m, err := scrapeMetrics(f.metrics)
		if err != nil {
			return 0, err
		}
		n := m.sum("controller_runtime_reconcile_total", nil)
		switch {
		case n != prev:
			prev, since = n, time.Now()
		case time.Since(since) >= 5*time.Second:
			return n, nil
		}
		if time.Now().After(deadline) {
			f.tb.Logf("the controller still reconciles after %v (%.0f reconciles): measuring anyway", max, n)
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// resyncResult is what a controller restart wrote.
type resyncResult struct {
	changed    []string // objects whose resourceVersion changed, with what changed
	nonGET     float64  // the new process's non-GET requests
	gets       float64  // and its GETs (lists and watches included)
	byMethod   string   // the same by method and code
	reconciles float64
	mem        procMem // the new process's
	took       time.Duration
	err        error
}

func (r resyncResult) String() string {
	return fmt.Sprintf("controller restart: %d objects changed, %.0f non-GET requests [%s] (and %.0f GETs), %.0f reconciles in %v; new process %s",
		len(r.changed), r.nonGET, r.byMethod, r.gets, r.reconciles, r.took.Round(time.Second), r.mem)
}

// restartResync records every object the controller writes, restarts the controller (a full
// reconcile of unchanged objects), waits for its first pass over every object, then at least min
// and until it settles, and compares.
func (f *fleet) restartResync(ctx context.Context, min time.Duration) (r resyncResult) {
	before, err := snapshot(ctx, f.dyn, f.ns)
	if err != nil {
		r.err = err
		return r
	}
	if err := f.stopController(); err != nil {
		f.tb.Log(err)
	}
	start := time.Now()
	if r.err = f.startController(ctx); r.err != nil {
		return r
	}
	// The new process has done its first pass over every object before the writes are counted:
	// a controller that reconciled nothing would write nothing, and settle would see its count
	// (0) still.
	if _, r.err = waitFirstPass(ctx, f.dyn, f.metrics, 3*time.Minute); r.err != nil {
		r.err = fmt.Errorf("the restarted controller's first pass: %w", r.err)
		return r
	}
	if r.reconciles, r.err = f.settle(ctx, min, 3*time.Minute); r.err != nil {
		return r
	}
	r.took = time.Since(start)
	m, err := scrapeMetrics(f.metrics)
	if err != nil {
		r.err = err
		return r
	}
	if len(m["rest_client_requests_total"]) == 0 {
		r.err = errors.New("the controller's /metrics has no rest_client_requests_total")
		return r
	}
	r.nonGET, r.byMethod = nonGETRequests(m)
	r.gets = m.sum("rest_client_requests_total", map[string]string{"method": "GET"})
	if r.mem, r.err = procMemory(f.ctrl.cmd.Process.Pid); r.err != nil {
		return r
	}
	after, err := snapshot(ctx, f.dyn, f.ns)
	if err != nil {
		r.err = err
		return r
	}
	r.changed = diffSnapshots(before, after)
	return r
}

// snapshot reads every object the controller writes: the policies and PolicyServers, the webhook
// configurations, and its namespace's ConfigMaps, Secrets, Services, ServiceAccounts,
// Deployments and PodDisruptionBudgets.
func snapshot(ctx context.Context, dyn dynamic.Interface, ns string) (map[string]*unstructured.Unstructured, error) {
	type res struct {
		gvr schema.GroupVersionResource
		ns  string
	}
	all := []res{
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, ""},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, ""},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, ns},
		{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, ns},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, ns},
		{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, ns},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, ns},
		{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, ns},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, ns},
		{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, ns},
	}
	for _, kind := range append([]string{"PolicyServer"}, fleetPolicyKinds...) {
		all = append(all, res{policyGVR[kind], ""})
	}
	out := map[string]*unstructured.Unstructured{}
	for _, r := range all {
		l, err := dyn.Resource(r.gvr).Namespace(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", r.gvr.Resource, err)
		}
		for i := range l.Items {
			o := &l.Items[i]
			out[r.gvr.Resource+" "+o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	return out, nil
}

// diffSnapshots lists the objects created, deleted or with another resourceVersion, with the
// fields that differ and the field manager that last wrote.
func diffSnapshots(before, after map[string]*unstructured.Unstructured) []string {
	var out []string
	for k, a := range after {
		b, ok := before[k]
		switch {
		case !ok:
			out = append(out, k+": created")
		case a.GetResourceVersion() != b.GetResourceVersion():
			out = append(out, fmt.Sprintf("%s: resourceVersion %s -> %s, last writer %s; changed: %s", k,
				b.GetResourceVersion(), a.GetResourceVersion(), lastManager(a), strings.Join(changedPaths(b.Object, a.Object), ", ")))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k+": deleted")
		}
	}
	sort.Strings(out)
	return out
}

func lastManager(o *unstructured.Unstructured) string {
	var last metav1.ManagedFieldsEntry
	for _, m := range o.GetManagedFields() {
		if m.Time != nil && (last.Time == nil || !m.Time.Before(last.Time)) {
			last = m
		}
	}
	return fmt.Sprintf("%s (%s %s)", last.Manager, last.Operation, last.Subresource)
}

// changedPaths lists the leaf paths whose values differ, leaving out resourceVersion and
// managedFields; values are shown when short.
func changedPaths(a, b any) []string {
	var out []string
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		if path == ".metadata.resourceVersion" || path == ".metadata.managedFields" || reflect.DeepEqual(a, b) {
			return
		}
		am, aok := a.(map[string]any)
		bm, bok := b.(map[string]any)
		if aok && bok {
			keys := map[string]bool{}
			for k := range am {
				keys[k] = true
			}
			for k := range bm {
				keys[k] = true
			}
			for k := range keys {
				walk(path+"."+k, am[k], bm[k])
			}
			return
		}
		as, aok := a.([]any)
		bs, bok := b.([]any)
		if aok && bok && len(as) == len(bs) {
			for i := range as {
				walk(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])
			}
			return
		}
		av, _ := json.Marshal(a)
		bv, _ := json.Marshal(b)
		if len(av)+len(bv) > 200 {
			out = append(out, path)
		} else {
			out = append(out, fmt.Sprintf("%s %s -> %s", path, av, bv))
		}
	}
	walk("", a, b)
	sort.Strings(out)
	return out
}

// nonGETRequests sums the controller's rest_client_requests_total but GETs (lists and watches
// are GETs too), and lists them by method and code.
func nonGETRequests(m metricSet) (float64, string) {
	by := map[string]float64{}
	var n float64
	for _, s := range m["rest_client_requests_total"] {
		if method := s.labels["method"]; method != "GET" {
			n += s.value
			by[method+"/"+s.labels["code"]] += s.value
		}
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
	}
	sort.Strings(parts)
	return n, strings.Join(parts, " ")
}

// sample is one line of a Prometheus text exposition.
type sample struct {
	labels map[string]string
	value  float64
}

type metricSet map[string][]sample

// sum adds the samples of name whose labels include match.
func (m metricSet) sum(name string, match map[string]string) float64 {
	var n float64
next:
	for _, s := range m[name] {
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		n += s.value
	}
	return n
}

// scrapeMetrics reads the controller's /metrics (text format; label values without commas or
// escaped quotes, as controller-runtime's are).
func scrapeMetrics(addr string) (metricSet, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := metricSet{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:sp], map[string]string{}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(name[i+1:], "}"), ",") {
				if k, val, ok := strings.Cut(kv, "="); ok {
					labels[k] = strings.Trim(val, `"`)
				}
			}
			name = name[:i]
		}
		m[name] = append(m[name], sample{labels, v})
	}
	return m, sc.Err()
}

// procMem is a process's memory from /proc/<pid>/status, in MB (10^6 bytes).
type procMem struct {
	rss, hwm   float64 // VmRSS, VmHWM
	anon, file float64 // RssAnon (heap, stacks), RssFile (the executable's pages)
}

func (m procMem) String() string {
	return fmt.Sprintf("VmRSS %.1f MB (RssAnon %.1f, RssFile %.1f), VmHWM %.1f MB", m.rss, m.anon, m.file, m.hwm)
}

// procMemory reads a process's memory from /proc/<pid>/status.
func procMemory(pid int) (procMem, error) {
	var m procMem
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	fields := map[string]*float64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "RssAnon": &m.anon, "RssFile": &m.file}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if p := fields[k]; ok && p != nil {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				return m, fmt.Errorf("/proc/%d/status: %s: %w", pid, line, err)
			}
			*p = kb * 1024 / 1e6
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		return m, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return m, nil
}

// errStop ends a poll at once.
type errStop struct{ error }

// poll calls f every interval until it returns nil or an errStop, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop errStop
		if errors.As(err, &stop) {
			return stop.error
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
