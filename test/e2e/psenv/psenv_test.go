// Package psenv_test checks a PolicyServer's spec.env on a real etcd and kube-apiserver (no
// node): tollgate's CRDs and `tollgate controller` as a process, which renders the Deployment by
// server-side apply. The package's unit tests use controller-runtime's fake client, whose
// server-side apply differs from the apiserver's (a duplicate env name fails there with "failed
// to merge config: expected objects with types from the same schema"); this is what the
// apiserver does.
package psenv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

const ns = "tollgate"

// TestPolicyServerEnv: (1) editing spec.env (a value changed, a variable added, one removed,
// all removed) re-renders the Deployment's env each time, and DeploymentReconciled is True for
// the new generation. (2) The CRD refuses a name twice in spec.env, at create and at update, with
// the apiserver's "Duplicate value" on spec.env[1]. (3) A PolicyServer stored with a duplicate
// name under a CRD without that rule (an older tollgate's) gets DeploymentReconciled False and a
// Warning Event naming spec.env and the name, not server-side apply's error about the
// Deployment; its Deployment is not written, the controller keeps running and retries with
// backoff, not in a loop; fixing spec.env writes it.
func TestPolicyServerEnv(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tollgate")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tollgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.LogTail(30))
		}
		_ = c.Stop()
	})
	kubectl := func(stdin string, args ...string) (string, error) {
		out, stderr, err := c.KubectlWithInput(ctx, strings.NewReader(stdin), args...)
		if err != nil {
			return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr)
		}
		return out, nil
	}
	args := []string{"apply", "--server-side"}
	crds, _ := filepath.Glob(filepath.Join(root, "crds", "*.yaml"))
	for _, f := range crds {
		args = append(args, "-f", f)
	}
	if _, err := kubectl("", args...); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl := exec.CommandContext(ctx, bin, "controller", "--namespace="+ns, "--kubeconfig="+c.Kubeconfig, "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--log-level=warn")
	ctrlLog := &testfixture.SyncBuffer{}
	ctrl.Stdout, ctrl.Stderr = ctrlLog, ctrlLog
	if err := ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- ctrl.Wait() }()
	t.Cleanup(func() {
		_ = ctrl.Process.Signal(os.Interrupt)
		<-exited
		if t.Failed() {
			t.Logf("controller's log:\n%s", tail(ctrlLog.String(), 30))
		}
	})

	// waitFor polls f until it returns nil, failing after a minute (a hang, not a slow machine).
	waitFor := func(what string, f func() error) {
		t.Helper()
		var err error
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(50 * time.Millisecond) {
			select {
			case err := <-exited:
				t.Fatalf("%s: the controller exited: %v", what, err)
			default:
			}
			if err = f(); err == nil {
				return
			}
		}
		t.Fatalf("%s: %v", what, err)
	}
	getPS := func(name string) (*v1.PolicyServer, error) {
		out, err := kubectl("", "get", "policyserver", name, "-o", "json")
		if err != nil {
			return nil, err
		}
		ps := &v1.PolicyServer{}
		return ps, json.Unmarshal([]byte(out), ps)
	}
	deploymentEnv := func(name string) (string, error) {
		dep, err := c.Client.AppsV1().Deployments(ns).Get(ctx, v1.PolicyServerObjectName(name), metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		b, err := json.Marshal(dep.Spec.Template.Spec.Containers[0].Env)
		return string(b), err
	}
	// rendered waits for the Deployment's env to be want (JSON) and DeploymentReconciled to be
	// True for the PolicyServer's generation.
	rendered := func(name, want string) {
		t.Helper()
		waitFor("env "+want, func() error {
			got, err := deploymentEnv(name)
			if err != nil || got != want {
				return fmt.Errorf("the Deployment's env %s (%v), want %s", got, err, want)
			}
			ps, err := getPS(name)
			if err != nil {
				return err
			}
			cond := meta.FindStatusCondition(ps.Status.Conditions, v1.ConditionDeploymentReconciled)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != ps.Generation {
				return fmt.Errorf("generation %d, DeploymentReconciled %+v", ps.Generation, cond)
			}
			return nil
		})
	}
	patchEnv := func(name, env string) error {
		_, err := kubectl("", "patch", "policyserver", name, "--type=merge", "-p", `{"spec":{"env":`+env+`}}`)
		return err
	}

	// (1) Edits of spec.env reach the Deployment.
	if _, err := kubectl(`{"apiVersion":"policies.tollgate.dev/v1","kind":"PolicyServer","metadata":{"name":"default"},
	  "spec":{"image":"tollgate:test","replicas":1,"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]}}`, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	rendered("default", `[{"name":"A","value":"1"},{"name":"B","value":"2"}]`)
	for _, env := range []string{
		`[{"name":"A","value":"10"},{"name":"B","value":"2"}]`,                          // changed
		`[{"name":"A","value":"10"},{"name":"B","value":"2"},{"name":"C","value":"3"}]`, // added
		`[{"name":"A","value":"10"},{"name":"C","value":"3"}]`,                          // removed
	} {
		if err := patchEnv("default", env); err != nil {
			t.Fatal(err)
		}
		rendered("default", env)
	}
	if err := patchEnv("default", "null"); err != nil {
		t.Fatal(err)
	}
	rendered("default", "null")

	// (2) The CRD refuses a duplicate name, at create and at update.
	dup := `{"apiVersion":"policies.tollgate.dev/v1","kind":"PolicyServer","metadata":{"name":"dup"},
	  "spec":{"image":"tollgate:test","replicas":1,"env":[{"name":"C","value":"3"},{"name":"C","value":"4"}]}}`
	const refusal = `spec.env[1]: Duplicate value: {"name":"C"}`
	if _, err := kubectl(dup, "apply", "-f", "-"); err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("a PolicyServer with C twice in spec.env: %v, want it refused with %q", err, refusal)
	}
	if err := patchEnv("default", `[{"name":"C","value":"3"},{"name":"C","value":"4"}]`); err == nil || !strings.Contains(err.Error(), refusal) {
		t.Fatalf("an update to C twice in spec.env: %v, want it refused with %q", err, refusal)
	}

	// (3) Under a CRD without the rule (an older tollgate's), the controller says what is wrong.
	const envPath = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/env"
	if _, err := kubectl("", "patch", "crd", "policyservers.policies.tollgate.dev", "--type=json", "-p",
		`[{"op":"remove","path":"`+envPath+`/x-kubernetes-list-type"},{"op":"remove","path":"`+envPath+`/x-kubernetes-list-map-keys"}]`); err != nil {
		t.Fatal(err)
	}
	waitFor("the PolicyServer with C twice stored under the relaxed CRD", func() error {
		_, err := kubectl(dup, "apply", "-f", "-")
		return err
	})
	var cond *metav1.Condition
	waitFor("DeploymentReconciled False", func() error {
		ps, err := getPS("dup")
		if err != nil {
			return err
		}
		if cond = meta.FindStatusCondition(ps.Status.Conditions, v1.ConditionDeploymentReconciled); cond == nil || cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("DeploymentReconciled %+v", cond)
		}
		return nil
	})
	const named = `spec.env: "C" is defined twice (entries 0 and 1)`
	if !strings.Contains(cond.Message, named) || strings.Contains(cond.Message, "typed patch") {
		t.Errorf("DeploymentReconciled's message %q, want it to say %q (not server-side apply's error)", cond.Message, named)
	}
	if _, err := deploymentEnv("dup"); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment of a PolicyServer with C twice: %v, want none", err)
	}
	// Retries back off (controller-runtime's per-object limiter: 5 ms doubling): over 5 s, about
	// ten reconciles and as many Events, which the recorder counts on one Event.
	time.Sleep(5 * time.Second)
	evs, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=dup,type=Warning"})
	if err != nil {
		t.Fatal(err)
	}
	var count int32
	for _, ev := range evs.Items {
		if !strings.Contains(ev.Message, named) {
			t.Errorf("Warning Event %q, want it to say %q", ev.Message, named)
		}
		count += max(ev.Count, 1)
	}
	if count == 0 || count > 30 {
		t.Errorf("%d Warning Events in 5 s: want some, in back-off (at most 30)", count)
	}
	t.Logf("%d Warning Events in the first 5 s: %q", count, cond.Message)
	if err := patchEnv("dup", `[{"name":"C","value":"4"}]`); err != nil {
		t.Fatal(err)
	}
	rendered("dup", `[{"name":"C","value":"4"}]`)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
