package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tollgate-dev/tollgate/test/e2e/kubelet"
)

const (
	controllerNS = "tollgate-system"
	psName       = "default"
	psObject     = "policy-server-" + psName // Deployment, Service, ConfigMap, Secret
	edits        = 20
	caSecret     = "tollgate-ca"
)

var policyGVR = map[string]schema.GroupVersionResource{
	"PolicyServer":                {Group: "policies.tollgate.dev", Version: "v1", Resource: "policyservers"},
	"ClusterAdmissionPolicy":      {Group: "policies.tollgate.dev", Version: "v1", Resource: "clusteradmissionpolicies"},
	"AdmissionPolicy":             {Group: "policies.tollgate.dev", Version: "v1", Resource: "admissionpolicies"},
	"ClusterAdmissionPolicyGroup": {Group: "policies.tollgate.dev", Version: "v1", Resource: "clusteradmissionpolicygroups"},
	"AdmissionPolicyGroup":        {Group: "policies.tollgate.dev", Version: "v1", Resource: "admissionpolicygroups"},
}

// operator is the running operator: `tollgate controller` as a process, the kubelet emulator
// running the policy servers, and the garbage collector the cluster lacks.
type operator struct {
	cs                     kubernetes.Interface
	dyn                    dynamic.Interface
	k                      *kubelet.Kubelet
	gc                     *kubelet.GarbageCollector
	ctrl                   *controllerProc
	requiredWasm, capsWasm string
	volumeDelay            time.Duration
	// configMapDelay delays ConfigMap volume updates only (E2E_CONFIGMAP_DELAY, default
	// defaultConfigMapDelay): policies must reach the servers through the API watch.
	configMapDelay time.Duration
}

// defaultConfigMapDelay is TestOperator's ConfigMap volume delay: longer than every wait for a
// policy change (30 s), so a change the servers saw only through the mounted file fails the test.
const defaultConfigMapDelay = 45 * time.Second

