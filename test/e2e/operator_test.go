package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
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

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
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

// operator is the running operator: the chart installed with helm, the controller a pod of
// tollgate's image, the policy servers Deployments the kubelet runs.
type operator struct {
	cs                     kubernetes.Interface
	dyn                    dynamic.Interface
	requiredWasm, capsWasm string // registry:// URIs the servers' pods fetch
}

// The chart's release: its controller Deployment is <release>-controller.
const (
	release        = "tollgate"
	controllerName = release + "-controller"
)

// The TestOperator* tests run the operator's scenarios on the real node: the chart installed with
// helm (operatorFixture, shared by them), the controller a pod of tollgate's image with its
// ServiceAccount and in-cluster config, the policy servers pods of that image that the kubelet runs
// as uid 65532 with a read-only root filesystem. Each establishes what it needs (op.policyServer,
// op.requiredLabels, op.loadPolicy...), so that each runs alone and fails for its own reason;
// they run in the file's order, TestOperatorUninstall last.

// operatorContext is the context of one TestOperator* test: the longest of them (the certificate
// rotation, the scaling) take a few minutes.
func operatorContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestOperatorPolicyServer: a PolicyServer with 2 replicas; the pods run the image as uid 65532
// with a read-only root filesystem, its certificate names its Service, its ServiceAccount may read
// and watch its ConfigMap and nothing else.
func TestOperatorPolicyServer(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	pods := op.policyServer(t, ctx)
	for _, p := range pods {
		t.Logf("replica %s ip %s webhook %d probes %d", p.Name, p.Status.PodIP, containerPort(&p, "policy-server"), containerPort(&p, "readiness"))
		// The kubelet runs the image as the Deployment says: uid 65532, read-only root.
		sc := p.Spec.Containers[0].SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container securityContext %+v, want a read-only root filesystem", p.Name, sc)
		}
	}
	checkUID(t, ctx, pods[0], 65532)
	// The certificate names the Service, and the replicas serve it.
	sec, err := op.cs.CoreV1().Secrets(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crt := parseCert(t, sec.Data["tls.crt"])
	if want := psObject + "." + controllerNS + ".svc"; !slices.Contains(crt.DNSNames, want) {
		t.Errorf("certificate names %v, want %s", crt.DNSNames, want)
	}
	// The replicas reach the API as their ServiceAccount (a TokenRequest token): their
	// Role lets them read and watch their ConfigMap, and nothing else.
	scs, err := serviceAccountClient(ctx, &pods[0])
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
}

// TestOperatorValidatingPolicy: a validating ClusterAdmissionPolicy refuses a violating Pod with
// its message, admits a compliant one, and has its webhook configuration.
func TestOperatorValidatingPolicy(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	enforced := op.requiredLabels(t, ctx)
	t.Logf("required-labels: apply to enforce %v", enforced.Round(time.Millisecond))
	if err := createPod(ctx, op.cs, "e2e-a", map[string]string{"owner": "me"}, nil); err != nil {
		t.Fatalf("a Pod with owner: %v", err)
	}
	if _, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "clusterwide-required-labels", metav1.GetOptions{}); err != nil {
		t.Errorf("webhook configuration: %v", err)
	}
}

// TestOperatorMutatingPolicy: a mutating policy's patch is in the stored Pod.
func TestOperatorMutatingPolicy(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.capabilitiesDrop(t, ctx)
	if _, err := op.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "clusterwide-capabilities-drop", metav1.GetOptions{}); err != nil {
		t.Errorf("mutating webhook configuration: %v", err)
	}
}

// TestOperatorAdmissionPolicyNamespace: an AdmissionPolicy affects only its namespace.
func TestOperatorAdmissionPolicyNamespace(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
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
}

// TestOperatorMonitorMode: a policy in monitor mode lets everything through; the same policy in
// protect mode refuses (so the pass meant something).
func TestOperatorMonitorMode(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
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
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "monitor-labels", `{"mode": "protect"}`)
	eventually(t, 30*time.Second, func() error {
		if err := createConfigMap(ctx, op.cs, "e2e-c", nil); err == nil || !isDenial(err) {
			return fmt.Errorf("protect mode: want a denial, got %v", err)
		}
		return nil
	})
}

