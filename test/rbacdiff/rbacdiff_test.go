package rbacdiff

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/apis/rbac"
	rbacv1helpers "k8s.io/kubernetes/pkg/apis/rbac/v1"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	rbacauthorizer "k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
)

// policy is any valid policy: the settings need one beside "rbac".
const policy = `
policy:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  reinvocationPolicy: Never
  mutations: [{patchType: ApplyConfiguration, applyConfiguration: {expression: "Object{}"}}]
`

// objects is one cluster's RBAC: every rule form, binding form and subject
// kind, aggregation chains and a cycle. No check below is allowed by two
// bindings or meets two missing roles: the apiserver lists bindings in its
// informer's (random) order, which would only change which binding or error
// a reason names.
const objects = `
clusterRoles:
- metadata: {name: pod-reader}
  rules:
  - {apiGroups: [""], resources: [pods, pods/log], verbs: [get, list]}
- metadata: {name: health-reader}
  rules:
  - {nonResourceURLs: [/healthz, "/logs/*"], verbs: [get]}
- metadata: {name: status-updater}
  rules:
  - {apiGroups: ["*"], resources: ["*/status"], verbs: [update, patch]}
- metadata: {name: one-configmap}
  rules:
  - {apiGroups: [""], resources: [configmaps], resourceNames: [cfg, ""], verbs: ["*"]}
- metadata: {name: monitoring, labels: {rbac.example.com/aggregate-to-admin: "true"}}
  aggregationRule:
    clusterRoleSelectors: [{matchLabels: {rbac.example.com/aggregate-to-monitoring: "true"}}]
  rules:
  - {apiGroups: [stale.example.com], resources: [things], verbs: [get]}
- metadata: {name: monitoring-endpoints, labels: {rbac.example.com/aggregate-to-monitoring: "true"}}
  rules:
  - {apiGroups: [""], resources: [services, endpoints], verbs: [get, list, watch]}
- metadata: {name: monitoring-metrics, labels: {rbac.example.com/aggregate-to-monitoring: "true"}}
  rules:
  - {nonResourceURLs: [/metrics], verbs: [get]}
- metadata: {name: admin}
  aggregationRule:
    clusterRoleSelectors:
    - {matchLabels: {rbac.example.com/aggregate-to-admin: "true"}}
    - {matchExpressions: [{key: tier, operator: In, values: [admin, edit]}]}
- metadata: {name: admin-secrets, labels: {tier: admin}}
  rules:
  - {apiGroups: [""], resources: [secrets], verbs: [get, delete]}
  - {apiGroups: [""], resources: [services], verbs: [get, list, watch]}
- metadata: {name: ping, labels: {ring: "true"}}
  aggregationRule: {clusterRoleSelectors: [{matchLabels: {ring: "true"}}]}
- metadata: {name: pong, labels: {ring: "true"}}
  aggregationRule: {clusterRoleSelectors: [{matchLabels: {ring: "true"}}]}
- metadata: {name: ring-base, labels: {ring: "true"}}
  rules:
  - {apiGroups: [mesh.example.com], resources: [sidecars], verbs: [bypass]}
- metadata: {name: everything}
  rules:
  - {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
  - {nonResourceURLs: ["*"], verbs: ["*"]}
roles:
- metadata: {name: deployer, namespace: team-a}
  rules:
  - {apiGroups: [apps], resources: [deployments, deployments/scale], verbs: [create, update]}
- metadata: {name: secret-reader, namespace: team-b}
  rules:
  - {apiGroups: [""], resources: [secrets], resourceNames: [other], verbs: [get]}
roleBindings:
- metadata: {name: alice-deployer, namespace: team-a}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}
  subjects: [{kind: User, name: alice}]
- metadata: {name: readers, namespace: team-a}
  roleRef: {kind: ClusterRole, name: pod-reader}
  subjects: [{kind: Group, name: team-a-devs}, {kind: ServiceAccount, name: builder}]
- metadata: {name: dangling, namespace: team-b}
  roleRef: {kind: Role, name: missing}
  subjects: [{kind: User, name: alice}]
- metadata: {name: deployer-elsewhere, namespace: team-c}
  roleRef: {kind: Role, name: deployer}
  subjects: [{kind: User, name: alice}]
- metadata: {name: secrets, namespace: team-b}
  roleRef: {kind: Role, name: secret-reader}
  subjects: [{kind: ServiceAccount, name: builder, namespace: team-a}]
- metadata: {name: ring, namespace: team-c}
  roleRef: {kind: ClusterRole, name: pong}
  subjects: [{kind: Group, name: team-a-devs}]
clusterRoleBindings:
- metadata: {name: monitoring}
  roleRef: {kind: ClusterRole, name: monitoring}
  subjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]
- metadata: {name: health}
  roleRef: {kind: ClusterRole, name: health-reader}
  subjects: [{kind: Group, name: "system:authenticated"}]
- metadata: {name: status}
  roleRef: {kind: ClusterRole, name: status-updater}
  subjects: [{kind: User, name: bob}]
- metadata: {name: carol-cfg}
  roleRef: {kind: ClusterRole, name: one-configmap}
  subjects: [{kind: User, name: carol}]
- metadata: {name: root}
  roleRef: {kind: ClusterRole, name: everything}
  subjects: [{kind: Group, name: admins}]
- metadata: {name: admins}
  roleRef: {kind: ClusterRole, name: admin}
  subjects: [{kind: User, name: frank}]
- metadata: {name: gone}
  roleRef: {kind: ClusterRole, name: not-there}
  subjects: [{kind: User, name: bob}]
`