// TestOperator runs the scenarios against `tollgate controller` and `tollgate serve`
// processes on a real apiserver, in order; each subtest depends on the ones before it.
func TestOperator(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	op := startOperator(t, ctx)
	// Leave nothing for the next test's controller (policies and PolicyServers are cluster-wide):
	// this runs before the controller stops, so finalizers are honoured; one that is not within a
	// minute is an error, and is stripped.
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/required-labels", "ClusterAdmissionPolicy/capabilities-drop",
			"ClusterAdmissionPolicy/monitor-labels", "ClusterAdmissionPolicy/load-labels", "ClusterAdmissionPolicy/broken-module",
			"ClusterAdmissionPolicy/bad-settings", "AdmissionPolicy/e2e-b/team-labels", "ClusterAdmissionPolicyGroup/owner-or-team",
			"PolicyServer/" + psName})
	})

	for _, ns := range []string{"e2e-a", "e2e-b", "e2e-c", "e2e-d", "e2e-load", "e2e-broken"} {
		if _, err := op.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	var latencies []time.Duration // apply-to-enforce, per policy edit
	var failed atomic.Int64       // failed admission requests over every scenario with load

	ok := t.Run("PolicyServer gets its replicas", func(t *testing.T) {
		apply(t, ctx, `apiVersion: policies.tollgate.dev/v1
kind: PolicyServer
metadata:
  name: `+psName+`
spec:
  image: ghcr.io/tollgate-dev/tollgate:e2e
  replicas: 2
`)
		wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer wcancel()
		reps, err := op.k.WaitReady(wctx, psObject, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, rep := range reps {
			t.Logf("replica %s pid %d webhook %d probes %d", rep.Pod, rep.PID, rep.Port, rep.ReadinessPort)
		}
		// The certificate names the Service, and the replicas serve it.
		sec, err := op.cs.CoreV1().Secrets(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		crt := parseCert(t, sec.Data["tls.crt"])
		if want := psObject + "." + controllerNS + ".svc"; !slices.Contains(crt.DNSNames, want) {
			t.Errorf("certificate names %v, want %s", crt.DNSNames, want)
		}
		eventually(t, 30*time.Second, func() error {
			ps, err := op.dyn.Resource(policyGVR["PolicyServer"]).Get(ctx, psName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return conditionsTrue(ps, "DeploymentReconciled", "ServiceReconciled", "ConfigMapReconciled", "CertSecretReconciled", "RBACReconciled")
		})
		// The replicas reach the API as their ServiceAccount (a TokenRequest token): their
		// Role lets them read and watch their ConfigMap, and nothing else.
		rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(reps[0].Dir, "kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		scs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, func() error {
			if _, err := scs.CoreV1().ConfigMaps(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("the server's ServiceAccount cannot get its ConfigMap: %w", err)
			}
			_, err := scs.CoreV1().ConfigMaps(controllerNS).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + psObject})
			return err
		})
		if _, err := scs.CoreV1().ConfigMaps(controllerNS).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the server's ServiceAccount lists every ConfigMap: %v", err)
		}
		if _, err := scs.CoreV1().Secrets(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the server's ServiceAccount reads its Secret: %v", err)
		}
	})
	if !ok {
		t.FailNow()
	}

	t.Run("validating ClusterAdmissionPolicy refuses a violating Pod", func(t *testing.T) {
		start := time.Now()
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "required-labels", policySpec{
			module: op.requiredWasm, settings: `{"mandatory_labels": ["owner"]}`, resources: "pods",
		}))
		eventually(t, 60*time.Second, func() error {
			err := createPod(ctx, op.cs, "e2e-a", nil, nil)
			if err == nil {
				return fmt.Errorf("a Pod without owner was admitted")
			}
			if !strings.Contains(err.Error(), `mandatory label "owner" is missing`) {
				return fmt.Errorf("want the policy's message, got: %v", err)
			}
			return nil
		})
		t.Logf("first policy: apply to enforce %v", time.Since(start).Round(time.Millisecond))
		op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "required-labels", "active", 30*time.Second)
		if err := createPod(ctx, op.cs, "e2e-a", map[string]string{"owner": "me"}, nil); err != nil {
			t.Fatalf("a Pod with owner: %v", err)
		}
		if _, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterwide-required-labels", metav1.GetOptions{}); err != nil {
			t.Errorf("webhook configuration: %v", err)
		}
	})

	t.Run("mutating policy's patch is in the stored Pod", func(t *testing.T) {
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "capabilities-drop", policySpec{
			module: op.capsWasm, mutating: true, resources: "pods",
		}))
		op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "capabilities-drop", "active", 60*time.Second)
		eventually(t, 30*time.Second, func() error {
			name, err := createPodNamed(ctx, op.cs, "e2e-a", map[string]string{"owner": "me"}, []corev1.Capability{"NET_ADMIN"})
			if err != nil {
				return err
			}
			p, err := op.cs.CoreV1().Pods("e2e-a").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sc := p.Spec.Containers[0].SecurityContext
			if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "BPF") {
				return fmt.Errorf("stored Pod %s has securityContext %+v, want BPF dropped", name, sc)
			}
			return nil
		})
	})

	t.Run("AdmissionPolicy affects only its namespace", func(t *testing.T) {
		apply(t, ctx, policyYAML("AdmissionPolicy", "e2e-b", "team-labels", policySpec{
			module: op.requiredWasm, settings: `{"mandatory_labels": ["team"]}`, resources: "configmaps",
		}))
		op.waitStatus(t, ctx, "AdmissionPolicy", "e2e-b", "team-labels", "active", 60*time.Second)
		eventually(t, 10*time.Second, func() error {
			if err := createConfigMap(ctx, op.cs, "e2e-b", nil); err == nil || !isDenial(err) {
				return fmt.Errorf("e2e-b, no team label: want a denial, got %v", err)
			}
			return nil
		})
		if err := createConfigMap(ctx, op.cs, "e2e-a", nil); err != nil {
			t.Errorf("e2e-a, no team label: %v", err)
		}
		if err := createConfigMap(ctx, op.cs, "e2e-b", map[string]string{"team": "t"}); err != nil {
			t.Errorf("e2e-b, team label: %v", err)
		}
	})

	t.Run("monitor mode lets everything through", func(t *testing.T) {
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "monitor-labels", policySpec{
			module: op.requiredWasm, settings: `{"mandatory_labels": ["monitored"]}`, resources: "configmaps",
			namespace: "e2e-c", mode: "monitor",
		}))
		op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "monitor-labels", "active", 60*time.Second)
		for i := 0; i < 5; i++ {
			if err := createConfigMap(ctx, op.cs, "e2e-c", nil); err != nil {
				t.Fatalf("monitor mode refused: %v", err)
			}
		}
		obj := op.get(t, ctx, "ClusterAdmissionPolicy", "", "monitor-labels")
		if mode, _, _ := unstructured.NestedString(obj.Object, "status", "mode"); mode != "monitor" {
			t.Errorf("status.mode = %q, want monitor", mode)
		}
		// The same policy in protect mode refuses (so the pass above meant something).
		op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "monitor-labels", `{"mode": "protect"}`)
		eventually(t, 30*time.Second+op.volumeDelay, func() error {
			if err := createConfigMap(ctx, op.cs, "e2e-c", nil); err == nil || !isDenial(err) {
				return fmt.Errorf("protect mode: want a denial, got %v", err)
			}
			return nil
		})
	})

	t.Run("a policy group decides by its expression", func(t *testing.T) {
		apply(t, ctx, `apiVersion: policies.tollgate.dev/v1
kind: ClusterAdmissionPolicyGroup
metadata:
  name: owner-or-team
spec:
  rules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      resources: ["configmaps"]
      operations: ["CREATE"]
  namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [e2e-d]}
  policies:
    owner:
      module: file://`+op.requiredWasm+`
      settings: {mandatory_labels: [owner]}
    team:
      module: file://`+op.requiredWasm+`
      settings: {mandatory_labels: [team]}
  expression: "owner() || team()"
  message: "needs an owner or a team label"
`)
		op.waitStatus(t, ctx, "ClusterAdmissionPolicyGroup", "", "owner-or-team", "active", 60*time.Second)
		eventually(t, 10*time.Second, func() error {
			err := createConfigMap(ctx, op.cs, "e2e-d", nil)
			if err == nil || !strings.Contains(err.Error(), "needs an owner or a team label") {
				return fmt.Errorf("neither label: want the group's message, got %v", err)
			}
			return nil
		})
		for _, l := range []map[string]string{{"owner": "o"}, {"team": "t"}} {
			if err := createConfigMap(ctx, op.cs, "e2e-d", l); err != nil {
				t.Errorf("labels %v (owner() || team()): %v", l, err)
			}
		}
		op.patchSpec(t, ctx, "ClusterAdmissionPolicyGroup", "", "owner-or-team", `{"expression": "owner() && team()"}`)
		eventually(t, 30*time.Second+op.volumeDelay, func() error {
			if err := createConfigMap(ctx, op.cs, "e2e-d", map[string]string{"team": "t"}); err == nil || !isDenial(err) {
				return fmt.Errorf("team only under owner() && team(): want a denial, got %v", err)
			}
			return nil
		})
		if err := createConfigMap(ctx, op.cs, "e2e-d", map[string]string{"team": "t", "owner": "o"}); err != nil {
			t.Errorf("both labels under owner() && team(): %v", err)
		}
	})

	t.Run(fmt.Sprintf("%d policy edits under load: no failed request, no restart", edits), func(t *testing.T) {
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "load-labels", policySpec{
			module: op.requiredWasm, settings: `{"mandatory_labels": ["k0"]}`, resources: "configmaps", namespace: "e2e-load",
		}))
		op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", "active", 60*time.Second)
		eventually(t, 10*time.Second, func() error {
			if err := createConfigMap(ctx, op.cs, "e2e-load", nil); err == nil || !isDenial(err) {
				return fmt.Errorf("want a denial, got %v", err)
			}
			return nil
		})
		starts, pids := op.k.Starts(psObject), op.k.PIDs(psObject)
		l := startLoad(ctx, op.cs, "e2e-load", 2, 20000, 5*time.Minute)
		time.Sleep(time.Second)
		for i := 1; i <= edits; i++ {
			key := "k" + strconv.Itoa(i)
			t0 := time.Now()
			op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["`+key+`"]}}`)
			_, err := l.probe(ctx, key, 30*time.Second+op.volumeDelay)
			if err != nil {
				l.stop()
				t.Fatalf("edit %d: %v (after %v)", i, err, time.Since(t0))
			}
			latencies = append(latencies, time.Since(t0))
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(time.Second)
		l.stop()
		failed.Add(l.failed.Load())
		p50, pmax := percentile(latencies, 50), percentile(latencies, 100)
		line := fmt.Sprintf("e2e: apply-to-enforce p50=%v max=%v edits=%d failed_requests=%d requests=%d volume_delay=%s configmap_volume_delay=%s",
			p50.Round(time.Millisecond), pmax.Round(time.Millisecond), len(latencies), l.failed.Load(), l.total.Load(), cmp.Or(os.Getenv("E2E_VOLUME_DELAY"), "0"),
			cmp.Or(op.configMapDelay, op.volumeDelay))
		t.Log(line)
		fmt.Println(line)
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d failed requests; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
		}
		if p50 > 2*time.Second {
			t.Errorf("apply-to-enforce p50 %v above the 2 s target", p50)
		}
		if got := op.k.Starts(psObject); got != starts {
			t.Errorf("policy server processes started %d times during the edits, want %d (no restart); kubelet events:\n%s", got, starts, strings.Join(op.k.Events(), "\n"))
		}
		if got := op.k.PIDs(psObject); fmt.Sprint(got) != fmt.Sprint(pids) {
			t.Errorf("policy server pids %v -> %v", pids, got)
		}
	})

	t.Run("broken policies: status says why, no webhook, the others keep working", func(t *testing.T) {
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "broken-module", policySpec{
			module: "/nonexistent/e2e/policy.wasm", resources: "configmaps", namespace: "e2e-broken",
		}))
		apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "bad-settings", policySpec{
			module: op.requiredWasm, settings: `{"required_labels": ["x"]}`, resources: "configmaps", namespace: "e2e-broken",
		}))
		for name, want := range map[string]string{"broken-module": "/nonexistent/e2e/policy.wasm", "bad-settings": `unknown settings field "required_labels"`} {
			eventually(t, 60*time.Second+op.volumeDelay, func() error {
				obj := op.get(t, ctx, "ClusterAdmissionPolicy", "", name)
				st, _, _ := unstructured.NestedString(obj.Object, "status", "policyStatus")
				msgs := conditionMessages(obj)
				if st == "active" {
					return fmt.Errorf("%s is active", name)
				}
				if !strings.Contains(msgs, want) {
					return fmt.Errorf("%s: status %s, conditions %s: want %q", name, st, msgs, want)
				}
				return nil
			})
			obj := op.get(t, ctx, "ClusterAdmissionPolicy", "", name)
			t.Logf("%s: %s", name, conditionMessages(obj))
			if _, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterwide-"+name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: webhook configuration registered (get: %v)", name, err)
			}
		}
		if err := createConfigMap(ctx, op.cs, "e2e-broken", nil); err != nil {
			t.Errorf("e2e-broken has no working policy, yet: %v", err)
		}
		// The others keep working, and keep taking edits.
		if err := createPod(ctx, op.cs, "e2e-a", nil, nil); err == nil || !isDenial(err) {
			t.Errorf("required-labels no longer refuses: %v", err)
		}
		op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["after-broken"]}}`)
		eventually(t, 30*time.Second+op.volumeDelay, func() error {
			err := createConfigMap(ctx, op.cs, "e2e-load", map[string]string{"k20": "v"})
			if err == nil || !strings.Contains(err.Error(), `"after-broken"`) {
				return fmt.Errorf("an edit of another policy beside a broken one: want a denial naming after-broken, got %v", err)
			}
			return nil
		})
		for _, name := range []string{"broken-module", "bad-settings"} {
			if _, _, err := env.cluster.Kubectl(ctx, "delete", "clusteradmissionpolicy", name, "--timeout=60s"); err != nil {
				t.Errorf("delete %s: %v", name, err)
			}
		}
	})

	t.Run("certificate and CA rotation: no failed request", func(t *testing.T) {
		leaf0, ca0 := op.certs(t, ctx)
		op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["k0"]}}`)
		eventually(t, 30*time.Second+op.volumeDelay, func() error { // the load's compliant objects pass again
			return createConfigMap(ctx, op.cs, "e2e-load", loadLabels(""))
		})
		l := startLoad(ctx, op.cs, "e2e-load", 2, 50000, 5*time.Minute)
		defer l.stop()
		// The server certificate is renewed every 30 s (--cert-validity=2m, --cert-renew-before=90s)
		// and the CA 90 s after the controller made it (--ca-validity=3m): wait for a server
		// certificate signed by a new CA.
		var leaf, ca *x509.Certificate
		eventually(t, 3*time.Minute+op.volumeDelay, func() error {
			leaf, ca = op.certs(t, ctx)
			switch {
			case leaf.SerialNumber.Cmp(leaf0.SerialNumber) == 0:
				return fmt.Errorf("server certificate %s (until %s) not renewed yet", leaf0.SerialNumber, leaf0.NotAfter.Format(time.TimeOnly))
			case ca.SerialNumber.Cmp(ca0.SerialNumber) == 0:
				return fmt.Errorf("CA %s (until %s) not renewed yet", ca0.SerialNumber, ca0.NotAfter.Format(time.TimeOnly))
			case leaf.CheckSignatureFrom(ca) != nil:
				return fmt.Errorf("the server certificate is not signed by the new CA yet")
			}
			return nil
		})
		t.Logf("renewed: server certificate %s (until %s) -> %s (until %s); CA %s -> %s", leaf0.SerialNumber, leaf0.NotAfter.Format(time.TimeOnly),
			leaf.SerialNumber, leaf.NotAfter.Format(time.TimeOnly), ca0.SerialNumber, ca.SerialNumber)
		// Every replica serves the new certificate (hot reload, no restart), and every webhook
		// trusts the new CA.
		eventually(t, 30*time.Second+op.volumeDelay, func() error {
			for _, rep := range op.k.Replicas(psObject) {
				got, err := servedCert(rep.Port, psObject+"."+controllerNS+".svc")
				if err != nil {
					return err
				}
				if got.CheckSignatureFrom(ca) != nil {
					return fmt.Errorf("%s serves serial %s, not signed by the new CA", rep.Pod, got.SerialNumber)
				}
			}
			vw, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, w := range vw.Items {
				for _, wh := range w.Webhooks {
					if !bytes.Contains(wh.ClientConfig.CABundle, bytes.TrimSpace(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))) {
						return fmt.Errorf("webhook %s does not trust the new CA", wh.Name)
					}
				}
			}
			return nil
		})
		time.Sleep(3 * time.Second)
		l.stop()
		failed.Add(l.failed.Load())
		t.Logf("during the rotation: %d requests, %d failed", l.total.Load(), l.failed.Load())
		if n := l.failed.Load(); n != 0 {
			t.Errorf("%d failed requests during the rotation; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
		}
		if l.total.Load() == 0 {
			t.Error("no request was made")
		}
		if got := op.k.Starts(psObject); got != 2 {
			t.Errorf("policy server processes started %d times, want 2 (no restart)", got)
		}
	})

	t.Run("deleting a policy removes its webhook", func(t *testing.T) {
		if _, _, err := env.cluster.Kubectl(ctx, "delete", "clusteradmissionpolicy", "capabilities-drop", "--timeout=60s"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, func() error {
			if _, err := op.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterwide-capabilities-drop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("mutating webhook configuration still there (get: %v)", err)
			}
			return nil
		})
		name, err := createPodNamed(ctx, op.cs, "e2e-a", map[string]string{"owner": "me"}, []corev1.Capability{"NET_ADMIN"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := op.cs.CoreV1().Pods("e2e-a").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sc := p.Spec.Containers[0].SecurityContext; sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "BPF") {
			t.Errorf("a deleted mutating policy still mutates")
		}
	})

	t.Run("deleting the PolicyServer removes its webhooks and objects", func(t *testing.T) {
		if _, _, err := env.cluster.Kubectl(ctx, "delete", "policyserver", psName, "--wait=false"); err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, func() error {
			if _, err := op.dyn.Resource(policyGVR["PolicyServer"]).Get(ctx, psName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("PolicyServer still there (get: %v)", err)
			}
			var left []string
			if _, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "deployment")
			}
			if _, err := op.cs.CoreV1().Services(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "service")
			}
			if _, err := op.cs.CoreV1().ConfigMaps(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "configmap")
			}
			if _, err := op.cs.CoreV1().Secrets(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, "secret")
			}
			vw, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, w := range vw.Items {
				left = append(left, "validatingwebhookconfiguration/"+w.Name)
			}
			mw, err := op.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, w := range mw.Items {
				left = append(left, "mutatingwebhookconfiguration/"+w.Name)
			}
			if len(left) > 0 {
				return fmt.Errorf("left: %v", left)
			}
			return nil
		})
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := op.k.WaitGone(wctx, psObject); err != nil {
			t.Error(err)
		}
		sl, err := op.cs.DiscoveryV1().EndpointSlices(controllerNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + psObject})
		if err != nil || len(sl.Items) != 0 {
			t.Errorf("endpoint slices left: %v (%v)", sl, err)
		}
		// The policies stay, without a server.
		obj := op.get(t, ctx, "ClusterAdmissionPolicy", "", "required-labels")
		if st, _, _ := unstructured.NestedString(obj.Object, "status", "policyStatus"); st == "active" {
			t.Errorf("required-labels is still active without its PolicyServer")
		}
		if err := createPod(ctx, op.cs, "e2e-a", nil, nil); err != nil {
			t.Errorf("a Pod without owner after the server is gone: %v", err)
		}
	})

	if len(latencies) > 0 {
		t.Logf("summary: apply-to-enforce p50=%v max=%v edits=%d failed_requests=%d", percentile(latencies, 50).Round(time.Millisecond),
			percentile(latencies, 100).Round(time.Millisecond), len(latencies), failed.Load())
	}
}

// startOperator starts the controller, the kubelet emulator and the garbage collector, and
// registers their teardown (with their logs when the test failed).
func startOperator(t *testing.T, ctx context.Context) *operator {
	t.Helper()
	c := env.cluster
	op := &operator{
		cs:           c.Client,
		requiredWasm: filepath.Join(env.root, "examples", "required-labels", "policy.wasm"),
		capsWasm:     filepath.Join(env.root, "examples", "capabilities-drop", "policy.wasm"),
	}
	for _, f := range []string{op.requiredWasm, op.capsWasm} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v (make policies builds it)", err)
		}
	}
	var err error
	if op.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, env.bin, "controller", "--help").CombinedOutput(); err != nil {
		t.Fatalf("%s has no controller command yet: %v: %s", env.bin, err, bytes.TrimSpace(out))
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controllerNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	metricsPort, probePort := freePort(t), freePort(t)
	args := []string{"controller",
		"--kubeconfig=" + c.Kubeconfig,
		"--namespace=" + controllerNS,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
		"--status-poll-interval=200ms",
		// Short certificates: a server certificate is renewed every 30 s, the CA 90 s after it
		// was made, so the test sees both rotations.
		"--cert-validity=2m", "--cert-renew-before=90s", "--cert-check-interval=5s", "--ca-propagation-delay=5s",
		"--ca-validity=3m", "--ca-secret=" + caSecret,
		"--log-fmt=json",
	}
	if op.ctrl, err = startControllerProc(filepath.Join(env.dir, "controller.log"), args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = op.ctrl.stop()
		if t.Failed() {
			t.Logf("--- controller log (last 60 lines) ---\n%s", tailFile(op.ctrl.log, 60))
		}
	})
	probe := "127.0.0.1:" + strconv.Itoa(probePort)
	eventually(t, 60*time.Second, func() error {
		err := op.ctrl.ready(probe)
		var stop errStop
		if errors.As(err, &stop) {
			t.Fatal(stop.error)
		}
		return err
	})

	// E2E_VOLUME_DELAY (a Go duration) delays ConfigMap and Secret volume updates as a real
	// kubelet does (its sync period plus its cache TTL: up to about a minute); default none.
	if v := os.Getenv("E2E_VOLUME_DELAY"); v != "" {
		if op.volumeDelay, err = time.ParseDuration(v); err != nil {
			t.Fatalf("E2E_VOLUME_DELAY: %v", err)
		}
	}
	// E2E_CONFIGMAP_DELAY delays ConfigMap volume updates only (default defaultConfigMapDelay; 0:
	// E2E_VOLUME_DELAY's): the servers watch their ConfigMap through the API, with the token of
	// their ServiceAccount, so a policy change must not wait for the file.
	op.configMapDelay = defaultConfigMapDelay
	if v := os.Getenv("E2E_CONFIGMAP_DELAY"); v != "" {
		if op.configMapDelay, err = time.ParseDuration(v); err != nil {
			t.Fatalf("E2E_CONFIGMAP_DELAY: %v", err)
		}
	}
	op.k, err = kubelet.Start(ctx, kubelet.Options{
		Client: c.Client, Namespace: controllerNS, Binary: env.bin, Dir: filepath.Join(env.dir, "pods"), Logf: t.Logf,
		VolumeUpdateDelay: op.volumeDelay, ConfigMapUpdateDelay: op.configMapDelay,
		API: &kubelet.APIAccess{Server: c.Server, CAData: c.CA.CertPEM},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, rep := range op.k.Replicas(psObject) {
				t.Logf("--- %s (last 30 lines) ---\n%s", rep.LogPath, tailFile(rep.LogPath, 30))
			}
		}
		op.k.Stop()
	})
	if op.gc, err = kubelet.StartGarbageCollector(c.Config, controllerNS, 500*time.Millisecond, t.Logf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.gc.Stop)
	return op
}

// deleteAll deletes objects given as Kind/name or Kind/namespace/name and waits for them to go;
// one still there after a minute is reported and its finalizers are removed.
func (op *operator) deleteAll(t *testing.T, objs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type ref struct {
		ri   dynamic.ResourceInterface
		what string
		name string
	}
	var refs []ref
	for _, o := range objs {
		parts := strings.Split(o, "/")
		var ri dynamic.ResourceInterface = op.dyn.Resource(policyGVR[parts[0]])
		name := parts[len(parts)-1]
		if len(parts) == 3 {
			ri = op.dyn.Resource(policyGVR[parts[0]]).Namespace(parts[1])
		}
		if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete %s: %v", o, err)
		}
		refs = append(refs, ref{ri, o, name})
	}
	deadline := time.Now().Add(time.Minute)
	for _, r := range refs {
		for {
			_, err := r.ri.Get(ctx, r.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cleanup: %s still there a minute after its deletion (get: %v); removing its finalizers", r.what, err)
				_, _ = r.ri.Patch(ctx, r.name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// certs returns the policy server's certificate and the CA (its Secret's ca.crt).
func (op *operator) certs(t *testing.T, ctx context.Context) (leaf, ca *x509.Certificate) {
	t.Helper()
	sec, err := op.cs.CoreV1().Secrets(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caSec, err := op.cs.CoreV1().Secrets(controllerNS).Get(ctx, caSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return parseCert(t, sec.Data["tls.crt"]), parseCert(t, caSec.Data["ca.crt"])
}

// policySpec is what the scenarios vary in a policy.
type policySpec struct {
	module, settings, resources string
	mutating                    bool
	namespace                   string // CAP: only this namespace (namespaceSelector)
	mode                        string
}

func policyYAML(kind, ns, name string, s policySpec) string {
	module := s.module
	if strings.HasPrefix(module, "/") {
		module = "file://" + module // the servers run on this machine
	}
	m := "apiVersion: policies.tollgate.dev/v1\nkind: " + kind + "\nmetadata:\n  name: " + name + "\n"
	if ns != "" {
		m += "  namespace: " + ns + "\n"
	}
	m += "spec:\n  policyServer: " + psName + "\n  module: " + module + "\n  mutating: " + strconv.FormatBool(s.mutating) + "\n"
	m += "  rules:\n    - apiGroups: [\"\"]\n      apiVersions: [\"v1\"]\n      resources: [\"" + s.resources + "\"]\n      operations: [\"CREATE\"]\n"
	if s.settings != "" {
		m += "  settings: " + s.settings + "\n"
	}
	if s.mode != "" {
		m += "  mode: " + s.mode + "\n"
	}
	if s.namespace != "" {
		m += "  namespaceSelector:\n    matchExpressions:\n      - {key: kubernetes.io/metadata.name, operator: In, values: [" + s.namespace + "]}\n"
	}
	return m
}

func apply(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	if out, err := kubectlApply(ctx, manifest); err != nil {
		t.Fatalf("kubectl apply: %v: %s\n%s", err, out, manifest)
	}
}

func (op *operator) get(t *testing.T, ctx context.Context, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var ri dynamic.ResourceInterface = op.dyn.Resource(policyGVR[kind])
	if ns != "" {
		ri = op.dyn.Resource(policyGVR[kind]).Namespace(ns)
	}
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s: %v", kind, name, err)
	}
	return obj
}

// patchSpec merge-patches the policy's spec with specJSON.
func (op *operator) patchSpec(t *testing.T, ctx context.Context, kind, ns, name, specJSON string) {
	t.Helper()
	var ri dynamic.ResourceInterface = op.dyn.Resource(policyGVR[kind])
	if ns != "" {
		ri = op.dyn.Resource(policyGVR[kind]).Namespace(ns)
	}
	if _, err := ri.Patch(ctx, name, types.MergePatchType, []byte(`{"spec": `+specJSON+`}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch %s %s: %v", kind, name, err)
	}
}

