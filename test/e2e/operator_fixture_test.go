package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// The TestOperator* tests share one operator: the chart installed with helm once, by the first
// of them that runs, with the namespaces they use. Each test then establishes the rest of what it
// needs itself (the PolicyServer and its 2 replicas, the policies it relies on, in the state it
// relies on), so that it runs alone (E2E_RUN='^TestOperatorX$') and fails for its own reason.
// TestOperatorUninstall, the last of them in the file, removes the operator; so does a test that
// starts a controller of its own (startOperator, startControllerProc), and TestMain after the
// tests when TestOperatorUninstall was not selected: two controllers must never share the cluster.
var sharedOp struct {
	sync.Mutex
	op    *operator
	tried bool // an install began: there may be a release and objects to remove
}

// operatorNamespaces are the namespaces the TestOperator* tests create objects in.
var operatorNamespaces = []string{"e2e-a", "e2e-b", "e2e-c", "e2e-d", "e2e-load", "e2e-broken", shadowNS, compareNS}

// operatorObjects are the objects the TestOperator* tests may create (Kind/name or
// Kind/namespace/name), deleted before the operator is uninstalled so that the controller honours
// their finalizers.
var operatorObjects = []string{"ClusterAdmissionPolicy/required-labels", "ClusterAdmissionPolicy/capabilities-drop",
	"ClusterAdmissionPolicy/monitor-labels", "ClusterAdmissionPolicy/load-labels", "ClusterAdmissionPolicy/broken-module",
	"ClusterAdmissionPolicy/bad-settings", "ClusterAdmissionPolicy/" + shadowPolicy, "ClusterAdmissionPolicy/" + comparePolicy,
	"AdmissionPolicy/e2e-b/team-labels", "ClusterAdmissionPolicyGroup/owner-or-team",
	"PolicyServer/" + psName}

// operatorFixture returns the operator the TestOperator* tests share, installing it (and their
// namespaces) when none is; it prints the controller's log when t fails.
func operatorFixture(t *testing.T) *operator {
	t.Helper()
	sharedOp.Lock()
	defer sharedOp.Unlock()
	if sharedOp.op == nil {
		if sharedOp.tried {
			t.Fatal("the operator the TestOperator tests share failed to install in an earlier test (its log says why)")
		}
		sharedOp.tried = true
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		op := installOperator(t, ctx)
		for _, ns := range operatorNamespaces {
			if err := ensureNamespace(ctx, op.cs, ns); err != nil {
				t.Fatal(err)
			}
		}
		sharedOp.op = op
	}
	t.Cleanup(func() { logController(t) })
	return sharedOp.op
}

// releaseSharedOperator removes the operator the TestOperator* tests share, if there is one: its
// objects deleted while the controller runs (a finalizer not honoured within a minute is an error,
// and is stripped), then helm uninstall.
func releaseSharedOperator() error {
	sharedOp.Lock()
	defer sharedOp.Unlock()
	if !sharedOp.tried {
		return nil
	}
	var errs []error
	if op := sharedOp.op; op != nil {
		if err := op.deleteObjects(operatorObjects); err != nil {
			errs = append(errs, err)
		}
	}
	sharedOp.op, sharedOp.tried = nil, false
	if err := uninstallOperator(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// startOperator installs an operator for t alone (see installOperator), first removing the one the
// TestOperator* tests share; the test's cleanup uninstalls it (after the test's own cleanups, which
// delete its policies and PolicyServers while the controller still honours their finalizers),
// printing the controller's log when the test failed.
func startOperator(t *testing.T, ctx context.Context, helmArgs ...string) *operator {
	t.Helper()
	if err := releaseSharedOperator(); err != nil {
		t.Fatalf("removing the operator of the TestOperator tests first: %v", err)
	}
	t.Cleanup(func() {
		logController(t)
		if err := uninstallOperator(); err != nil {
			t.Error(err)
		}
	})
	return installOperator(t, ctx, helmArgs...)
}

// installOperator installs charts/tollgate with helm as a user does (the controller's image from
// the cluster's registry, short certificate lifetimes so that rotations happen during the tests)
// and waits for the controller pod to be Ready.
func installOperator(t *testing.T, ctx context.Context, helmArgs ...string) *operator {
	t.Helper()
	c := env.cluster
	op := &operator{cs: c.Client, requiredWasm: policyRef(t, "required-labels"), capsWasm: policyRef(t, "capabilities-drop")}
	var err error
	if op.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		t.Fatal(err)
	}
	extra, _ := json.Marshal([]string{
		"--status-poll-interval=200ms",
		// Short certificates: a server certificate is renewed every 30 s, the CA 90 s after it
		// was made, so the tests see both rotations.
		"--cert-validity=2m", "--cert-renew-before=90s", "--cert-check-interval=5s", "--ca-propagation-delay=5s",
		"--ca-validity=3m",
	})
	begin := time.Now()
	args := append([]string{"install", release, filepath.Join(env.root, "charts", "tollgate"),
		"--namespace", controllerNS, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "image.repository=" + strings.TrimSuffix(env.image, ":"+e2eImageTag), "--set", "image.tag=" + e2eImageTag,
		"--set", "policyServer.enabled=false", "--set", "caSecret=" + caSecret, "--set-json", "extraArgs=" + string(extra)}, helmArgs...)
	out, err := helm(ctx, args...)
	if err != nil {
		t.Fatalf("helm install: %v\n%s%s", err, out, podsStateOf(ctx, op.cs, controllerNS, controllerName))
	}
	t.Logf("helm install: controller Ready %v after the install began", time.Since(begin).Round(time.Millisecond))
	pods, err := serverPods(ctx, op.cs, controllerNS, controllerName)
	if err != nil || len(pods) != 1 {
		t.Fatalf("controller pods: %v (%v)", pods, err)
	}
	if pods[0].Spec.Containers[0].Image != env.image || pods[0].Spec.ServiceAccountName != controllerName {
		t.Errorf("controller pod runs %s as %s, want %s as %s", pods[0].Spec.Containers[0].Image, pods[0].Spec.ServiceAccountName, env.image, controllerName)
	}
	return op
}

// uninstallOperator runs helm uninstall and waits for the release's objects to go.
func uninstallOperator() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := helm(ctx, "uninstall", release, "--namespace", controllerNS, "--wait", "--timeout", "90s", "--ignore-not-found"); err != nil {
		return fmt.Errorf("helm uninstall: %v\n%s", err, out)
	}
	return nil
}