// reference builds Kubernetes' authorizer chain over the objects: the
// aggregation controller runs on a fake clientset until the ClusterRoles
// stop changing, then the RBAC authorizer reads listers over the result.
func reference(t *testing.T, objs *rbacObjects) authorizer.Authorizer {
	t.Helper()
	var initial []runtime.Object
	for _, o := range objs.ClusterRoles {
		initial = append(initial, o.DeepCopy())
	}
	client := fake.NewClientset(initial...)
	factory := informers.NewSharedInformerFactory(client, 0)
	ctrl := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), client.RbacV1())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	go ctrl.Run(ctx, 1)

	// Settled: the same resourceVersions for a second.
	var roles []rbacv1.ClusterRole
	last, stableSince := "", time.Now()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		list, err := client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var versions []string
		for _, r := range list.Items {
			versions = append(versions, r.Name+"@"+r.ResourceVersion)
		}
		if v := strings.Join(versions, ","); v != last {
			last, stableSince = v, time.Now()
		} else if time.Since(stableSince) > time.Second {
			roles = list.Items
			break
		}
	}
	if roles == nil {
		t.Fatal("the aggregation controller did not settle in 60 s")
	}

	index := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	add := func(i cache.Indexer, o any) {
		if err := i.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	rIdx, rbIdx, crIdx, crbIdx := index(), index(), index(), index()
	for _, o := range objs.Roles {
		add(rIdx, o)
	}
	for _, o := range objs.RoleBindings {
		add(rbIdx, o)
	}
	for i := range roles {
		add(crIdx, &roles[i])
	}
	for _, o := range objs.ClusterRoleBindings {
		add(crbIdx, o)
	}
	rbacAuthz := rbacauthorizer.New(
		&rbacauthorizer.RoleGetter{Lister: rbaclisters.NewRoleLister(rIdx)},
		&rbacauthorizer.RoleBindingLister{Lister: rbaclisters.NewRoleBindingLister(rbIdx)},
		&rbacauthorizer.ClusterRoleGetter{Lister: rbaclisters.NewClusterRoleLister(crIdx)},
		&rbacauthorizer.ClusterRoleBindingLister{Lister: rbaclisters.NewClusterRoleBindingLister(crbIdx)},
	)
	return union.New(authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup), rbacAuthz)
}

// rbacObjects are the objects as the apiserver stores them (API defaults applied).
type rbacObjects struct {
	Roles               []*rbacv1.Role               `json:"roles"`
	ClusterRoles        []*rbacv1.ClusterRole        `json:"clusterRoles"`
	RoleBindings        []*rbacv1.RoleBinding        `json:"roleBindings"`
	ClusterRoleBindings []*rbacv1.ClusterRoleBinding `json:"clusterRoleBindings"`
}

func decodeObjects(t *testing.T, y string) *rbacObjects {
	t.Helper()
	o := &rbacObjects{}
	if err := yaml.UnmarshalStrict([]byte(y), o); err != nil {
		t.Fatal(err)
	}
	for _, r := range o.RoleBindings {
		rbacv1helpers.SetObjectDefaults_RoleBinding(r)
	}
	for _, r := range o.ClusterRoleBindings {
		rbacv1helpers.SetObjectDefaults_ClusterRoleBinding(r)
	}
	return o
}

// tollgate is the module's authorizer, from settings holding the objects.
func tollgate(t *testing.T, objectsYAML string) authorizer.Authorizer {
	t.Helper()
	var rbacSettings map[string]any
	if err := yaml.Unmarshal([]byte(objectsYAML), &rbacSettings); err != nil {
		t.Fatal(err)
	}
	rbacYAML, err := yaml.Marshal(map[string]any{"rbac": rbacSettings})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Compile([]byte(policy + string(rbacYAML)))
	if err != nil {
		t.Fatal(err)
	}
	return e.Authorizer()
}