// waitStatus waits for status.policyStatus == want, and says what the status was otherwise.
func (op *operator) waitStatus(t *testing.T, ctx context.Context, kind, ns, name, want string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout+op.volumeDelay, func() error {
		obj := op.get(t, ctx, kind, ns, name)
		st, _, _ := unstructured.NestedString(obj.Object, "status", "policyStatus")
		if st != want {
			return fmt.Errorf("%s %s: policyStatus %q, want %q; conditions: %s", kind, name, st, want, conditionMessages(obj))
		}
		return nil
	})
}

func conditionMessages(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var parts []string
	for _, c := range conds {
		m, _ := c.(map[string]any)
		parts = append(parts, fmt.Sprintf("%v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"]))
	}
	return strings.Join(parts, "; ")
}

func conditionsTrue(obj *unstructured.Unstructured, want ...string) error {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	have := map[string]string{}
	for _, c := range conds {
		m, _ := c.(map[string]any)
		have[fmt.Sprint(m["type"])] = fmt.Sprint(m["status"])
	}
	for _, typ := range want {
		if have[typ] != "True" {
			return fmt.Errorf("condition %s is %q; conditions: %s", typ, have[typ], conditionMessages(obj))
		}
	}
	return nil
}

var objSeq atomic.Int64

func createPod(ctx context.Context, cs kubernetes.Interface, ns string, labels map[string]string, add []corev1.Capability) error {
	_, err := createPodNamed(ctx, cs, ns, labels, add)
	return err
}

