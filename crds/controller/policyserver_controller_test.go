package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/server/status"
)

const psTestNS = "tollgate"

// psEnv is a fake cluster with a PolicyServerReconciler that counts the writes it makes.
type psEnv struct {
	t      testing.TB
	ctx    context.Context
	c      client.Client
	r      *PolicyServerReconciler
	rec    *record.FakeRecorder
	writes []string
	// failUpdate, when set, is the error of every Update (after it is counted).
	failUpdate error
}

// applyKindName reads the kind and name of an apply configuration.
func applyKindName(ac runtime.ApplyConfiguration) (kind, name string) {
	var m struct {
		Kind     string
		Metadata struct{ Name string }
	}
	b, _ := json.Marshal(ac)
	_ = json.Unmarshal(b, &m)
	return m.Kind, m.Metadata.Name
}

func newPSEnv(t testing.TB, objs ...client.Object) *psEnv {
	t.Helper()
	e := &psEnv{t: t, ctx: context.Background(), rec: record.NewFakeRecorder(1000)}
	count := func(verb string, obj client.Object) {
		e.writes = append(e.writes, verb+" "+reflect.TypeOf(obj).Elem().Name()+" "+obj.GetName())
	}
	e.c = fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(objs...).
		WithStatusSubresource(&v1.PolicyServer{}).
		WithReturnManagedFields().
		WithInterceptorFuncs(interceptor.Funcs{
			Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				kind, name := applyKindName(obj)
				e.writes = append(e.writes, "apply "+kind+" "+name)
				if e.failUpdate != nil {
					return e.failUpdate
				}
				return c.Apply(ctx, obj, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				count("create", obj)
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				count("update", obj)
				if e.failUpdate != nil {
					return e.failUpdate
				}
				return c.Update(ctx, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				count("patch", obj)
				return c.Patch(ctx, obj, patch, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				count("delete", obj)
				return c.Delete(ctx, obj, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				count("patch-"+sub, obj)
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				count("update-"+sub, obj)
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
	o, err := Options{Namespace: psTestNS, AlwaysAcceptAdmissionReviewsOnNamespace: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	e.r = &PolicyServerReconciler{Client: e.c, Options: o, Certs: NewCertManager(e.c, o), Recorder: e.rec}
	return e
}

// reconcile runs one reconcile of PolicyServer ps and returns the writes it made.
func (e *psEnv) reconcile(ps string) (reconcile.Result, error, []string) {
	e.t.Helper()
	e.writes = nil
	res, err := e.r.Reconcile(e.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: ps}})
	return res, err, e.writes
}

func (e *psEnv) get(obj client.Object, name string) client.Object {
	e.t.Helper()
	ns := psTestNS
	switch obj.(type) {
	case *v1.PolicyServer, *v1.ClusterAdmissionPolicy:
		ns = ""
	}
	if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		e.t.Fatalf("get %s: %v", name, err)
	}
	return obj
}

func (e *psEnv) events() []string {
	var out []string
	for len(e.rec.Events) > 0 {
		out = append(out, <-e.rec.Events)
	}
	return out
}

func psObj(name string) *v1.PolicyServer {
	return &v1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1.PolicyServerSpec{Image: "ghcr.io/tollgate-dev/tollgate:v1", Replicas: 2, Labels: map[string]string{"team": "sec"}}}
}

func psCAP(name, server, settings string) *v1.ClusterAdmissionPolicy {
	p := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.ClusterAdmissionPolicySpec{
		WebhookSpec: v1.WebhookSpec{PolicyServer: server}, ModuleSpec: v1.ModuleSpec{Module: "registry://r/p:1"}}}
	if settings != "" {
		p.Spec.Settings = runtime.RawExtension{Raw: []byte(settings)}
	}
	return p
}

func TestPolicyServerReconcile(t *testing.T) {
	e := newPSEnv(t, psObj("default"), psObj("other"),
		psCAP("a", "default", `{"x":1}`), psCAP("b", "other", `{}`),
		&v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "c"}, Spec: v1.AdmissionPolicySpec{
			WebhookSpec: v1.WebhookSpec{PolicyServer: "default"}, ModuleSpec: v1.ModuleSpec{Module: "r/c:1"}}})
	res, err, writes := e.reconcile("default")
	if err != nil {
		t.Fatal(err)
	}
	wantWrites := []string{"patch PolicyServer default", "create Secret tollgate-ca", "apply Secret policy-server-default", "apply ConfigMap policy-server-default",
		"apply Role policy-server-default", "apply RoleBinding policy-server-default",
		"apply ServiceAccount policy-server-default", "apply Deployment policy-server-default", "apply Service policy-server-default",
		"patch-status PolicyServer default"}
	if !slices.Equal(writes, wantWrites) {
		t.Errorf("writes:\n%s\nwant\n%s", strings.Join(writes, "\n"), strings.Join(wantWrites, "\n"))
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > e.r.Options.CertCheckInterval {
		t.Errorf("RequeueAfter = %s", res.RequeueAfter)
	}

	// The finalizer and the status.
	ps := e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	if !slices.Contains(ps.Finalizers, v1.PolicyServerFinalizer) {
		t.Error("no finalizer")
	}
	for _, typ := range []string{v1.ConditionCertSecretReconciled, v1.ConditionConfigMapReconciled, v1.ConditionDeploymentReconciled, v1.ConditionServiceReconciled, v1.ConditionRBACReconciled, v1.ConditionPDBReconciled} {
		if !meta.IsStatusConditionTrue(ps.Status.Conditions, typ) {
			t.Errorf("condition %s not true: %+v", typ, meta.FindStatusCondition(ps.Status.Conditions, typ))
		}
	}
	if ps.Status.Policies != 2 || ps.Status.ObservedGeneration != 1 {
		t.Errorf("status: %+v", ps.Status)
	}

	// The ConfigMap: policies.yml of this server's policies, its digest, sources.yml.
	cm := e.get(&corev1.ConfigMap{}, "policy-server-default").(*corev1.ConfigMap)
	yml := []byte(cm.Data[v1.PoliciesKey])
	if d := status.Digest(yml); cm.Annotations[v1.ConfigDigestAnnotation] != d || ps.Status.ConfigDigest != d {
		t.Errorf("digest: annotation %q, status %q, want %q", cm.Annotations[v1.ConfigDigestAnnotation], ps.Status.ConfigDigest, d)
	}
	pols, _, err := config.ParsePolicies("policies.yml", yml)
	if err != nil || len(pols) != 2 || pols[0].ID != "clusterwide-a" || pols[1].ID != "namespaced-team-c" {
		t.Errorf("policies.yml: %v %+v", err, pols)
	}
	if _, err := config.ParseSources("sources.yml", []byte(cm.Data[v1.SourcesKey])); err != nil {
		t.Error(err)
	}
	checkOwned(t, cm, "default")

	// The Secret: a certificate for the Service.
	sec := e.get(&corev1.Secret{}, "policy-server-default").(*corev1.Secret)
	if _, ok := validPair(sec.Data[TLSCertKey], sec.Data[TLSKeyKey], v1.ServiceHost("default", psTestNS), time.Now()); !ok {
		t.Error("no valid certificate in the Secret")
	}
	checkOwned(t, sec, "default")

	// The Service.
	svc := e.get(&corev1.Service{}, "policy-server-default").(*corev1.Service)
	wantPorts := []corev1.ServicePort{
		{Name: "policy-server", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP},
		{Name: "readiness", Port: 8081, TargetPort: intstr.FromInt32(8081), Protocol: corev1.ProtocolTCP},
	}
	if !equality.Semantic.DeepEqual(svc.Spec.Ports, wantPorts) || svc.Spec.Selector[v1.LabelAppSelector] != "tollgate-policy-server-default" {
		t.Errorf("service: %+v", svc.Spec)
	}
	checkOwned(t, svc, "default")

	// The Deployment.
	dep := e.get(&appsv1.Deployment{}, "policy-server-default").(*appsv1.Deployment)
	checkOwned(t, dep, "default")
	checkDeployment(t, dep)
	template := dep.Spec.Template.DeepCopy()

	// The Role and RoleBinding: the server's ServiceAccount may read its ConfigMap, nothing else.
	checkServerRBAC(t, e, "default", "policy-server-default")

	// Nothing changed: nothing is written.
	if _, err, writes := e.reconcile("default"); err != nil || len(writes) != 0 {
		t.Fatalf("unchanged reconcile: err %v, writes %v", err, writes)
	}
	e.events()

	// A policy changes: the ConfigMap (and the status digest) follow, the Deployment does not.
	a := &v1.ClusterAdmissionPolicy{}
	e.get(a, "a")
	a.Spec.Settings = runtime.RawExtension{Raw: []byte(`{"x":2}`)}
	if err := e.c.Update(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	_, err, writes = e.reconcile("default")
	if want := []string{"apply ConfigMap policy-server-default", "patch-status PolicyServer default"}; err != nil || !slices.Equal(writes, want) {
		t.Fatalf("policy change: err %v, writes %v, want %v", err, writes, want)
	}
	cm2 := e.get(&corev1.ConfigMap{}, "policy-server-default").(*corev1.ConfigMap)
	if !strings.Contains(cm2.Data[v1.PoliciesKey], `"x": 2`) || cm2.Annotations[v1.ConfigDigestAnnotation] == cm.Annotations[v1.ConfigDigestAnnotation] {
		t.Error("ConfigMap not updated")
	}
	dep2 := e.get(&appsv1.Deployment{}, "policy-server-default").(*appsv1.Deployment)
	if !equality.Semantic.DeepEqual(template, &dep2.Spec.Template) || dep2.ResourceVersion != dep.ResourceVersion {
		t.Error("a policy change changed the Deployment")
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], EventReasonConfigChanged) {
		t.Errorf("events: %v", ev)
	}

	// A PodDisruptionBudget when asked, gone when not.
	ps = e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	one := intstr.FromInt32(1)
	ps.Spec.MinAvailable = &one
	if err := e.c.Update(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "apply PodDisruptionBudget policy-server-default") {
		t.Fatalf("pdb: err %v, writes %v", err, writes)
	}
	pdb := e.get(&policyv1.PodDisruptionBudget{}, "policy-server-default").(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels[v1.LabelAppSelector] != "tollgate-policy-server-default" {
		t.Errorf("pdb: %+v", pdb.Spec)
	}
	if _, err, writes := e.reconcile("default"); err != nil || len(writes) != 0 {
		t.Fatalf("unchanged reconcile with a PDB: err %v, writes %v", err, writes)
	}
	ps = e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	ps.Spec.MinAvailable = nil
	if err := e.c.Update(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "delete PodDisruptionBudget policy-server-default") {
		t.Fatalf("pdb removal: err %v, writes %v", err, writes)
	}

	// A spec change reaches the Deployment.
	ps = e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	ps.Spec.Image = "ghcr.io/tollgate-dev/tollgate:v2"
	if err := e.c.Update(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "apply Deployment policy-server-default") || slices.Contains(writes, "apply ConfigMap policy-server-default") {
		t.Fatalf("image change: err %v, writes %v", err, writes)
	}
	// Drift of an owned field is repaired.
	dep = e.get(&appsv1.Deployment{}, "policy-server-default").(*appsv1.Deployment)
	dep.Spec.Template.Spec.Containers[0].Args = []string{"serve"}
	if err := e.c.Update(e.ctx, dep); err != nil {
		t.Fatal(err)
	}
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Equal(writes, []string{"apply Deployment policy-server-default"}) {
		t.Fatalf("drift: err %v, writes %v", err, writes)
	}
}

func checkOwned(t *testing.T, obj client.Object, ps string) {
	t.Helper()
	if obj.GetNamespace() != psTestNS {
		t.Errorf("%s: namespace %q", obj.GetName(), obj.GetNamespace())
	}
	refs := obj.GetOwnerReferences()
	if len(refs) != 1 || refs[0].Kind != "PolicyServer" || refs[0].Name != ps || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("%s: owner references %+v", obj.GetName(), refs)
	}
	l := obj.GetLabels()
	if l[v1.PolicyServerLabel] != ps || l[v1.LabelPartOf] != "tollgate" || l[v1.LabelComponent] != "policy-server" || l["team"] != "sec" {
		t.Errorf("%s: labels %v", obj.GetName(), l)
	}
}

func checkDeployment(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("containers: %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	wantArgs := []string{"serve", "--policies=/config/policies.yml", "--policies-configmap=tollgate/policy-server-default", "--sources-path=/config/sources.yml", "--cert-file=/pki/tls.crt",
		"--key-file=/pki/tls.key", "--port=8443", "--readiness-probe-port=8081", "--cache-dir=/cache", "--log-fmt=json",
		"--always-accept-admission-reviews-on-namespace=tollgate"}
	if c.Name != ContainerName || c.Image != "ghcr.io/tollgate-dev/tollgate:v1" || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("container %s %s args\n%v\nwant\n%v", c.Name, c.Image, c.Args, wantArgs)
	}
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" {
			t.Errorf("mount %s has a subPath: kubelet would not update it", m.Name)
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols[mounts["/config"]]; v.ConfigMap == nil || v.ConfigMap.Name != "policy-server-default" {
		t.Errorf("/config: %+v", v)
	}
	if v := vols[mounts["/pki"]]; v.Secret == nil || v.Secret.SecretName != "policy-server-default" {
		t.Errorf("/pki: %+v", v)
	}
	if v := vols[mounts["/cache"]]; v.EmptyDir == nil {
		t.Errorf("/cache: %+v", v)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readiness" || c.LivenessProbe.HTTPGet.Path != "/livez" || c.ReadinessProbe.HTTPGet.Port.StrVal != "readiness" {
		t.Errorf("probes: %+v %+v", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context: %+v", sc)
	}
	if spec.ServiceAccountName != "policy-server-default" {
		t.Errorf("service account %q", spec.ServiceAccountName)
	}
	if *dep.Spec.Replicas != 2 || dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("replicas %d, strategy %+v", *dep.Spec.Replicas, dep.Spec.Strategy)
	}
	sel := dep.Spec.Selector.MatchLabels
	tl := dep.Spec.Template.Labels
	if sel[v1.LabelAppSelector] != "tollgate-policy-server-default" || tl[v1.LabelAppSelector] != sel[v1.LabelAppSelector] || tl["team"] != "sec" || dep.Labels["team"] != "sec" {
		t.Errorf("selector %v, template labels %v, labels %v", sel, tl, dep.Labels)
	}
	// Nothing in the pod template may follow the policies.
	for k, v := range tl {
		if strings.Contains(k, "config") || strings.HasPrefix(v, "sha256:") {
			t.Errorf("template label %s=%s follows the configuration", k, v)
		}
	}
	for k := range dep.Spec.Template.Annotations {
		t.Errorf("template annotation %s (none expected)", k)
	}
}