// TestOperatorPolicyGroup: a policy group decides by its expression, and by the new one after an
// edit.
func TestOperatorPolicyGroup(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
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
      module: `+op.requiredWasm+`
      settings: {mandatory_labels: [owner]}
    team:
      module: `+op.requiredWasm+`
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
	eventually(t, 30*time.Second, func() error {
		if err := createConfigMap(ctx, op.cs, "e2e-d", map[string]string{"team": "t"}); err == nil || !isDenial(err) {
			return fmt.Errorf("team only under owner() && team(): want a denial, got %v", err)
		}
		return nil
	})
	if err := createConfigMap(ctx, op.cs, "e2e-d", map[string]string{"team": "t", "owner": "o"}); err != nil {
		t.Errorf("both labels under owner() && team(): %v", err)
	}
}

// TestOperatorEditsUnderLoad: 20 settings edits of a policy under load (2 workers creating
// ConfigMaps): apply-to-enforce per edit, no failed request, the same containers with no restart.
func TestOperatorEditsUnderLoad(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	pods0, err := serverPods(ctx, op.cs, controllerNS, psObject)
	if err != nil {
		t.Fatal(err)
	}
	ids0, restarts0 := containerIDs(pods0)
	l := startLoad(ctx, op.cs, "e2e-load", 2, 20000, 5*time.Minute)
	time.Sleep(time.Second)
	p50, pmax := switchUnderLoad(t, l, "apply-to-enforce on real pods", "edits", edits, func(i int) string {
		key := "k" + strconv.Itoa(i+1)
		op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["`+key+`"]}}`)
		return key
	})
	if p50 > 500*time.Millisecond || pmax > 2*time.Second {
		t.Errorf("apply-to-enforce p50 %v, max %v: targets 500 ms and 2 s", p50, pmax)
	}
	pods1, err := serverPods(ctx, op.cs, controllerNS, psObject)
	if err != nil {
		t.Fatal(err)
	}
	if ids1, restarts1 := containerIDs(pods1); fmt.Sprint(ids1) != fmt.Sprint(ids0) || restarts1 != restarts0 {
		t.Errorf("policy server containers changed during the edits (want no restart): %v (restarts %d) -> %v (restarts %d)", ids0, restarts0, ids1, restarts1)
	}
}

// TestOperatorBrokenPolicies: a module that cannot be fetched and settings the policy rejects: the
// status says why, no webhook, the other policies keep working and taking edits.
func TestOperatorBrokenPolicies(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.requiredLabels(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	t.Cleanup(func() {
		op.deleteAll(t, []string{"ClusterAdmissionPolicy/broken-module", "ClusterAdmissionPolicy/bad-settings"})
	})
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "broken-module", policySpec{
		module: "registry://" + cluster.PodRegistryHost + "/e2e/policies/nonexistent:v1", resources: "configmaps", namespace: "e2e-broken",
	}))
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "bad-settings", policySpec{
		module: op.requiredWasm, settings: `{"required_labels": ["x"]}`, resources: "configmaps", namespace: "e2e-broken",
	}))
	for name, want := range map[string]string{"broken-module": "e2e/policies/nonexistent:v1", "bad-settings": `unknown settings field "required_labels"`} {
		eventually(t, 60*time.Second, func() error {
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
	eventually(t, 30*time.Second, func() error {
		err := createConfigMap(ctx, op.cs, "e2e-load", loadLabels(""))
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
}

// TestOperatorCertificateRotation: the server certificate and the CA renewed under load, every
// replica serving the new certificate (read from the pod's IP) and every webhook trusting the new
// CA; no failed request, no restart.
func TestOperatorCertificateRotation(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	leaf0, ca0 := op.certs(t, ctx)
	l := startLoad(ctx, op.cs, "e2e-load", 2, 50000, 5*time.Minute)
	defer l.stop()
	// The server certificate is renewed every 30 s (--cert-validity=2m, --cert-renew-before=90s)
	// and the CA 90 s after the controller made it (--ca-validity=3m): wait for a server
	// certificate signed by a new CA.
	var leaf, ca *x509.Certificate
	eventually(t, 3*time.Minute, func() error {
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
	eventually(t, 30*time.Second, func() error {
		pods, err := serverPods(ctx, op.cs, controllerNS, psObject)
		if err != nil {
			return err
		}
		for _, p := range pods {
			got, err := servedCert(p.Status.PodIP, containerPort(&p, "policy-server"), psObject+"."+controllerNS+".svc")
			if err != nil {
				return err
			}
			if got.CheckSignatureFrom(ca) != nil {
				return fmt.Errorf("%s serves serial %s, not signed by the new CA", p.Name, got.SerialNumber)
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
	t.Logf("during the rotation: %d requests, %d failed", l.total.Load(), l.failed.Load())
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d failed requests during the rotation; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
	}
	if l.total.Load() == 0 {
		t.Error("no request was made")
	}
	if restarts, why, err := tollgateRestarts(ctx, op.cs, controllerNS); err != nil || restarts != 0 {
		t.Errorf("restarts during the rotation: %d: %s (%v)", restarts, why, err)
	}
}

// TestOperatorContainerKill: a policy server's container killed with SIGKILL under load: the other
// replica answers, the kubelet restarts the container, it is Ready again, and no request fails once
// it is back. The killed pod is deleted afterwards (its replacement has no restart), so that the
// tests after it start from replicas that never restarted.
func TestOperatorContainerKill(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	pods := op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	victim := pods[0]
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := op.cs.CoreV1().Pods(controllerNS).Delete(cctx, victim.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the killed pod %s: %v", victim.Name, err)
			return
		}
		if _, err := waitServerPods(cctx, op.cs, controllerNS, psObject, 2, 2*time.Minute); err != nil {
			t.Errorf("after deleting the killed pod %s: %v", victim.Name, err)
		}
	})
	procs := podProcesses(string(victim.UID))
	if len(procs) != 1 {
		t.Fatalf("pod %s: want its one server process, found %v", victim.Name, procs)
	}
	l := startLoad(ctx, op.cs, "e2e-load", 2, 20000, 2*time.Minute)
	defer l.stop()
	time.Sleep(2 * time.Second)
	before := l.total.Load() - l.failed.Load()
	killed := time.Now()
	if err := syscall.Kill(procs[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The other replica keeps answering while the kubelet restarts the killed container.
	time.Sleep(3 * time.Second)
	if during := l.total.Load() - l.failed.Load() - before; during == 0 {
		t.Errorf("no request succeeded in the 3 s after the kill")
	}
	eventually(t, 90*time.Second, func() error {
		p, err := op.cs.CoreV1().Pods(controllerNS).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 1 || !podReady(p) {
			return fmt.Errorf("killed pod %s not back yet%s", victim.Name, podsStateOf(ctx, op.cs, controllerNS, psObject))
		}
		return nil
	})
	back := time.Since(killed)
	failedAtKill := l.failed.Load()
	// Once it is back, both replicas serve again without a failure.
	time.Sleep(3 * time.Second)
	l.stop()
	line := fmt.Sprintf("e2e: container kill: back Ready after %v; %d requests, %d failed around the kill, %d failed after it was back",
		back.Round(time.Millisecond), l.total.Load(), failedAtKill, l.failed.Load()-failedAtKill)
	t.Log(line)
	fmt.Println(line)
	if n := l.failed.Load() - failedAtKill; n != 0 {
		t.Errorf("%d failed requests after the killed replica was back; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
	}
}

// TestOperatorScaleAndImage: the PolicyServer scaled 2 -> 1 -> 3 -> 1, then its image changed (a
// rolling update; its PodDisruptionBudget exists), under load: no failed request.
func TestOperatorScaleAndImage(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	if _, err := op.cs.PolicyV1().PodDisruptionBudgets(controllerNS).Get(ctx, psObject, metav1.GetOptions{}); err != nil {
		t.Fatalf("the PolicyServer's PodDisruptionBudget (minAvailable: 1): %v", err)
	}
	image2 := cluster.RegistryHost + "/tollgate:" + e2eImageTag + "-2"
	if _, err := cluster.PushLayout(ctx, os.Getenv("TOLLGATE_IMAGE_LAYOUT"), image2); err != nil {
		t.Fatal(err)
	}
	l := startLoad(ctx, op.cs, "e2e-load", 2, 50000, 5*time.Minute)
	defer l.stop()
	for _, step := range []struct {
		patch string
		n     int
	}{
		{`{"replicas": 1}`, 1},
		{`{"replicas": 3}`, 3},
		{`{"replicas": 1}`, 1},
		{`{"image": "` + image2 + `"}`, 1},
	} {
		begin := time.Now()
		op.patchSpec(t, ctx, "PolicyServer", "", psName, step.patch)
		// The controller writes the Deployment first: until then the old rollout looks done.
		eventually(t, time.Minute, func() error {
			d, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != int32(step.n) || (strings.Contains(step.patch, "image") && d.Spec.Template.Spec.Containers[0].Image != image2) {
				return fmt.Errorf("the Deployment does not have %s yet", step.patch)
			}
			return nil
		})
		pods, err := waitServerPods(ctx, op.cs, controllerNS, psObject, step.n, 3*time.Minute)
		if err != nil {
			t.Fatalf("after %s: %v", step.patch, err)
		}
		t.Logf("%s: %d replica(s) Ready after %v", step.patch, step.n, time.Since(begin).Round(time.Millisecond))
		if strings.Contains(step.patch, "image") && pods[0].Spec.Containers[0].Image != image2 {
			t.Errorf("pod %s runs %s, want %s", pods[0].Name, pods[0].Spec.Containers[0].Image, image2)
		}
		time.Sleep(2 * time.Second) // requests against the new set of replicas
	}
	l.stop()
	line := fmt.Sprintf("e2e: scale 2->1->3->1 and image rollout: %d requests, %d failed", l.total.Load(), l.failed.Load())
	t.Log(line)
	fmt.Println(line)
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d failed requests; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
	}
}

// TestOperatorControllerRestart: the controller pod deleted and recreated: the new pod becomes the
// leader, finishes its first pass and writes no object that did not change; then it takes an edit.
func TestOperatorControllerRestart(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k0")
	old, err := serverPods(ctx, op.cs, controllerNS, controllerName)
	if err != nil || len(old) != 1 {
		t.Fatalf("controller pods %v (%v)", old, err)
	}
	// The PolicyServer's rollout settles first, and the old controller reports it in the
	// policies' status: a status that changes after the restart because the world did (a
	// replica terminated meanwhile) is not a write to an unchanged object.
	eventually(t, time.Minute, func() error {
		d, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if st.Replicas != *d.Spec.Replicas || st.UpdatedReplicas != st.Replicas || st.ReadyReplicas != st.Replicas ||
			(st.TerminatingReplicas != nil && *st.TerminatingReplicas != 0) {
			return fmt.Errorf("Deployment %s not settled: %+v", psObject, st)
		}
		served := fmt.Sprintf("served by %d replica(s) of PolicyServer %q", st.ReadyReplicas, psName)
		for _, kind := range fleetPolicyKinds {
			l, err := op.dyn.Resource(policyGVR[kind]).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range l.Items {
				msgs := conditionMessages(&l.Items[i])
				if strings.Contains(msgs, fmt.Sprintf("replica(s) of PolicyServer %q", psName)) && !strings.Contains(msgs, served) {
					return fmt.Errorf("%s %s: %s, want %q", kind, l.Items[i].GetName(), msgs, served)
				}
			}
		}
		return nil
	})
	before, err := snapshot(ctx, op.dyn, controllerNS)
	if err != nil {
		t.Fatal(err)
	}
	if err := op.cs.CoreV1().Pods(controllerNS).Delete(ctx, old[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	var pods []corev1.Pod
	eventually(t, 2*time.Minute, func() error {
		pods, err = waitServerPods(ctx, op.cs, controllerNS, controllerName, 1, time.Second)
		if err == nil && pods[0].Name == old[0].Name {
			return fmt.Errorf("the old controller pod is still there")
		}
		return err
	})
	t.Logf("new controller pod %s Ready %v after the old one was deleted", pods[0].Name, time.Since(begin).Round(time.Millisecond))
	// It becomes the leader (the Lease names it) and finishes its first pass over every object
	// (each controller has reconciled, its queue is empty and no worker is busy), and writes
	// nothing; then it still works. Counting the writes of a controller that does not hold the
	// Lease yet would count nothing and pass.
	metricsAddr := net.JoinHostPort(pods[0].Status.PodIP, "8088")
	leader, err := waitLeader(ctx, op.cs, pods[0].Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new controller pod %s holds the Lease %s/%s (%s) %v after the old one was deleted", pods[0].Name, controllerNS, leaseName, leader, time.Since(begin).Round(time.Millisecond))
	pass, err := waitFirstPass(ctx, op.dyn, metricsAddr, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new controller's first pass done %v after the old one was deleted: %s", time.Since(begin).Round(time.Millisecond), pass)
	after, err := snapshot(ctx, op.dyn, controllerNS)
	if err != nil {
		t.Fatal(err)
	}
	// Only the controller's own writes count (field managers "tollgate", its Updates, and
	// "tollgate-controller", its server-side applies): kube-controller-manager keeps writing
	// the Deployments' and PDBs' status, and certificates are renewed on their schedule
	// (--cert-renew-before=90s of a 2m certificate: every 30 s; of a 3m CA: 90 s after it was
	// made, and then every webhook's caBundle follows).
	checked := time.Now()
	due := func(key, field string) bool {
		o := before[key]
		if o == nil {
			return false
		}
		crt, _, _ := unstructured.NestedString(o.Object, "data", field)
		der, err := base64.StdEncoding.DecodeString(crt)
		return err == nil && parseCert(t, der).NotAfter.Add(-90*time.Second).Before(checked)
	}
	secret := "secrets " + controllerNS + "/" + psObject + ":"
	caKey := "secrets " + controllerNS + "/" + caSecret
	caDue := due(caKey, "ca.crt")
	certDue := caDue || due("secrets "+controllerNS+"/"+psObject, "tls.crt")
	onlyCABundle := func(c string) bool {
		_, paths, ok := strings.Cut(c, "; changed: ")
		if !ok || !strings.Contains(c, "webhookconfigurations ") {
			return false
		}
		for _, p := range strings.Split(paths, ", ") {
			if !strings.HasPrefix(p, ".metadata.generation ") && !strings.HasSuffix(p, ".clientConfig.caBundle") {
				return false
			}
		}
		return true
	}
	var changed []string
	for _, c := range diffSnapshots(before, after) {
		ours := strings.Contains(c, "last writer tollgate ") || strings.Contains(c, "last writer tollgate-controller ")
		renewal := (certDue && strings.HasPrefix(c, secret)) || (caDue && (strings.HasPrefix(c, caKey+":") || onlyCABundle(c)))
		if !ours || renewal {
			t.Logf("not the controller's restart: %s", c)
			continue
		}
		changed = append(changed, c)
	}
	if len(changed) > 0 {
		t.Errorf("the new controller changed %d unchanged objects:\n%s", len(changed), strings.Join(changed, "\n"))
	}
	if m, err := scrapeMetrics(metricsAddr); err != nil {
		t.Errorf("controller metrics: %v", err)
	} else {
		n, by := nonGETRequests(m)
		t.Logf("the new controller's writes: %.0f non-GET requests [%s] (the leader election Lease is one of them)", n, by)
	}
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["after-restart"]}}`)
	eventually(t, 30*time.Second, func() error {
		err := createConfigMap(ctx, op.cs, "e2e-load", loadLabels(""))
		if err == nil || !strings.Contains(err.Error(), `"after-restart"`) {
			return fmt.Errorf("an edit after the controller's restart: want a denial naming after-restart, got %v", err)
		}
		return nil
	})
}

