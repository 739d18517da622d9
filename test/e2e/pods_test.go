package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tollgate-dev/tollgate/test/e2e/cluster"
)

// Helpers for the real node: policy servers are the pods of a Deployment the controller owns,
// run by the kubelet from tollgate's image.

// serverPods returns the pods of Deployment ns/name (by its selector) that are not being deleted.
func serverPods(ctx context.Context, cs kubernetes.Interface, ns, name string) ([]corev1.Pod, error) {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	return podsBySelector(ctx, cs, ns, sel)
}

func podsBySelector(ctx context.Context, cs kubernetes.Interface, ns string, sel labels.Selector) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitServerPods waits until Deployment ns/name has rolled out n replicas, every one Ready, and
// no other pod, and returns them.
func waitServerPods(ctx context.Context, cs kubernetes.Interface, ns, name string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := poll(ctx, timeout, 200*time.Millisecond, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != int32(n) || d.Status.ReadyReplicas != int32(n) || d.Status.Replicas != int32(n) {
			return fmt.Errorf("deployment %s/%s: %d replicas, %d updated, %d ready (want %d)%s", ns, name,
				d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, n, podsState(ctx, cs, ns, d.Spec.Selector))
		}
		if pods, err = serverPods(ctx, cs, ns, name); err != nil {
			return err
		}
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		if len(pods) != n || ready != n {
			return fmt.Errorf("deployment %s/%s: %d pods, %d ready (want %d)", ns, name, len(pods), ready, n)
		}
		return nil
	})
	return pods, err
}

// podsState says what the pods of a selector are doing (phase, waiting reasons, restarts), for
// error messages.
func podsState(ctx context.Context, cs kubernetes.Interface, ns string, ls *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return ""
	}
	pods, err := podsBySelector(ctx, cs, ns, sel)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "; pod %s %s", p.Name, p.Status.Phase)
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s restarts=%d", s.Name, s.RestartCount)
			if s.State.Waiting != nil {
				fmt.Fprintf(&b, " waiting=%s(%s)", s.State.Waiting.Reason, s.State.Waiting.Message)
			}
			if s.LastTerminationState.Terminated != nil {
				fmt.Fprintf(&b, " last=%s(exit %d)", s.LastTerminationState.Terminated.Reason, s.LastTerminationState.Terminated.ExitCode)
			}
		}
	}
	return b.String()
}

// waitPodsGone waits until no pod of the selector is left (the garbage collector and the kubelet
// have done their part).
func waitPodsGone(ctx context.Context, cs kubernetes.Interface, ns string, sel labels.Selector, timeout time.Duration) error {
	return poll(ctx, timeout, 250*time.Millisecond, func() error {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d pods of %s left", len(l.Items), sel)
		}
		return nil
	})
}

// containerIDs maps each pod to the IDs of its containers and sums their restarts: the same IDs
// later mean the same processes, never restarted.
func containerIDs(pods []corev1.Pod) (ids map[string]string, restarts int32) {
	ids = map[string]string{}
	for _, p := range pods {
		var cs []string
		for _, s := range p.Status.ContainerStatuses {
			cs = append(cs, s.ContainerID)
			restarts += s.RestartCount
		}
		ids[p.Name] = strings.Join(cs, ",")
	}
	return ids, restarts
}

// containerPort is the port named name of the pod's first container.
func containerPort(p *corev1.Pod, name string) int32 {
	for _, port := range p.Spec.Containers[0].Ports {
		if port.Name == name {
			return port.ContainerPort
		}
	}
	return 0
}

// serviceAccountClient is a client acting as the pod's ServiceAccount (a TokenRequest token, as
// the kubelet projects into the pod).
func serviceAccountClient(ctx context.Context, p *corev1.Pod) (kubernetes.Interface, error) {
	exp := int64(600)
	tr, err := env.cluster.Client.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, p.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of %s/%s: %w", p.Namespace, p.Spec.ServiceAccountName, err)
	}
	return kubernetes.NewForConfig(&rest.Config{Host: env.cluster.Server, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.cluster.CA.CertPEM}})
}

// tollgateRestarts sums the restarts of every container of every tollgate pod (the controller's
// and every policy server's) in ns: the suite's target is 0.
func tollgateRestarts(ctx context.Context, cs kubernetes.Interface, ns string) (int32, string, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, "", err
	}
	var n int32
	var detail []string
	for _, p := range l.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				n += s.RestartCount
				why := ""
				if t := s.LastTerminationState.Terminated; t != nil {
					why = fmt.Sprintf(" (last: %s, exit %d)", t.Reason, t.ExitCode)
				}
				detail = append(detail, fmt.Sprintf("%s/%s restarted %d times%s", p.Name, s.Name, s.RestartCount, why))
			}
		}
	}
	return n, strings.Join(detail, "; "), nil
}

// Policies in the cluster's registry: pods fetch them from cluster.PodRegistryHost, which the
// PolicyServers list in insecureSources (plain HTTP).
var pushed struct {
	sync.Mutex
	refs map[string]string
}

// policyRef pushes examples/<name>/policy.wasm with `tollgate push` (once) and returns the URI
// a policy server pod fetches it from.
func policyRef(tb testing.TB, name string) string {
	tb.Helper()
	pushed.Lock()
	defer pushed.Unlock()
	if ref, ok := pushed.refs[name]; ok {
		return ref
	}
	wasm := filepath.Join(env.root, "examples", name, "policy.wasm")
	if _, err := os.Stat(wasm); err != nil {
		tb.Fatalf("%v (make policies builds it)", err)
	}
	sources := filepath.Join(env.dir, "push-sources.yml")
	if err := os.WriteFile(sources, []byte("insecure_sources: [\""+cluster.RegistryHost+"\"]\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	repo := "/e2e/policies/" + name + ":v1"
	out, err := exec.Command(env.bin, "push", "--force", "--sources-path", sources, wasm, "registry://"+cluster.RegistryHost+repo).CombinedOutput()
	if err != nil {
		tb.Fatalf("tollgate push %s: %v: %s", wasm, err, out)
	}
	if pushed.refs == nil {
		pushed.refs = map[string]string{}
	}
	pushed.refs[name] = "registry://" + cluster.PodRegistryHost + repo
	return pushed.refs[name]
}

// ensureNamespace creates ns if it is missing and waits for its default ServiceAccount, which
// kube-controller-manager makes and without which no Pod can be created there.
func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return poll(ctx, 30*time.Second, 50*time.Millisecond, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// policyServerYAML is a PolicyServer of tollgate's image (from the cluster's registry) with its
// replicas, fetching policies from the cluster's registry; extra is more of its spec, indented.
func policyServerYAML(name string, replicas int, extra string) string {
	return fmt.Sprintf(`apiVersion: policies.tollgate.dev/v1
kind: PolicyServer
metadata:
  name: %s
spec:
  image: %s
  replicas: %d
  insecureSources: ["%s"]
%s`, name, env.image, replicas, cluster.PodRegistryHost, extra)
}