func TestPolicyServerDeploymentOptions(t *testing.T) {
	e := newPSEnv(t)
	ps := psObj("p")
	ps.Spec.ImagePullSecret = "regcred"
	ps.Spec.WebhookPort, ps.Spec.ReadinessProbePort = cfgI32(9443), cfgI32(9081)
	ps.Spec.ServiceAccountName = "mine"
	ps.Spec.Annotations = map[string]string{"a": "b"}
	ps.Spec.SecurityContexts.Container = &corev1.SecurityContext{Privileged: new(bool)}
	ps.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	ps.Spec.PriorityClassName = "high"
	ps.Spec.Env = []corev1.EnvVar{{Name: "TOLLGATE_WORKERS", Value: "4"}}
	dep := e.r.desiredDeployment(ps)
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--docker-config-json-path=/registry-auth/config.json") || !slices.Contains(c.Args, "--port=9443") || !slices.Contains(c.Args, "--readiness-probe-port=9081") {
		t.Errorf("args %v", c.Args)
	}
	var auth *corev1.Volume
	for i := range dep.Spec.Template.Spec.Volumes {
		if v := &dep.Spec.Template.Spec.Volumes[i]; v.Name == volumeRegistryAuth {
			auth = v
		}
	}
	if auth == nil || auth.Secret.SecretName != "regcred" || auth.Secret.Items[0].Key != ".dockerconfigjson" || auth.Secret.Items[0].Path != "config.json" {
		t.Errorf("registry auth volume %+v", auth)
	}
	if c.Ports[0].ContainerPort != 9443 || c.Ports[1].ContainerPort != 9081 || c.Env[0].Name != "TOLLGATE_WORKERS" {
		t.Errorf("ports %+v env %+v", c.Ports, c.Env)
	}
	s := dep.Spec.Template.Spec
	if s.ServiceAccountName != "mine" || s.PriorityClassName != "high" || len(s.Tolerations) != 1 || dep.Spec.Template.Annotations["a"] != "b" || c.SecurityContext.RunAsNonRoot != nil {
		t.Errorf("pod spec %+v", s)
	}
	svc := e.r.desiredService(ps)
	if svc.Spec.Ports[0].TargetPort.IntValue() != 9443 || svc.Spec.Ports[1].Port != 9081 {
		t.Errorf("service ports %+v", svc.Spec.Ports)
	}
	// With its own service account, none is made. A missing pull secret is reported, but the
	// Deployment is written.
	if err := e.c.Create(e.ctx, ps); err != nil {
		t.Fatal(err)
	}
	_, err, writes := e.reconcile("p")
	if err == nil || !strings.Contains(err.Error(), `spec.imagePullSecret "regcred"`) || slices.Contains(writes, "apply ServiceAccount policy-server-p") || !slices.Contains(writes, "apply Deployment policy-server-p") {
		t.Errorf("err %v, writes %v", err, writes)
	}
	got := e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeploymentReconciled); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("DeploymentReconciled = %+v", c)
	}
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: psTestNS, Name: "regcred"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
	if err := e.c.Create(e.ctx, pull); err != nil {
		t.Fatal(err)
	}
	if _, err, _ := e.reconcile("p"); err != nil {
		t.Errorf("with the pull secret: %v", err)
	}
	// The RoleBinding names spec.serviceAccountName.
	checkServerRBAC(t, e, "p", "mine")
	got = e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	got.Spec.SigstoreTrustConfig = "trust"
	if err := e.c.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err, _ := e.reconcile("p"); err != nil {
		t.Fatal(err)
	}
	got = e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeploymentReconciled); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "spec.sigstoreTrustConfig (without spec.verificationConfig)") {
		t.Errorf("DeploymentReconciled = %+v", c)
	}
	checkVerificationMounts(t, e, got)
}