// logController prints the controller's log when t failed.
func logController(t *testing.T) {
	if !t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs, _, _ := env.cluster.Kubectl(ctx, "logs", "-n", controllerNS, "deploy/"+controllerName, "--tail=60")
	t.Logf("--- controller log (last 60 lines) ---\n%s", logs)
}

// policyServer applies the PolicyServer the TestOperator* tests use (2 replicas, minAvailable: 1,
// tollgate's image), which also undoes a test's edits of its replicas or image, and waits until
// the controller has written its Deployment, the 2 replicas are Ready and no other pod is left,
// and its conditions are True. It returns the replicas.
func (op *operator) policyServer(t *testing.T, ctx context.Context) []corev1.Pod {
	t.Helper()
	apply(t, ctx, policyServerYAML(psName, 2, "  minAvailable: 1\n"))
	begin := time.Now()
	eventually(t, time.Minute, func() error {
		d, err := op.cs.AppsV1().Deployments(controllerNS).Get(ctx, psObject, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != env.image {
			return fmt.Errorf("the Deployment has %d replicas of %s, want 2 of %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image, env.image)
		}
		return nil
	})
	pods, err := waitServerPods(ctx, op.cs, controllerNS, psObject, 2, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2 replicas Ready %v after the PolicyServer was applied", time.Since(begin).Round(time.Millisecond))
	eventually(t, 30*time.Second, func() error {
		ps, err := op.dyn.Resource(policyGVR["PolicyServer"]).Get(ctx, psName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionsTrue(ps, "DeploymentReconciled", "ServiceReconciled", "ConfigMapReconciled", "CertSecretReconciled", "RBACReconciled")
	})
	return pods
}

// requiredLabels applies required-labels (a Pod needs an owner label, in every namespace) and
// waits until it refuses a Pod without one with its message and is active; it returns how long
// the refusal took from the apply.
func (op *operator) requiredLabels(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
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
	enforced := time.Since(start)
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "required-labels", "active", 30*time.Second)
	return enforced
}

// capabilitiesDrop applies the mutating capabilities-drop and waits until it is active and a Pod
// created in e2e-a is stored with its patch (BPF dropped).
func (op *operator) capabilitiesDrop(t *testing.T, ctx context.Context) {
	t.Helper()
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
		if sc := p.Spec.Containers[0].SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "BPF") {
			return fmt.Errorf("stored Pod %s has securityContext %+v, want BPF dropped", name, sc)
		}
		return nil
	})
}

// loadPolicy applies load-labels (a ConfigMap in e2e-load needs the label key) and waits until it
// is active and in force: a ConfigMap with every load label but key is refused for lacking key,
// one with all of them admitted.
func (op *operator) loadPolicy(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	apply(t, ctx, policyYAML("ClusterAdmissionPolicy", "", "load-labels", policySpec{
		module: op.requiredWasm, settings: `{"mandatory_labels": ["` + key + `"]}`, resources: "configmaps", namespace: "e2e-load",
	}))
	op.waitStatus(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", "active", 60*time.Second)
	eventually(t, 30*time.Second, func() error {
		if err := createConfigMap(ctx, op.cs, "e2e-load", loadLabels(key)); err == nil || !strings.Contains(err.Error(), `mandatory label "`+key+`" is missing`) {
			return fmt.Errorf("load-labels requiring %s: want a denial naming it, got %v", key, err)
		}
		return createConfigMap(ctx, op.cs, "e2e-load", loadLabels(""))
	})
}

// deleteAll deletes objects given as Kind/name or Kind/namespace/name and waits for them to go;
// one still there after a minute is reported and its finalizers are removed.
func (op *operator) deleteAll(t *testing.T, objs []string) {
	t.Helper()
	if err := op.deleteObjects(objs); err != nil {
		t.Error(err)
	}
}