func TestAuthorizerMatchesKubernetes(t *testing.T) {
	ref := reference(t, decodeObjects(t, objects))
	tg := tollgate(t, objects)

	users := []user.Info{
		&user.DefaultInfo{Name: "alice", Groups: []string{"system:authenticated"}},
		&user.DefaultInfo{Name: "bob", Groups: []string{"system:authenticated"}},
		&user.DefaultInfo{Name: "carol"},
		&user.DefaultInfo{Name: "dave", Groups: []string{"team-a-devs", "system:authenticated"}},
		&user.DefaultInfo{Name: "erin", Groups: []string{"admins"}},
		&user.DefaultInfo{Name: "frank"},
		&user.DefaultInfo{Name: "root", Groups: []string{"system:masters"}},
		&user.DefaultInfo{Name: "system:masters"},
		&user.DefaultInfo{Name: "builder", Groups: []string{"system:authenticated"}},
		serviceaccount.UserInfo("team-a", "builder", ""),
		serviceaccount.UserInfo("team-b", "builder", ""),
		serviceaccount.UserInfo("monitoring", "prometheus", ""),
	}
	verbs := []string{"get", "list", "create", "update", "delete", "bypass"}
	groups := []string{"", "apps", "mesh.example.com", "stale.example.com"}
	resources := []string{"pods", "pods/log", "pods/exec", "deployments", "deployments/status", "deployments/scale",
		"configmaps", "services", "endpoints", "secrets", "things", "sidecars"}
	namespaces := []string{"", "team-a", "team-b", "team-c"}
	names := []string{"", "cfg", "other"}
	paths := []string{"", "/", "/healthz", "/healthz/etcd", "/logs", "/logs/", "/logs/kube-apiserver.log", "/metrics", "/api/v1"}

	var checks []authorizer.AttributesRecord
	for _, u := range users {
		for _, verb := range verbs {
			for _, g := range groups {
				for _, r := range resources {
					res, sub, _ := strings.Cut(r, "/")
					for _, ns := range namespaces {
						for _, n := range names {
							checks = append(checks, authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: g, APIVersion: "*",
								Resource: res, Subresource: sub, Namespace: ns, Name: n, ResourceRequest: true})
						}
					}
				}
			}
			for _, p := range paths {
				checks = append(checks, authorizer.AttributesRecord{User: u, Verb: verb, Path: p})
			}
		}
	}
	allowed, mismatches := 0, 0
	ctx := context.Background()
	for i := range checks {
		a := &checks[i]
		rd, rr, re := ref.Authorize(ctx, a)
		td, tr, te := tg.Authorize(ctx, a)
		if rd != td || rr != tr || fmt.Sprint(re) != fmt.Sprint(te) {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("%s: Kubernetes %v %q %v, tollgate %v %q %v", describe(a), rd, rr, re, td, tr, te)
			}
		}
		if rd == authorizer.DecisionAllow {
			allowed++
		}
	}
	t.Logf("%d checks, %d allowed by Kubernetes, %d mismatches", len(checks), allowed, mismatches)
	if allowed < 1000 || allowed == len(checks) {
		t.Fatalf("%d of %d checks allowed: the fixture does not exercise both outcomes", allowed, len(checks))
	}
}

func describe(a authorizer.Attributes) string {
	u := a.GetUser()
	if !a.IsResourceRequest() {
		return fmt.Sprintf("%s %v: %s %q", u.GetName(), u.GetGroups(), a.GetVerb(), a.GetPath())
	}
	return fmt.Sprintf("%s %v: %s group=%q %s/%s ns=%q name=%q", u.GetName(), u.GetGroups(), a.GetVerb(), a.GetAPIGroup(),
		a.GetResource(), a.GetSubresource(), a.GetNamespace(), a.GetName())
}