// TestOperatorNoRestarts: no tollgate container restarted (restartCount 0 for every container of
// the namespace) over the TestOperator* tests before it; the container killed on purpose was
// replaced by TestOperatorContainerKill.
func TestOperatorNoRestarts(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	n, why, err := tollgateRestarts(ctx, op.cs, controllerNS)
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("e2e: tollgate container restarts: %d (the container killed on purpose was replaced)", n)
	fmt.Println(line)
	if n != 0 {
		t.Errorf("%d restarts: %s", n, why)
	}
}

// TestOperatorPolicyDeletion: deleting a mutating policy removes its webhook, and Pods are no longer
// mutated.
func TestOperatorPolicyDeletion(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.capabilitiesDrop(t, ctx) // it mutates: its deletion below means something
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
}

// TestOperatorPolicyServerDeletion: deleting the PolicyServer removes its webhooks and objects (the
// garbage collector its pods and endpoint slices); the policies stay, without a server.
func TestOperatorPolicyServerDeletion(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.requiredLabels(t, ctx) // active, refusing: that it stops below means something
	d, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podSel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := waitPodsGone(ctx, op.cs, controllerNS, podSel, time.Minute); err != nil {
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
}

// TestOperatorUninstall removes the operator the TestOperator* tests share as a user does (the last
// of them; see operatorFixture): the objects they made are deleted while the controller runs (their
// finalizers honoured within a minute), then helm uninstall leaves no controller and no webhook
// calling its namespace.
func TestOperatorUninstall(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	if err := releaseSharedOperator(); err != nil {
		t.Fatal(err)
	}
	if _, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, controllerName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the controller's Deployment is still there (get: %v)", err)
	}
	for _, o := range operatorObjects {
		parts := strings.Split(o, "/")
		var ri dynamic.ResourceInterface = op.dyn.Resource(policyGVR[parts[0]])
		if len(parts) == 3 {
			ri = op.dyn.Resource(policyGVR[parts[0]]).Namespace(parts[1])
		}
		if _, err := ri.Get(ctx, parts[len(parts)-1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s is still there (get: %v)", o, err)
		}
	}
	vw, err := op.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := op.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, w := range vw.Items {
		for _, wh := range w.Webhooks {
			if svc := wh.ClientConfig.Service; svc != nil && svc.Namespace == controllerNS {
				left = append(left, "validatingwebhookconfiguration/"+w.Name)
			}
		}
	}
	for _, w := range mw.Items {
		for _, wh := range w.Webhooks {
			if svc := wh.ClientConfig.Service; svc != nil && svc.Namespace == controllerNS {
				left = append(left, "mutatingwebhookconfiguration/"+w.Name)
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("webhooks calling a service in %s left: %v", controllerNS, left)
	}
}

// helm runs the helm client on the cluster.
func helm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, env.cluster.Binaries.Helm, append([]string{"--kubeconfig", env.cluster.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// podsStateOf describes the pods of Deployment ns/name, for failure messages.
func podsStateOf(ctx context.Context, cs kubernetes.Interface, ns, name string) string {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return podsState(ctx, cs, ns, d.Spec.Selector)
}

// checkUID reads the user the container's processes run as, from the node's /proc (this test
// shares the node's PID namespace): the image's nonroot user.
func checkUID(t *testing.T, ctx context.Context, p corev1.Pod, want int) {
	t.Helper()
	pids := podProcesses(string(p.UID))
	if len(pids) == 0 {
		t.Errorf("no process of pod %s found under /proc", p.Name)
		return
	}
	for _, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" && f[1] != strconv.Itoa(want) {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				t.Errorf("pod %s: process %d (%s) runs as uid %s, want %d", p.Name, pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), f[1], want)
			}
		}
	}
}

// podProcesses lists the processes in the pod's cgroups (the cgroupfs driver names them
// pod<UID>), but the sandbox's pause process.
func podProcesses(uid string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cg), "pod"+uid) && !bytes.HasPrefix(cmd, []byte("/pause")) {
			out = append(out, pid)
		}
	}
	return out
}