// checkVerificationMounts: spec.verificationConfig and spec.sigstoreTrustConfig name ConfigMaps
// that the Deployment mounts (no subPath, so that kubelet updates them in place and the server
// verifies again without a rollout) and that serve's flags name; a missing ConfigMap or key is
// reported (the Deployment is written anyway).
func checkVerificationMounts(t *testing.T, e *psEnv, got *v1.PolicyServer) {
	t.Helper()
	got.Spec.VerificationConfig = "verify"
	if err := e.c.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	_, err, writes := e.reconcile("p")
	if err == nil || !strings.Contains(err.Error(), `spec.verificationConfig "verify"`) || !strings.Contains(err.Error(), `spec.sigstoreTrustConfig "trust"`) ||
		!slices.Contains(writes, "apply Deployment policy-server-p") {
		t.Fatalf("missing ConfigMaps: err %v, writes %v", err, writes)
	}
	for name, data := range map[string]map[string]string{"verify": {"verification-config": "apiVersion: v1\n"}, "trust": {"other": "{}"}} {
		if err := e.c.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: psTestNS, Name: name}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err, _ := e.reconcile("p"); err == nil || !strings.Contains(err.Error(), `spec.sigstoreTrustConfig "trust": the ConfigMap in namespace tollgate has no sigstore-trust-config key`) ||
		strings.Contains(err.Error(), "spec.verificationConfig") {
		t.Fatalf("trust ConfigMap without its key: %v", err)
	}
	trust := &corev1.ConfigMap{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: psTestNS, Name: "trust"}, trust); err != nil {
		t.Fatal(err)
	}
	trust.Data = map[string]string{"sigstore-trust-config": "{}"}
	if err := e.c.Update(e.ctx, trust); err != nil {
		t.Fatal(err)
	}
	if _, err, _ := e.reconcile("p"); err != nil {
		t.Fatalf("with both ConfigMaps: %v", err)
	}
	got = e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeploymentReconciled); c.Status != metav1.ConditionTrue || strings.Contains(c.Message, "spec.verificationConfig") || strings.Contains(c.Message, "sigstoreTrustConfig") {
		t.Errorf("DeploymentReconciled = %+v", c)
	}
	dep := e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
	c := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--verification-path=/verification/verification-config") || !slices.Contains(c.Args, "--sigstore-trust-config=/sigstore-trust/sigstore-trust-config") {
		t.Errorf("args %v", c.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		want, ok := map[string][2]string{"verification": {"verify", "verification-config"}, "sigstore-trust": {"trust", "sigstore-trust-config"}}[v.Name]
		if !ok {
			continue
		}
		m := mounts[v.Name]
		if v.ConfigMap == nil || v.ConfigMap.Name != want[0] || len(v.ConfigMap.Items) != 1 || v.ConfigMap.Items[0].Key != want[1] || m.SubPath != "" || !m.ReadOnly || m.MountPath != "/"+v.Name {
			t.Errorf("volume %+v mounted %+v", v, m)
		}
		delete(mounts, v.Name)
	}
	if _, ok := mounts["verification"]; ok {
		t.Errorf("verification mount without its volume")
	}
	if !slices.ContainsFunc(dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "sigstore-trust" }) {
		t.Errorf("volumes %+v lack sigstore-trust", dep.Spec.Template.Spec.Volumes)
	}
}