func createPodNamed(ctx context.Context, cs kubernetes.Interface, ns string, labels map[string]string, add []corev1.Capability) (string, error) {
	name := fmt.Sprintf("pod-%d", objSeq.Add(1))
	c := corev1.Container{Name: "app", Image: "registry.example/app:1"}
	if len(add) > 0 {
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: add}}
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}, metav1.CreateOptions{})
	return name, err
}

func createConfigMap(ctx context.Context, cs kubernetes.Interface, ns string, labels map[string]string) error {
	_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", objSeq.Add(1)), Labels: labels},
	}, metav1.CreateOptions{})
	return err
}

// isDenial tells a policy's verdict from a failed request (the webhook not reached, a timeout, a
// TLS error, a server error...).
func isDenial(err error) bool {
	return err != nil && strings.Contains(err.Error(), "denied the request")
}

// load creates ConfigMaps in a namespace under the load-labels policy: compliant ones (every
// label k0..k<edits>) must be admitted, violating ones (no label) refused by the policy. Anything
// else is a failed request: an error that is not the policy's denial, or a violating object
// admitted (the policy not enforced).
type load struct {
	cs                    kubernetes.Interface
	ns                    string
	total, failed, denied atomic.Int64
	mu                    sync.Mutex
	failures              []string
	cancel                context.CancelFunc
	wg                    sync.WaitGroup
}

