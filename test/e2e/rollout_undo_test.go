package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOperatorRolloutUndoUnderLoad (issue 32): on the real node, under steady load, a policy
// edited once has two revisions; with the cluster's registry stopped, ten `tollgate rollout undo`
// alternate between them, each enforced on real requests (a denial naming the restored key) with
// 0 failed requests and a p50 of at most 1 s from the command's start; `tollgate rollout history`
// lists the revisions the changes made, the serving one last.
func TestOperatorRolloutUndoUnderLoad(t *testing.T) {
	op := operatorFixture(t)
	ctx := operatorContext(t)
	op.policyServer(t, ctx)
	op.loadPolicy(t, ctx, "k1")
	l := startLoad(ctx, op.cs, "e2e-load", 2, 20000, 5*time.Minute)
	defer l.stop()
	op.patchSpec(t, ctx, "ClusterAdmissionPolicy", "", "load-labels", `{"settings": {"mandatory_labels": ["k2"]}}`)
	if _, err := l.probe(ctx, "k2", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	tollgate := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, env.bin, append(args, "--kubeconfig", env.cluster.Kubeconfig)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tollgate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// The edit is recorded once the policy serves it: the current revision holds k2 and the one
	// before it k1 (the policy may have older history from an earlier test, so a count of
	// revisions alone says nothing).
	eventually(t, 30*time.Second, func() error {
		var revs []struct {
			Current bool
			Data    struct{ Settings json.RawMessage }
		}
		out := tollgate("rollout", "history", "cap/load-labels", "-o", "json")
		if err := json.Unmarshal([]byte(out), &revs); err != nil || len(revs) < 2 {
			return fmt.Errorf("history: %v %s", err, out)
		}
		cur, prev := revs[len(revs)-1], revs[len(revs)-2]
		if !cur.Current || !strings.Contains(string(cur.Data.Settings), `"k2"`) || !strings.Contains(string(prev.Data.Settings), `"k1"`) {
			return fmt.Errorf("the edit to k2 is not the current revision yet: %s", out)
		}
		return nil
	})

	if err := env.cluster.StopRegistry(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Not ctx: it ends with the test, and the later tests need the registry back.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.cluster.StartRegistry(cctx); err != nil {
			t.Errorf("restarting the registry: %v", err)
		}
	})
	p50, _ := switchUnderLoad(t, l, "rollout undo to enforce, registry stopped", "undos", 10, func(i int) string {
		if out := tollgate("rollout", "undo", "cap/load-labels"); out != "clusteradmissionpolicy.policies.tollgate.dev/load-labels rolled back\n" {
			t.Fatalf("undo %d: %q", i, out)
		}
		return []string{"k1", "k2"}[i%2]
	})
	if p50 > time.Second {
		t.Errorf("undo to enforce p50 %v: the target is 1 s", p50)
	}
	out := tollgate("rollout", "history", "cap/load-labels")
	t.Logf("history:\n%s", out)
	var revs []struct {
		Revision int64
		Current  bool
		Data     struct{ Module, ManifestDigest string }
	}
	if err := json.Unmarshal([]byte(tollgate("rollout", "history", "cap/load-labels", "-o", "json")), &revs); err != nil {
		t.Fatal(err)
	}
	last := revs[len(revs)-1]
	if !strings.HasPrefix(out, "clusteradmissionpolicy.policies.tollgate.dev/load-labels \nREVISION  CHANGE-CAUSE\n") || !last.Current ||
		last.Revision != revs[len(revs)-2].Revision+1 || last.Data.ManifestDigest == "" {
		t.Errorf("history after the undos: %+v", revs)
	}
}