func TestPolicyServerBadObjects(t *testing.T) {
	ps := psObj("default")
	ps.Spec.InsecureSources = []string{"http://bad/"}
	bad := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}, Spec: v1.ClusterAdmissionPolicyGroupSpec{
		WebhookSpec: v1.WebhookSpec{PolicyServer: "default"}, GroupSpec: v1.GroupSpec{Expression: "a() &&", Message: "m"},
		Policies: map[string]v1.ClusterPolicyGroupMember{"a": {ModuleSpec: v1.ModuleSpec{Module: "r/a:1"}}}}}
	e := newPSEnv(t, ps, bad, psCAP("good", "default", ""))
	_, err, _ := e.reconcile("default")
	if err == nil || !strings.Contains(err.Error(), "spec.insecureSources[0]") {
		t.Fatalf("err = %v", err)
	}
	got := e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionConfigMapReconciled)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonReconciliationFailed || !strings.Contains(c.Message, "http://bad/") {
		t.Errorf("ConfigMapReconciled = %+v", c)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionDeploymentReconciled) {
		t.Error("a bad ConfigMap stopped the Deployment")
	}
	if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool { return strings.HasPrefix(s, "Warning ReconciliationFailed ConfigMapReconciled") }) {
		t.Errorf("events %v", ev)
	}

	// Fixed sources: the group the server would refuse is left out, the rest is served.
	got.Spec.InsecureSources = nil
	if err := e.c.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err, _ := e.reconcile("default"); err != nil {
		t.Fatal(err)
	}
	got = e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	c = meta.FindStatusCondition(got.Status.Conditions, v1.ConditionConfigMapReconciled)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "left out (the server would refuse them): clusterwide-group-g") || got.Status.Policies != 1 {
		t.Errorf("ConfigMapReconciled = %+v, policies %d", c, got.Status.Policies)
	}
	cm := e.get(&corev1.ConfigMap{}, "policy-server-default").(*corev1.ConfigMap)
	if strings.Contains(cm.Data[v1.PoliciesKey], "group-g") || !strings.Contains(cm.Data[v1.PoliciesKey], "clusterwide-good") {
		t.Errorf("policies.yml:\n%s", cm.Data[v1.PoliciesKey])
	}
	if ev := e.events(); !slices.ContainsFunc(ev, func(s string) bool {
		return strings.HasPrefix(s, "Warning PolicyLeftOut clusterwide-group-g") && strings.Contains(s, `spec.expression: value "a() &&"`)
	}) {
		t.Errorf("events %v", ev)
	}
}