// TestValidationMatchesKubernetes: each object is refused by the module
// exactly when the apiserver's validation refuses it, with the apiserver's
// field errors (under the object's place in the settings).
func TestValidationMatchesKubernetes(t *testing.T) {
	cases := []struct{ list, object string }{
		{"roles", `{metadata: {name: ok, namespace: ns}, rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]}`},
		{"roles", `{metadata: {name: a}}`},
		{"roles", `{metadata: {name: "a/b", namespace: ns}}`},
		{"roles", `{metadata: {name: "..", namespace: ns}}`},
		{"roles", `{metadata: {name: a, namespace: ns}, rules: [{nonResourceURLs: [/x], verbs: [get]}]}`},
		{"roles", `{metadata: {name: a, namespace: ns}, rules: [{apiGroups: [""], resources: [pods]}]}`},
		{"roles", `{metadata: {name: a, namespace: "Bad_NS"}}`},
		{"clusterRoles", `{metadata: {name: a}, rules: [{verbs: [get]}]}`},
		{"clusterRoles", `{metadata: {name: a}, rules: [{nonResourceURLs: [/x], apiGroups: [""], verbs: [get]}]}`},
		{"clusterRoles", `{metadata: {name: a}, rules: [{nonResourceURLs: [/x], resourceNames: [nm], verbs: [get]}]}`},
		{"clusterRoles", `{metadata: {name: a}, aggregationRule: {}}`},
		{"clusterRoles", `{metadata: {name: a}, aggregationRule: {clusterRoleSelectors: [{matchExpressions: [{key: k, operator: In}]}]}}`},
		{"clusterRoles", `{metadata: {name: a}, aggregationRule: {clusterRoleSelectors: [{matchLabels: {"bad key!": v}}]}}`},
		{"clusterRoles", `{metadata: {name: a, labels: {"x": "bad value!"}}}`},
		{"roleBindings", `{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: r}, subjects: [{kind: ServiceAccount, name: s}]}`},
		{"roleBindings", `{metadata: {name: a, namespace: ns}, roleRef: {kind: Foo, name: r}}`},
		{"roleBindings", `{metadata: {name: a, namespace: ns}, roleRef: {apiGroup: x, kind: Role}}`},
		{"roleBindings", `{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: "a/b"}}`},
		{"roleBindings", `{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: r}, subjects: [{kind: ServiceAccount, name: "Bad"}, {kind: ServiceAccount, name: s, apiGroup: x}, {kind: User}, {kind: Group, name: g, apiGroup: v1}, {kind: Robot, name: r}]}`},
		{"clusterRoleBindings", `{metadata: {name: a}, roleRef: {kind: Role, name: r}}`},
		{"clusterRoleBindings", `{metadata: {name: a}, roleRef: {kind: ClusterRole, name: r}, subjects: [{kind: ServiceAccount, name: s}]}`},
		{"clusterRoleBindings", `{metadata: {name: a}, roleRef: {kind: ClusterRole, name: r}, subjects: [{kind: User, name: u}, {kind: ServiceAccount, name: s, namespace: ns}]}`},
	}
	for _, c := range cases {
		t.Run(c.list+" "+c.object, func(t *testing.T) {
			want := kubernetesValidate(t, c.list, c.object)
			_, err := engine.Decode([]byte(policy + "rbac:\n  " + c.list + ":\n  - " + c.object + "\n"))
			if len(want) == 0 {
				if err != nil {
					t.Fatalf("Kubernetes accepts it, tollgate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Kubernetes refuses it (%v), tollgate accepts it", want.ToAggregate())
			}
			for _, fe := range want {
				if w := "rbac." + c.list + "[0]." + fe.Error(); !strings.Contains(err.Error(), w) {
					t.Errorf("tollgate's error\n  %v\nlacks Kubernetes'\n  %s", err, w)
				}
			}
		})
	}
}

// kubernetesValidate is the apiserver's create validation of one object
// (defaulted, converted to the internal type, validated).
func kubernetesValidate(t *testing.T, list, object string) field.ErrorList {
	t.Helper()
	objs := decodeObjects(t, list+": ["+object+"]")
	var errs field.ErrorList
	switch list {
	case "roles":
		in := &rbac.Role{}
		must(t, rbacv1helpers.Convert_v1_Role_To_rbac_Role(objs.Roles[0], in, nil))
		errs = rbacvalidation.ValidateRole(in)
	case "clusterRoles":
		in := &rbac.ClusterRole{}
		must(t, rbacv1helpers.Convert_v1_ClusterRole_To_rbac_ClusterRole(objs.ClusterRoles[0], in, nil))
		errs = rbacvalidation.ValidateClusterRole(in, rbacvalidation.ClusterRoleValidationOptions{})
	case "roleBindings":
		in := &rbac.RoleBinding{}
		must(t, rbacv1helpers.Convert_v1_RoleBinding_To_rbac_RoleBinding(objs.RoleBindings[0], in, nil))
		errs = rbacvalidation.ValidateRoleBinding(in)
	case "clusterRoleBindings":
		in := &rbac.ClusterRoleBinding{}
		must(t, rbacv1helpers.Convert_v1_ClusterRoleBinding_To_rbac_ClusterRoleBinding(objs.ClusterRoleBindings[0], in, nil))
		errs = rbacvalidation.ValidateClusterRoleBinding(in)
	}
	return errs
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