func startLoad(ctx context.Context, cs kubernetes.Interface, ns string, workers int, maxRequests int64, maxDuration time.Duration) *load {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	l := &load{cs: cs, ns: ns, cancel: cancel}
	all := loadLabels("")
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil && l.total.Load() < maxRequests; i++ {
				violate := i%2 == 1
				labels := all
				if violate {
					labels = nil
				}
				err := createConfigMap(ctx, cs, ns, labels)
				if ctx.Err() != nil {
					return
				}
				l.total.Add(1)
				switch {
				case violate && err == nil:
					l.fail("a violating ConfigMap was admitted")
				case violate && isDenial(err):
					l.denied.Add(1)
				case err != nil:
					l.fail(err.Error())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}(w)
	}
	return l
}

// loadLabels returns the labels k0..k<edits> but except.
func loadLabels(except string) map[string]string {
	labels := map[string]string{}
	for i := 0; i <= edits; i++ {
		if k := "k" + strconv.Itoa(i); k != except {
			labels[k] = "v"
		}
	}
	return labels
}

func (l *load) fail(msg string) {
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.failures) < 10 {
		l.failures = append(l.failures, time.Now().UTC().Format("15:04:05.000")+" "+msg)
	}
	l.mu.Unlock()
}

func (l *load) firstFailures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// probe creates ConfigMaps carrying every label but key until one is refused for lacking key
// (the edit is in force), counting failed requests as the load does.
func (l *load) probe(ctx context.Context, key string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	labels := loadLabels(key)
	want := `mandatory label "` + key + `" is missing`
	for time.Since(start) < timeout {
		err := createConfigMap(ctx, l.cs, l.ns, labels)
		l.total.Add(1)
		switch {
		case err != nil && strings.Contains(err.Error(), want):
			return time.Since(start), nil
		case err != nil:
			l.fail("probe: " + err.Error())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no request refused for lacking %s after %v", key, timeout)
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

func parseCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemData)
	if b == nil {
		t.Fatalf("no PEM certificate in %q", pemData)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// servedCert returns the certificate a replica presents for serverName.
func servedCert(port int32, serverName string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", port),
		&tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // reading the certificate only
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// controllerProc is a running `tollgate controller` process, its output in the file log.
type controllerProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	log  string
}

// startControllerProc starts env.bin with args, its command line and output written to the file
// log.
func startControllerProc(log string, args []string) (*controllerProc, error) {
	logf, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "+ %s %s\n", env.bin, strings.Join(args, " "))
	cmd := exec.Command(env.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &controllerProc{cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// ready returns nil if the controller's /readyz on probe (host:port) answers 200, an errStop if
// the process has exited.
func (p *controllerProc) ready(probe string) error {
	select {
	case <-p.done:
		return errStop{fmt.Errorf("the controller exited:\n%s", tailFile(p.log, 40))}
	default:
	}
	resp, err := http.Get("http://" + probe + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("controller /readyz: %s", resp.Status)
	}
	return nil
}

// stop stops the process: SIGTERM, then SIGKILL after 15 s.
func (p *controllerProc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("the controller did not stop within 15 s of SIGTERM (killed)")
	}
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