func TestPolicyServerDeletion(t *testing.T) {
	ps := psObj("default")
	ps.Finalizers = []string{v1.PolicyServerFinalizer}
	wh := &admv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterwide-a", Labels: map[string]string{v1.PolicyServerLabel: "default"}}}
	other := &admv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "clusterwide-b", Labels: map[string]string{v1.PolicyServerLabel: "other"}}}
	e := newPSEnv(t, ps, wh, other)
	if _, err, _ := e.reconcile("default"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(e.ctx, e.get(&v1.PolicyServer{}, "default")); err != nil {
		t.Fatal(err)
	}
	res, err, _ := e.reconcile("default")
	if err != nil || res.RequeueAfter != 2*time.Second {
		t.Fatalf("with a webhook left: %v, %v", res, err)
	}
	got := e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionPolicyWebhooksCleanedUp); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("PolicyWebhooksCleanedUp = %+v", c)
	}
	if err := e.c.Delete(e.ctx, wh); err != nil {
		t.Fatal(err)
	}
	if res, err, _ := e.reconcile("default"); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("without webhooks: %v, %v", res, err)
	}
	if err := e.c.Get(e.ctx, client.ObjectKey{Name: "default"}, &v1.PolicyServer{}); !apierrors.IsNotFound(err) {
		t.Errorf("the PolicyServer is still there (finalizer kept): %v", err)
	}
	if _, err, _ := e.reconcile("default"); err != nil {
		t.Errorf("reconcile of a deleted PolicyServer: %v", err)
	}
}