// deleteObjects deletes objects given as Kind/name or Kind/namespace/name and waits for them to
// go; one still there after a minute is an error, and its finalizers are removed.
func (op *operator) deleteObjects(objs []string) error {
	var errs []error
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
			errs = append(errs, fmt.Errorf("cleanup: delete %s: %w", o, err))
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
				errs = append(errs, fmt.Errorf("cleanup: %s still there a minute after its deletion (get: %v); removing its finalizers", r.what, err))
				_, _ = r.ri.Patch(ctx, r.name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
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
	server                      string // the PolicyServer; "" is psName
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
	server := psName
	if s.server != "" {
		server = s.server
	}
	m += "spec:\n  policyServer: " + server + "\n  module: " + module + "\n  mutating: " + strconv.FormatBool(s.mutating) + "\n"
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
	eventually(t, timeout, func() error {
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
		Spec: corev1.PodSpec{Containers: []corev1.Container{c},
			// Admission is what the tests look at: the pod is never scheduled, so the node does
			// not try to pull an image nothing here serves.
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "e2e.tollgate.dev/never"}}},
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

// load creates ConfigMaps in a namespace under the load-labels policy (startLoad; or other
// objects under another policy, startLoadOf): compliant ones (every label k0..k<edits>) must be
// admitted, violating ones (no label) refused by the policy. Anything else is a failed request:
// an error that is not the policy's denial, or a violating object admitted (the policy not
// enforced).
type load struct {
	cs kubernetes.Interface
	ns string
	// create makes one object with labels; labels are a compliant object's (startLoad: a
	// ConfigMap in ns, the labels k0..k<edits>).
	create                func(ctx context.Context, labels map[string]string) error
	labels                map[string]string
	total, failed, denied atomic.Int64
	mu                    sync.Mutex
	failures              []string
	cancel                context.CancelFunc
	wg                    sync.WaitGroup
}

func startLoad(ctx context.Context, cs kubernetes.Interface, ns string, workers int, maxRequests int64, maxDuration time.Duration) *load {
	create := func(ctx context.Context, labels map[string]string) error { return createConfigMap(ctx, cs, ns, labels) }
	return startLoadOf(ctx, cs, ns, create, loadLabels(""), workers, maxRequests, maxDuration)
}

// startLoadOf is startLoad with other objects: create makes one (in ns), all are the labels of
// a compliant one; a violating one has no label.
func startLoadOf(ctx context.Context, cs kubernetes.Interface, ns string, create func(context.Context, map[string]string) error,
	all map[string]string, workers int, maxRequests int64, maxDuration time.Duration) *load {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	l := &load{cs: cs, ns: ns, cancel: cancel, create: create, labels: all}
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
				err := create(ctx, labels)
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

// probe creates objects carrying every label of a compliant one but key until one is refused
// for lacking key (the edit is in force), counting failed requests as the load does.
func (l *load) probe(ctx context.Context, key string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	labels := maps.Clone(l.labels)
	delete(labels, key)
	want := `mandatory label "` + key + `" is missing`
	for time.Since(start) < timeout {
		err := l.create(ctx, labels)
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

// switchUnderLoad makes n changes while l runs: change(i) (i from 0) makes the i-th and returns the
// label key the policy then demands; each change is timed from its start until l's probe finds it
// enforced (t fails at once after 30 s). Then l stops, the line "e2e: <what> p50=... max=...
// <unit>=n failed_requests=... requests=..." is printed, and a failed request fails t. It returns
// the p50 and the max.
func switchUnderLoad(t *testing.T, l *load, what, unit string, n int, change func(i int) string) (p50, pmax time.Duration) {
	t.Helper()
	var took []time.Duration
	for i := range n {
		t0 := time.Now()
		key := change(i)
		if _, err := l.probe(t.Context(), key, 30*time.Second); err != nil {
			l.stop()
			t.Fatalf("%s %d to %s: %v (after %v)", unit, i+1, key, err, time.Since(t0))
		}
		took = append(took, time.Since(t0))
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	l.stop()
	p50, pmax = percentile(took, 50), percentile(took, 100)
	line := fmt.Sprintf("e2e: %s p50=%v max=%v %s=%d failed_requests=%d requests=%d",
		what, p50.Round(time.Millisecond), pmax.Round(time.Millisecond), unit, len(took), l.failed.Load(), l.total.Load())
	t.Log(line)
	fmt.Println(line)
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d failed requests; first: %s", n, strings.Join(l.firstFailures(), "\n  "))
	}
	return p50, pmax
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
func servedCert(ip string, port int32, serverName string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", net.JoinHostPort(ip, strconv.Itoa(int(port))),
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
// log, first removing the operator the TestOperator* tests share.
func startControllerProc(log string, args []string) (*controllerProc, error) {
	// Two controllers must not share the cluster.
	if err := releaseSharedOperator(); err != nil {
		return nil, fmt.Errorf("removing the operator of the TestOperator tests first: %w", err)
	}
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

// leaseName is the controller's leader election Lease (--leader-election-id's default), in
// controllerNS.
const leaseName = "tollgate-controller"

// waitLeader waits until the controller's Lease names pod as its holder and returns the holder's
// identity. controller-runtime's identity is the hostname (a pod's name) then "_" and a UUID.
func waitLeader(ctx context.Context, cs kubernetes.Interface, pod string, timeout time.Duration) (string, error) {
	var holder string
	err := poll(ctx, timeout, 500*time.Millisecond, func() error {
		l, err := cs.CoordinationV1().Leases(controllerNS).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if !strings.HasPrefix(holder, pod+"_") {
			return fmt.Errorf("the Lease %s/%s is held by %q, not by the new controller pod %s", controllerNS, leaseName, holder, pod)
		}
		return nil
	})
	return holder, err
}

// waitFirstPass waits until the controller at addr has done its first pass over the objects
// there are: each kind's controller (named after the kind in lower case) has reconciled at least
// as often as there are objects of that kind (controller_runtime_reconcile_total), no queue holds
// work (workqueue_depth) and no worker is busy (controller_runtime_active_workers), at one scrape.
// It does not wait for reconciles to stop: the certificates' short lifetimes in this test and the
// Deployments' status keep some coming. It returns the counts it saw.
func waitFirstPass(ctx context.Context, dyn dynamic.Interface, addr string, timeout time.Duration) (string, error) {
	objects := map[string]int{}
	for kind, gvr := range policyGVR {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		objects[strings.ToLower(kind)] = len(l.Items)
	}
	var seen string
	err := poll(ctx, timeout, 500*time.Millisecond, func() error {
		m, err := scrapeMetrics(addr)
		if err != nil {
			return err
		}
		var parts []string
		for c, n := range objects {
			got := m.sum("controller_runtime_reconcile_total", map[string]string{"controller": c})
			if got < float64(n) {
				return fmt.Errorf("controller %s has reconciled %.0f times for %d objects", c, got, n)
			}
			parts = append(parts, fmt.Sprintf("%s=%.0f/%d", c, got, n))
		}
		if d := m.sum("workqueue_depth", nil); d != 0 {
			return fmt.Errorf("%.0f items queued", d)
		}
		if a := m.sum("controller_runtime_active_workers", nil); a != 0 {
			return fmt.Errorf("%.0f workers busy", a)
		}
		sort.Strings(parts)
		seen = "reconciles/objects " + strings.Join(parts, " ")
		return nil
	})
	return seen, err
}
