package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestControllerRestartMakesNoWrites: a restarted controller reconciles every object again (a
// fresh cache, every object queued) and, nothing having changed, writes none of them: 6 policies of
// the four kinds on 2 PolicyServers, every object the controller writes compared by
// resourceVersion before and after the restart. BenchmarkOperatorScale measures the same at 200
// policies.
func TestControllerRestartMakesNoWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	f := startFleet(t, ctx, "tollgate-restart")
	const servers, policies = 2, 6
	nss := []string{"restart-a", "restart-b"}
	f.createWorkload(ctx, "restart", servers, policies, nss)
	t.Cleanup(func() { f.deleteWorkload("restart", servers) })
	if err := f.waitActive(ctx, policies, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.settle(ctx, 2*time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	res := f.restartResync(ctx, 10*time.Second)
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Log(res)
	if len(res.changed) > 0 {
		t.Errorf("the restarted controller changed %d unchanged objects:\n%s", len(res.changed), strings.Join(res.changed, "\n"))
	}
	if err := f.waitActive(ctx, policies, 30*time.Second); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}

// deleteWorkload deletes createWorkload's policies, then its PolicyServers, and waits (at most a
// minute each) for them to go, so that the other tests see a clean cluster. It runs before the
// controller stops (cleanups run last first).
func (f *fleet) deleteWorkload(prefix string, servers int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "e2e.tollgate.dev/workload=" + prefix}
	for _, kind := range fleetPolicyKinds {
		l, err := f.dyn.Resource(policyGVR[kind]).List(ctx, sel)
		if err != nil {
			f.tb.Logf("list %s: %v", kind, err)
			continue
		}
		for _, o := range l.Items {
			if err := f.dyn.Resource(policyGVR[kind]).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil {
				f.tb.Logf("delete %s %s/%s: %v", kind, o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	err := poll(ctx, time.Minute, 500*time.Millisecond, func() error {
		for _, kind := range fleetPolicyKinds {
			l, err := f.dyn.Resource(policyGVR[kind]).List(ctx, sel)
			if err != nil {
				return err
			}
			if len(l.Items) > 0 {
				return fmt.Errorf("%d %s left", len(l.Items), kind)
			}
		}
		return nil
	})
	if err != nil {
		f.tb.Logf("cleanup: %v", err)
	}
	for i := 0; i < servers; i++ {
		name := prefix + "-" + strconv.Itoa(i)
		if err := f.dyn.Resource(policyGVR["PolicyServer"]).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			f.tb.Logf("delete PolicyServer %s: %v", name, err)
		}
	}
	err = poll(ctx, time.Minute, 500*time.Millisecond, func() error {
		l, err := f.dyn.Resource(policyGVR["PolicyServer"]).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ps := range l.Items {
			if strings.HasPrefix(ps.GetName(), prefix+"-") {
				return fmt.Errorf("PolicyServer %s left", ps.GetName())
			}
		}
		return nil
	})
	if err != nil {
		f.tb.Logf("cleanup: %v", err)
	}
}

// TestDeploymentRepaired: another manager edits fields of a policy server's Deployment that the
// controller sets (an env value, the container's securityContext) and adds its own (an env var,
// an annotation): the controller applies its fields back and leaves the others' alone, then
// writes nothing more. Before server-side apply the drift check saw only replicas, image, args
// and the volume count, and such edits stayed.
func TestDeploymentRepaired(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const ns, psName = "tollgate-repair", "repair"
	f := startFleet(t, ctx, ns)
	ps := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policies.tollgate.dev/v1", "kind": "PolicyServer",
		"metadata": map[string]any{"name": psName},
		"spec": map[string]any{"image": env.image, "replicas": int64(1),
			"env": []any{map[string]any{"name": "TOLLGATE_LOG_LEVEL", "value": "info"}}},
	}}
	psRes := f.dyn.Resource(policyGVR["PolicyServer"])
	if _, err := psRes.Create(ctx, ps, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = psRes.Delete(ctx, psName, metav1.DeleteOptions{})
		_ = poll(ctx, time.Minute, 500*time.Millisecond, func() error {
			if _, err := psRes.Get(ctx, psName, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("PolicyServer %s left", psName)
			}
			return nil
		})
	})
	deps := f.cs.AppsV1().Deployments(ns)
	name := "policy-server-" + psName
	if _, err := waitServerPods(ctx, f.cs, ns, name, 1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	dep, err := deps.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &dep.Spec.Template.Spec.Containers[0]
	c.Env[0].Value = "debug"
	c.Env = append(c.Env, corev1.EnvVar{Name: "THEIRS", Value: "kept"})
	no, yes := false, true
	c.SecurityContext.ReadOnlyRootFilesystem, c.SecurityContext.AllowPrivilegeEscalation = &no, &yes
	if dep.Annotations == nil {
		dep.Annotations = map[string]string{}
	}
	dep.Annotations["example.com/theirs"] = "kept"
	if _, err := deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var repaired *appsv1.Deployment
	eventually(t, time.Minute, func() error {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := d.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		sc := c.SecurityContext
		if env["TOLLGATE_LOG_LEVEL"] != "info" || sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			return fmt.Errorf("not repaired yet: env %v, securityContext %+v", env, sc)
		}
		if env["THEIRS"] != "kept" || d.Annotations["example.com/theirs"] != "kept" {
			return fmt.Errorf("another manager's fields were removed: env %v, annotations %v", env, d.Annotations)
		}
		repaired = d
		return nil
	})
	var managers []string
	for _, m := range repaired.ManagedFields {
		managers = append(managers, m.Manager+" "+string(m.Operation))
	}
	t.Logf("e2e: Deployment repaired %v after the edit; field managers %v", time.Since(start).Round(time.Millisecond), managers)
	if !slices.Contains(managers, "tollgate-controller Apply") {
		t.Errorf("field managers %v: no tollgate-controller Apply", managers)
	}
	// Repaired once: no write follows (no fight with the kubectl-edit manager's own fields).
	time.Sleep(5 * time.Second)
	d, err := deps.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != repaired.Generation {
		t.Errorf("the Deployment's spec was written again after the repair: generation %d -> %d", repaired.Generation, d.Generation)
	}
}