func TestMapSecret(t *testing.T) {
	a, b := psObj("a"), psObj("b")
	b.Spec.ImagePullSecret = "regcred"
	e := newPSEnv(t, a, b)
	names := func(reqs []reconcile.Request) (out []string) {
		for _, r := range reqs {
			out = append(out, r.Name)
		}
		return out
	}
	if got := names(e.r.mapSecret(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: psTestNS, Name: "tollgate-ca"}})); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("CA secret: %v", got)
	}
	if got := names(e.r.mapSecret(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: psTestNS, Name: "regcred"}})); !slices.Equal(got, []string{"b"}) {
		t.Errorf("pull secret: %v", got)
	}
	if got := names(e.r.mapSecret(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: psTestNS, Name: "other"}})); len(got) != 0 {
		t.Errorf("other secret: %v", got)
	}
}

func TestMapPolicyToServer(t *testing.T) {
	reqs := mapPolicyToServer(context.Background(), psCAP("a", "", ""))
	if len(reqs) != 1 || reqs[0].Name != "default" {
		t.Errorf("%v", reqs)
	}
	reqs = mapPolicyToServer(context.Background(), &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "g"},
		Spec: v1.AdmissionPolicyGroupSpec{WebhookSpec: v1.WebhookSpec{PolicyServer: "edge"}}})
	if len(reqs) != 1 || reqs[0].Name != "edge" || reqs[0].Namespace != "" {
		t.Errorf("%v", reqs)
	}
}

