package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
