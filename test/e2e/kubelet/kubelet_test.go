package kubelet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
	"github.com/tollgate-dev/tollgate/test/e2e/kubelet"
)

const (
	serverNS = "tollgate-system"
	appNS    = "kt"
	deploy   = "policy-server-default"
	policyID = "clusterwide-labels"
)

func policiesYML(t *testing.T, module string, labels ...string) string {
	t.Helper()
	data, err := json.Marshal(map[string]any{policyID: map[string]any{
		"module":   module,
		"settings": map[string]any{"mandatory_labels": labels},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestKubelet runs a PolicyServer-like Deployment made by hand through the emulator and the real
// apiserver: the replicas serve behind the Service, a ConfigMap edit is hot-reloaded without a
// restart, a template change rolls the replicas without a failed request, and deleting the
// Deployment stops them and removes their slices.
func TestKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	root, err := kubelet.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Join(root, "examples", "required-labels", "policy.wasm")
	if _, err := os.Stat(module); err != nil {
		t.Fatalf("%v (make policies builds it)", err)
	}
	bin, err := kubelet.TollgateBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.LogTail(30))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	cs := c.Client
	for _, ns := range []string{serverNS, appNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ca, err := cluster.NewCA("e2e-policy-server-ca")
	if err != nil {
		t.Fatal(err)
	}
	host := deploy + "." + serverNS + ".svc"
	crt, key, err := ca.ServingCert(host)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = cs.CoreV1().Secrets(serverNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: deploy},
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key},
	}, metav1.CreateOptions{})
	mustCreate(err)
	yml1 := policiesYML(t, "file://"+module, "owner")
	_, err = cs.CoreV1().ConfigMaps(serverNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: deploy},
		Data:       map[string]string{"policies.yml": yml1},
	}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = cs.CoreV1().Services(serverNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: deploy},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "policy-server", Port: 443, TargetPort: intstr.FromInt32(8443)},
			{Name: "readiness", Port: 8081, TargetPort: intstr.FromString("readiness")},
		}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	labels := map[string]string{"app": "tollgate-policy-server-default", "app.kubernetes.io/component": "policy-server"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: deploy, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": labels["app"]}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "policy-server",
						Image: "tollgate:e2e",
						Args: []string{"serve", "--policies=/config/policies.yml", "--cert-file=/pki/tls.crt",
							"--key-file=/pki/tls.key", "--port=8443", "--readiness-probe-port", "8081"},
						Env: []corev1.EnvVar{{Name: "TOLLGATE_LOG_LEVEL", Value: "debug"}},
						Ports: []corev1.ContainerPort{
							{Name: "policy-server", ContainerPort: 8443},
							{Name: "readiness", ContainerPort: 8081},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "config", MountPath: "/config", ReadOnly: true},
							{Name: "pki", MountPath: "/pki", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: deploy}}}},
						{Name: "pki", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: deploy}}},
					},
				},
			},
		},
	}
	_, err = cs.AppsV1().Deployments(serverNS).Create(ctx, dep, metav1.CreateOptions{})
	mustCreate(err)

	k, err := kubelet.Start(ctx, kubelet.Options{Client: cs, Namespace: serverNS, Binary: bin, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			for _, rep := range k.Replicas(deploy) {
				if b, err := os.ReadFile(rep.LogPath); err == nil {
					t.Logf("--- %s ---\n%s", rep.LogPath, tailLines(string(b), 30))
				}
			}
		}
	})

	waitCtx, waitCancel := context.WithTimeout(ctx, 3*time.Minute)
	reps, err := k.WaitReady(waitCtx, deploy, 2)
	waitCancel()
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Starts(deploy); got != 2 {
		t.Fatalf("starts = %d, want 2", got)
	}

	t.Run("volumes are written as kubelet writes them", func(t *testing.T) {
		vol := filepath.Join(reps[0].Dir, "volumes", "config")
		target, err := os.Readlink(filepath.Join(vol, "policies.yml"))
		if err != nil || target != "..data/policies.yml" {
			t.Fatalf("policies.yml -> %q (%v), want ..data/policies.yml", target, err)
		}
		data, err := os.Readlink(filepath.Join(vol, "..data"))
		if err != nil || !strings.HasPrefix(data, "..20") {
			t.Fatalf("..data -> %q (%v), want a timestamped directory", data, err)
		}
	})

	t.Run("slices and status", func(t *testing.T) {
		slices, err := cs.DiscoveryV1().EndpointSlices(serverNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + deploy})
		if err != nil {
			t.Fatal(err)
		}
		if len(slices.Items) != 2 {
			t.Fatalf("%d slices, want 2", len(slices.Items))
		}
		for _, s := range slices.Items {
			names := map[string]int32{}
			for _, p := range s.Ports {
				names[*p.Name] = *p.Port
			}
			if names["policy-server"] == 0 || names["readiness"] == 0 {
				t.Errorf("slice %s ports %v: want policy-server and readiness", s.Name, names)
			}
		}
		eventually(t, ctx, 10*time.Second, func() error {
			d, err := cs.AppsV1().Deployments(serverNS).Get(ctx, deploy, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ReadyReplicas != 2 || d.Status.UpdatedReplicas != 2 || d.Status.ObservedGeneration != d.Generation {
				return fmt.Errorf("status %+v", d.Status)
			}
			return nil
		})
	})

	// The webhook, through the apiserver, the Service and the slices.
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: policyID},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: policyID + ".e2e.tollgate.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: serverNS, Name: deploy, Path: ptr.To("/validate/" + policyID), Port: ptr.To[int32](443)},
				CABundle: ca.CertPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": appNS}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	var seq int
	var seqMu sync.Mutex
	create := func(labels map[string]string) error {
		seqMu.Lock()
		seq++
		name := fmt.Sprintf("cm-%d", seq)
		seqMu.Unlock()
		_, err := cs.CoreV1().ConfigMaps(appNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		return err
	}
	t.Run("the apiserver calls the replicas", func(t *testing.T) {
		eventually(t, ctx, 10*time.Second, func() error {
			err := create(nil)
			if err == nil || !strings.Contains(err.Error(), `mandatory label "owner" is missing`) {
				return fmt.Errorf("want a denial naming owner, got %v", err)
			}
			return nil
		})
		if err := create(map[string]string{"owner": "me"}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a ConfigMap edit is hot-reloaded without a restart", func(t *testing.T) {
		pids := k.PIDs(deploy)
		yml2 := policiesYML(t, "file://"+module, "owner", "team")
		cm, err := cs.CoreV1().ConfigMaps(serverNS).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["policies.yml"] = yml2
		if _, err := cs.CoreV1().ConfigMaps(serverNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := kubelet.ConfigDigest([]byte(yml2))
		eventually(t, ctx, 20*time.Second, func() error {
			for _, rep := range k.Replicas(deploy) {
				st, err := rep.Status(ctx)
				if err != nil {
					return err
				}
				if st.ConfigDigest != want {
					return fmt.Errorf("%s serves %s, want %s (last reload %+v)", rep.Pod, st.ConfigDigest, want, st.LastReload)
				}
			}
			return nil
		})
		if err := create(map[string]string{"owner": "me"}); err == nil || !strings.Contains(err.Error(), `"team"`) {
			t.Fatalf("want a denial naming team, got %v", err)
		}
		if got := k.Starts(deploy); got != 2 {
			t.Errorf("starts = %d after a ConfigMap edit, want 2 (no restart)", got)
		}
		if got := k.PIDs(deploy); fmt.Sprint(got) != fmt.Sprint(pids) {
			t.Errorf("pids %v -> %v after a ConfigMap edit", pids, got)
		}
	})

	t.Run("a crashed replica is unpublished and restarted in its pod", func(t *testing.T) {
		before := k.Replicas(deploy)
		victim := before[0]
		if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, 30*time.Second, func() error {
			for _, rep := range k.Replicas(deploy) {
				if rep.Pod != victim.Pod {
					continue
				}
				if rep.Restarts != 1 || rep.PID == victim.PID || !rep.Ready || !rep.Published {
					return fmt.Errorf("%s: restarts %d pid %d ready %v published %v", rep.Pod, rep.Restarts, rep.PID, rep.Ready, rep.Published)
				}
				if rep.Port != victim.Port {
					return fmt.Errorf("%s: port %d -> %d (a container restart keeps the pod's ports)", rep.Pod, victim.Port, rep.Port)
				}
				return nil
			}
			return fmt.Errorf("pod %s gone", victim.Pod)
		})
		if got := k.Starts(deploy); got != 3 {
			t.Errorf("starts = %d, want 3", got)
		}
		events := strings.Join(k.Events(), "\n")
		if !strings.Contains(events, victim.Pod+": endpoint slice deleted") {
			t.Errorf("the crashed replica's slice was not deleted; events:\n%s", events)
		}
	})

	t.Run("a template change rolls the replicas without a failed request", func(t *testing.T) {
		old := k.PIDs(deploy)
		stop := make(chan struct{})
		var failures []string
		var ok int
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := create(map[string]string{"owner": "me", "team": "t"}); err != nil {
					failures = append(failures, err.Error())
				} else {
					ok++
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		d, err := cs.AppsV1().Deployments(serverNS).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Annotations = map[string]string{"e2e/restart": "1"}
		if _, err := cs.AppsV1().Deployments(serverNS).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, 3*time.Minute, func() error {
			if got := k.Starts(deploy); got != 5 {
				return fmt.Errorf("starts = %d, want 5", got)
			}
			reps := k.Replicas(deploy)
			if len(reps) != 2 {
				return fmt.Errorf("%d replicas", len(reps))
			}
			for _, rep := range reps {
				if !rep.Ready || !rep.Published {
					return fmt.Errorf("%s not ready and published", rep.Pod)
				}
				for _, o := range old {
					if rep.PID == o {
						return fmt.Errorf("old pid %d still serves", o)
					}
				}
			}
			return nil
		})
		time.Sleep(2 * time.Second) // the old replicas' drain
		close(stop)
		<-done
		t.Logf("rollout: %d requests ok, %d failed", ok, len(failures))
		if len(failures) > 0 || ok == 0 {
			t.Errorf("%d failed requests during the rollout (%d ok): %v", len(failures), ok, failures)
		}
	})

	t.Run("deleting the Deployment stops the replicas and removes the slices", func(t *testing.T) {
		reps := k.Replicas(deploy)
		if err := cs.AppsV1().Deployments(serverNS).Delete(ctx, deploy, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if err := k.WaitGone(wctx, deploy); err != nil {
			t.Fatal(err)
		}
		slices, err := cs.DiscoveryV1().EndpointSlices(serverNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + deploy})
		if err != nil {
			t.Fatal(err)
		}
		if len(slices.Items) != 0 {
			t.Errorf("%d slices left", len(slices.Items))
		}
		for _, rep := range reps {
			if err := processAlive(rep.PID); err == nil {
				t.Errorf("pid %d still runs", rep.PID)
			}
		}
	})
}

func eventually(t *testing.T, ctx context.Context, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func processAlive(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Signal(syscall.Signal(0))
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