// checkServerRBAC: ps's Role grants get, list and watch on its ConfigMap only, and its
// RoleBinding binds that Role to sa; both are owned by ps. A subject changed by hand is put back.
func checkServerRBAC(t *testing.T, e *psEnv, ps, sa string) {
	t.Helper()
	name := "policy-server-" + ps
	role := e.get(&rbacv1.Role{}, name).(*rbacv1.Role)
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{name}, Verbs: []string{"get", "list", "watch"}}}
	if !equality.Semantic.DeepEqual(role.Rules, wantRules) {
		t.Errorf("Role rules %+v", role.Rules)
	}
	checkOwned(t, role, ps)
	rb := e.get(&rbacv1.RoleBinding{}, name).(*rbacv1.RoleBinding)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: psTestNS}}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}) || !equality.Semantic.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding %+v %+v", rb.RoleRef, rb.Subjects)
	}
	checkOwned(t, rb, ps)
	rb.Subjects = []rbacv1.Subject{{Kind: "ServiceAccount", Name: "intruder", Namespace: psTestNS}}
	if err := e.c.Update(e.ctx, rb); err != nil {
		t.Fatal(err)
	}
	if _, _, writes := e.reconcile(ps); !slices.Contains(writes, "apply RoleBinding "+name) {
		t.Errorf("a changed RoleBinding is not put back: writes %v", writes)
	}
	rb = e.get(&rbacv1.RoleBinding{}, name).(*rbacv1.RoleBinding)
	if !equality.Semantic.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding subjects after the reconcile %+v", rb.Subjects)
	}
}

// TestPolicyServerConflictIsQuiet: a write that conflicts (another writer, or the cache behind
// the controller's own last write) is retried soon without an error, a failed condition or an
// Event.
func TestPolicyServerConflictIsQuiet(t *testing.T) {
	e := newPSEnv(t, psObj("default"), psCAP("a", "default", `{"x":1}`))
	if _, err, _ := e.reconcile("default"); err != nil {
		t.Fatal(err)
	}
	e.events()
	a := e.get(&v1.ClusterAdmissionPolicy{}, "a").(*v1.ClusterAdmissionPolicy)
	a.Spec.Settings = runtime.RawExtension{Raw: []byte(`{"x":2}`)}
	if err := e.c.Update(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	e.failUpdate = apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "policy-server-default", errors.New("the object has been modified"))
	res, err, _ := e.reconcile("default")
	if err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("conflict: result %+v, err %v", res, err)
	}
	ps := e.get(&v1.PolicyServer{}, "default").(*v1.PolicyServer)
	if !meta.IsStatusConditionTrue(ps.Status.Conditions, v1.ConditionConfigMapReconciled) {
		t.Errorf("a conflict failed the condition: %+v", meta.FindStatusCondition(ps.Status.Conditions, v1.ConditionConfigMapReconciled))
	}
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events on a conflict: %v", ev)
	}
	e.failUpdate = nil
	if _, err, writes := e.reconcile("default"); err != nil || !slices.Contains(writes, "apply ConfigMap policy-server-default") {
		t.Fatalf("after the conflict: err %v, writes %v", err, writes)
	}
}

// OTEL_* variables of spec.env that `tollgate serve` would refuse at start are named in the
// DeploymentReconciled condition's message, and the Deployment is written all the same (its new
// pods do not start, the old ones keep serving); valid ones, and one from a Secret, which the
// controller cannot see, say nothing; a header's value never shows.
func TestPolicyServerTelemetryEnv(t *testing.T) {
	valid := []corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc:4317"},
		{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Value: "grpc"},
		// from a Secret: not known to the controller, left out
		{Name: "OTEL_EXPORTER_OTLP_HEADERS", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "collector-token"}, Key: "headers"}}},
		{Name: "TOLLGATE_WORKERS", Value: "4"},
	}
	for _, c := range []struct {
		add    []corev1.EnvVar
		want   string // "" for no message
		hidden string
	}{
		{nil, "", ""},
		{[]corev1.EnvVar{{Name: "OTEL_TRACES_SAMPLER", Value: "sometimes"}}, `OTEL_TRACES_SAMPLER="sometimes": want always_on`, ""},
		{[]corev1.EnvVar{{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Value: "thrift"}}, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="thrift"`, ""},
		{[]corev1.EnvVar{{Name: "OTEL_EXPORTER_OTLP_TRACES_HEADERS", Value: "authorization Bearer s3cr3t"}},
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1 is not key=value", "s3cr3t"},
	} {
		ps := psObj("p")
		ps.Spec.Env = append(slices.Clone(valid), c.add...)
		e := newPSEnv(t, ps)
		if _, err, _ := e.reconcile("p"); err != nil {
			t.Fatalf("%v: %v", c.add, err)
		}
		got := e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
		cond := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeploymentReconciled)
		switch {
		case cond == nil || cond.Status != metav1.ConditionTrue:
			t.Errorf("%v: DeploymentReconciled = %+v, want True", c.add, cond)
		case c.want == "" && cond.Message != "":
			t.Errorf("valid telemetry variables: DeploymentReconciled's message %q, want none", cond.Message)
		case c.want != "" && (!strings.Contains(cond.Message, "spec.env: the policy server will not start: "+c.want) ||
			c.hidden != "" && strings.Contains(cond.Message, c.hidden)):
			t.Errorf("%v: DeploymentReconciled's message %q, want it to name %q (and not show %q)", c.add, cond.Message, c.want, c.hidden)
		}
		dep := e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
		if env := dep.Spec.Template.Spec.Containers[0].Env; len(env) != len(ps.Spec.Env) {
			t.Errorf("%v: the Deployment's env %+v, want spec.env as written", c.add, env)
		}
	}
}

// Edits of spec.env reach the Deployment (a value changed, a variable added, one removed); a
// name defined twice, which the CRD refuses at admission (a PolicyServer stored under an older
// CRD may have one), is named in DeploymentReconciled and a Warning Event, and the Deployment is
// not written. The fake client's server-side apply refuses the duplicate too, with "failed to
// merge config: expected objects with types from the same schema"; the apiserver's own refusal
// and the CRD's are in test/e2e/psenv TestPolicyServerEnv.
func TestPolicyServerEnvEdits(t *testing.T) {
	ps := psObj("p")
	ps.Spec.Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}
	e := newPSEnv(t, ps)
	if _, err, _ := e.reconcile("p"); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]corev1.EnvVar{
		{{Name: "A", Value: "10"}, {Name: "B", Value: "2"}},
		{{Name: "A", Value: "10"}, {Name: "B", Value: "2"}, {Name: "C", Value: "3"}},
		{{Name: "A", Value: "10"}, {Name: "C", Value: "3"}},
		nil,
	} {
		got := e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
		got.Spec.Env = env
		if err := e.c.Update(e.ctx, got); err != nil {
			t.Fatal(err)
		}
		if _, err, _ := e.reconcile("p"); err != nil {
			t.Fatalf("env %v: %v", env, err)
		}
		dep := e.get(&appsv1.Deployment{}, "policy-server-p").(*appsv1.Deployment)
		if have := dep.Spec.Template.Spec.Containers[0].Env; !equality.Semantic.DeepEqual(have, env) {
			t.Errorf("the Deployment's env %v, want %v", have, env)
		}
	}
	_ = e.events()
	got := e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	got.Spec.Env = []corev1.EnvVar{{Name: "C", Value: "3"}, {Name: "C", Value: "4"}}
	if err := e.c.Update(e.ctx, got); err != nil {
		t.Fatal(err)
	}
	const named = `spec.env: "C" is defined twice (entries 0 and 1)`
	_, err, writes := e.reconcile("p")
	if err == nil || !strings.Contains(err.Error(), named) || slices.Contains(writes, "apply Deployment policy-server-p") {
		t.Errorf("C twice: err %v, writes %v", err, writes)
	}
	got = e.get(&v1.PolicyServer{}, "p").(*v1.PolicyServer)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionDeploymentReconciled); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, named) {
		t.Errorf("DeploymentReconciled = %+v", c)
	}
	if ev := e.events(); len(ev) != 1 || !strings.Contains(ev[0], named) {
		t.Errorf("events %v", ev)
	}
}
