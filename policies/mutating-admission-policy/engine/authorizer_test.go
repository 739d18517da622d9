package engine

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// rbacFixture is a small cluster's RBAC: every rule kind the authorizer
// distinguishes, bound in the ways RBAC allows.
const rbacFixture = `
rbac:
  clusterRoles:
  - metadata: {name: pod-reader}
    rules:
    - {apiGroups: [""], resources: [pods, pods/log], verbs: [get, list]}
  - apiVersion: rbac.authorization.k8s.io/v1
    kind: ClusterRole
    metadata: {name: health-reader}
    rules:
    - {nonResourceURLs: [/healthz, "/logs/*"], verbs: [get]}
  - metadata: {name: status-updater}
    rules:
    - {apiGroups: ["*"], resources: ["*/status"], verbs: [update, patch]}
  - metadata: {name: one-configmap}
    rules:
    - {apiGroups: [""], resources: [configmaps], resourceNames: [cfg], verbs: ["*"]}
  - metadata: {name: monitoring}
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
  - metadata: {name: everything}
    rules:
    - {apiGroups: ["*"], resources: ["*"], verbs: ["*"]}
    - {nonResourceURLs: ["*"], verbs: ["*"]}
  roles:
  - metadata: {name: deployer, namespace: team-a}
    rules:
    - {apiGroups: [apps], resources: [deployments], verbs: [create, update]}
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
`

func decodeFixture(tb testing.TB, yamlSettings string) *RBAC {
	tb.Helper()
	s, err := Decode([]byte(policyWith(setReplicas5) + yamlSettings))
	if err != nil {
		tb.Fatal(err)
	}
	return s.RBAC
}

func userInfo(name string, groups ...string) user.Info {
	return &user.DefaultInfo{Name: name, Groups: groups}
}

func saUser(ns, name string) user.Info { return serviceaccount.UserInfo(ns, name, "") }

// res is a resource check: verb group resource[/sub] namespace name.
func res(u user.Info, verb, group, resource, namespace, name string) authorizer.Attributes {
	r, sub, _ := strings.Cut(resource, "/")
	return &authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "*", Resource: r, Subresource: sub,
		Namespace: namespace, Name: name, ResourceRequest: true}
}

func path(u user.Info, verb, p string) authorizer.Attributes {
	return &authorizer.AttributesRecord{User: u, Verb: verb, Path: p}
}

func TestAuthorizerRBAC(t *testing.T) {
	authz := newAuthorizer(decodeFixture(t, rbacFixture))
	alice := userInfo("alice", "system:authenticated")
	dev := userInfo("dave", "team-a-devs", "system:authenticated")
	const noReason = ""
	cases := []struct {
		name   string
		attrs  authorizer.Attributes
		allow  bool
		reason string
	}{
		// Role bound by a RoleBinding in its namespace.
		{"role in its namespace", res(alice, "create", "apps", "deployments", "team-a", "web"), true,
			`RBAC: allowed by RoleBinding "alice-deployer/team-a" of Role "deployer" to User "alice"`},
		{"role: other verb", res(alice, "delete", "apps", "deployments", "team-a", ""), false, noReason},
		{"role: other group", res(alice, "create", "", "deployments", "team-a", ""), false, noReason},
		{"role: other namespace without binding", res(alice, "create", "apps", "deployments", "team-x", ""), false, noReason},
		{"role: cluster-wide", res(alice, "create", "apps", "deployments", "", ""), false, noReason},
		{"role: other user", res(userInfo("mallory", "system:authenticated"), "create", "apps", "deployments", "team-a", ""), false, noReason},
		// A RoleBinding refers to a Role of its own namespace only.
		{"role of another namespace", res(alice, "create", "apps", "deployments", "team-c", ""), false,
			`RBAC: role.rbac.authorization.k8s.io "deployer" not found`},
		{"missing role", res(alice, "create", "apps", "deployments", "team-b", ""), false,
			`RBAC: role.rbac.authorization.k8s.io "missing" not found`},
		// A RoleBinding to a ClusterRole grants it in the binding's namespace only.
		{"clusterrole in a namespace: group", res(dev, "list", "", "pods", "team-a", ""), true,
			`RBAC: allowed by RoleBinding "readers/team-a" of ClusterRole "pod-reader" to Group "team-a-devs"`},
		{"clusterrole in a namespace: other namespace", res(dev, "list", "", "pods", "team-b", ""), false, noReason},
		{"clusterrole in a namespace: cluster-wide", res(dev, "list", "", "pods", "", ""), false, noReason},
		{"subresource listed", res(dev, "get", "", "pods/log", "team-a", "web"), true,
			`RBAC: allowed by RoleBinding "readers/team-a" of ClusterRole "pod-reader" to Group "team-a-devs"`},
		{"subresource not listed", res(dev, "get", "", "pods/exec", "team-a", "web"), false, noReason},
		// Service accounts: the subject's namespace defaults to the RoleBinding's.
		{"service account, defaulted namespace", res(saUser("team-a", "builder"), "get", "", "pods", "team-a", ""), true,
			`RBAC: allowed by RoleBinding "readers/team-a" of ClusterRole "pod-reader" to ServiceAccount "builder/team-a"`},
		{"service account of another namespace", res(saUser("team-b", "builder"), "get", "", "pods", "team-a", ""), false, noReason},
		{"service account name as a plain user", res(userInfo("builder"), "get", "", "pods", "team-a", ""), false, noReason},
		// Aggregation: the aggregated role holds the selected roles' rules, not its own.
		{"aggregated rule", res(saUser("monitoring", "prometheus"), "watch", "", "endpoints", "kube-system", ""), true,
			`RBAC: allowed by ClusterRoleBinding "monitoring" of ClusterRole "monitoring" to ServiceAccount "prometheus/monitoring"`},
		{"aggregated non-resource rule", path(saUser("monitoring", "prometheus"), "get", "/metrics"), true,
			`RBAC: allowed by ClusterRoleBinding "monitoring" of ClusterRole "monitoring" to ServiceAccount "prometheus/monitoring"`},
		{"aggregated role's own rule is replaced", res(saUser("monitoring", "prometheus"), "get", "stale.example.com", "things", "", ""), false, noReason},
		// Wildcards.
		{"*/status", res(userInfo("bob"), "patch", "apps", "deployments/status", "team-a", "web"), true,
			`RBAC: allowed by ClusterRoleBinding "status" of ClusterRole "status-updater" to User "bob"`},
		{"*/status, not the resource", res(userInfo("bob"), "patch", "apps", "deployments", "team-a", "web"), false, noReason},
		{"*/status, other subresource", res(userInfo("bob"), "patch", "apps", "deployments/scale", "team-a", "web"), false, noReason},
		{"everything", res(userInfo("erin", "admins"), "deletecollection", "example.com", "widgets/finalize", "", ""), true,
			`RBAC: allowed by ClusterRoleBinding "root" of ClusterRole "everything" to Group "admins"`},
		{"everything, non-resource", path(userInfo("erin", "admins"), "post", "/apis/anything"), true,
			`RBAC: allowed by ClusterRoleBinding "root" of ClusterRole "everything" to Group "admins"`},
		// resourceNames.
		{"resourceName listed", res(userInfo("carol"), "delete", "", "configmaps", "any", "cfg"), true,
			`RBAC: allowed by ClusterRoleBinding "carol-cfg" of ClusterRole "one-configmap" to User "carol"`},
		{"resourceName not listed", res(userInfo("carol"), "delete", "", "configmaps", "any", "other"), false, noReason},
		{"resourceNames and no name (list, create)", res(userInfo("carol"), "list", "", "configmaps", "any", ""), false, noReason},
		// Non-resource URLs.
		{"path exact", path(alice, "get", "/healthz"), true,
			`RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health-reader" to Group "system:authenticated"`},
		{"path prefix", path(alice, "get", "/logs/kube-apiserver.log"), true,
			`RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health-reader" to Group "system:authenticated"`},
		{"path prefix without its slash", path(alice, "get", "/logs"), false, noReason},
		{"path not exact", path(alice, "get", "/healthz/etcd"), false, noReason},
		{"path other verb", path(alice, "post", "/healthz"), false, noReason},
		{"a resource rule never allows a path", path(dev, "get", "/api/v1/namespaces/team-a/pods"), false, noReason},
		// The privileged group comes first and needs no binding.
		{"system:masters", res(userInfo("root", user.SystemPrivilegedGroup), "escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""), true, ""},
		{"system:masters path", path(userInfo("root", user.SystemPrivilegedGroup), "delete", "/anything"), true, ""},
		{"system:masters as a user name", res(userInfo(user.SystemPrivilegedGroup), "get", "", "pods", "", ""), false, noReason},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, reason, err := authz.Authorize(context.Background(), c.attrs)
			if err != nil {
				t.Fatalf("error %v", err)
			}
			want := authorizer.DecisionNoOpinion
			if c.allow {
				want = authorizer.DecisionAllow
			}
			if d != want || reason != c.reason {
				t.Fatalf("decision %v reason %q, want %v %q", d, reason, want, c.reason)
			}
		})
	}
}

func TestAuthorizerWithoutRBAC(t *testing.T) {
	authz := newAuthorizer(nil)
	d, reason, err := authz.Authorize(context.Background(), res(userInfo("root", "system:authenticated", user.SystemPrivilegedGroup), "delete", "", "nodes", "", "n1"))
	if d != authorizer.DecisionAllow || reason != "" || err != nil {
		t.Fatalf("system:masters: %v %q %v", d, reason, err)
	}
	d, reason, err = authz.Authorize(context.Background(), res(userInfo("alice", "system:authenticated"), "get", "", "pods", "default", ""))
	if d != authorizer.DecisionNoOpinion || reason != "tollgate: the policy sandbox has no authorizer" || err != nil {
		t.Fatalf("alice: %v %q %v", d, reason, err)
	}
}

func TestAuthorizerSeveralErrors(t *testing.T) {
	authz := newAuthorizer(decodeFixture(t, `
rbac:
  clusterRoleBindings:
  - metadata: {name: a}
    roleRef: {kind: ClusterRole, name: gone}
    subjects: [{kind: Group, name: "system:authenticated"}]
  roleBindings:
  - metadata: {name: b, namespace: ns}
    roleRef: {kind: Role, name: gone-too}
    subjects: [{kind: User, name: alice}]
`))
	_, reason, _ := authz.Authorize(context.Background(), res(userInfo("alice", "system:authenticated"), "get", "", "pods", "ns", ""))
	want := `RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "gone-too" not found]`
	if reason != want {
		t.Fatalf("reason %q, want %q", reason, want)
	}
}

func TestAggregateClusterRoles(t *testing.T) {
	rule := func(r string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{r}, Verbs: []string{"get"}}
	}
	r := decodeFixture(t, `
rbac:
  clusterRoles:
  # admin selects edit (itself aggregated) and its own label, like the bootstrap admin/edit/view roles.
  - metadata: {name: admin}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {to-admin: "true"}}]}
  - metadata: {name: edit, labels: {to-admin: "true"}}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {to-edit: "true"}}, {matchExpressions: [{key: extra, operator: Exists}]}]}
  - metadata: {name: z-edit-part, labels: {to-edit: "true"}}
    rules: [{apiGroups: [""], resources: [secrets], verbs: [get]}, {apiGroups: [""], resources: [pods], verbs: [get]}]
  - metadata: {name: a-edit-part, labels: {to-edit: "true", extra: "1"}}
    rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
  - metadata: {name: admin-part, labels: {to-admin: "true"}}
    rules: [{apiGroups: [""], resources: [nodes], verbs: [get]}]
  # A cycle: each holds the other's base rules and its own selection.
  - metadata: {name: ping, labels: {ring: "true"}}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {ring: "true"}}]}
  - metadata: {name: pong, labels: {ring: "true"}}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {ring: "true"}}]}
  - metadata: {name: ring-base, labels: {ring: "true"}}
    rules: [{apiGroups: [""], resources: [services], verbs: [get]}]
  - metadata: {name: selects-nothing}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {nobody: "true"}}]}
    rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
`)
	got := aggregateClusterRoles(r.ClusterRoles)
	want := map[string][]rbacv1.PolicyRule{
		// selectors in order, selected roles by name, duplicates dropped
		"edit":  {rule("pods"), rule("secrets")},
		"admin": {rule("nodes"), rule("pods"), rule("secrets")},
		"ping":  {rule("services")},
		"pong":  {rule("services")},
	}
	for name, w := range want {
		if !reflect.DeepEqual(got[name], w) {
			t.Errorf("%s: rules %v, want %v", name, got[name], w)
		}
	}
	if len(got["selects-nothing"]) != 0 {
		t.Errorf("selects-nothing keeps rules %v", got["selects-nothing"])
	}
	if len(got["z-edit-part"]) != 2 {
		t.Errorf("a role without aggregationRule changed: %v", got["z-edit-part"])
	}
}

// TestAuthorizerFromCEL checks what CEL expressions see: resource checks,
// authorizer.requestResource, serviceAccount(...) and path(...), and reasons.
func TestAuthorizerFromCEL(t *testing.T) {
	// An authorizer check costs 350000 (Kubernetes' estimate), so each
	// mutation, with its own cost limit of 1e6, makes at most two.
	checks := [][2]string{
		{"deploy", "string(authorizer.group('apps').resource('deployments').namespace('team-a').check('create').allowed())"},
		{"request", "string(authorizer.requestResource.check('delete').allowed())"},
		{"requestReason", "authorizer.requestResource.check('delete').reason()"},
		{"sa", "string(authorizer.serviceAccount('team-a', 'builder').group('').resource('pods').namespace('team-a').check('list').allowed())"},
		{"saElsewhere", "string(authorizer.serviceAccount('team-a', 'builder').group('').resource('pods').namespace('team-b').check('list').allowed())"},
		{"saLog", "string(authorizer.serviceAccount('team-a', 'builder').group('').resource('pods').subresource('log').namespace('team-a').name('web').check('get').allowed())"},
		{"path", "string(authorizer.path('/healthz').check('get').allowed())"},
		{"missing", "authorizer.group('apps').resource('deployments').namespace('team-b').check('create').reason()"},
		{"errored", "string(authorizer.group('').resource('secrets').check('get').errored())"},
	}
	var mutations strings.Builder
	for _, c := range checks {
		mutations.WriteString("\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: " + jsonQuote("Object{data: {'"+c[0]+"': "+c[1]+"}}"))
	}
	settings := policy("", mutations.String(), "") + rbacFixture
	e := compile(t, settings)
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: team-a}\n"
	run := func(u protocol.UserInfo) map[string]string {
		t.Helper()
		r := req{object: cm}.build(t)
		r.UserInfo = u
		res, err := e.Evaluate(context.Background(), r)
		if err != nil || !res.Accepted || res.Object == nil {
			t.Fatalf("Evaluate: %v %+v", err, res)
		}
		var out struct{ Data map[string]string }
		if err := json.Unmarshal(res.Object, &out); err != nil {
			t.Fatal(err)
		}
		return out.Data
	}
	got := run(protocol.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}})
	want := map[string]string{
		"deploy": "true", "request": "false", "requestReason": "",
		"sa": "true", "saElsewhere": "false", "saLog": "true",
		"path":    "true",
		"missing": `RBAC: role.rbac.authorization.k8s.io "missing" not found`,
		"errored": "false",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("alice sees\n  %v\nwant\n  %v", got, want)
	}
	// carol may do anything to the ConfigMap named cfg: requestResource carries the name.
	got = run(protocol.UserInfo{Username: "carol"})
	if got["request"] != "true" || got["requestReason"] != `RBAC: allowed by ClusterRoleBinding "carol-cfg" of ClusterRole "one-configmap" to User "carol"` || got["path"] != "false" {
		t.Fatalf("carol sees %v", got)
	}
	// system:masters is allowed everything; serviceAccount(...) checks are the service account's, not the requester's.
	got = run(protocol.UserInfo{Username: "root", Groups: []string{"system:masters"}})
	if got["deploy"] != "true" || got["request"] != "true" || got["path"] != "true" || got["saElsewhere"] != "false" {
		t.Fatalf("system:masters sees %v", got)
	}
}

// TestAuthorizerFromCELWithoutRBAC: without "rbac", only system:masters is allowed.
func TestAuthorizerFromCELWithoutRBAC(t *testing.T) {
	e := compile(t, policy("", `
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{data: {'a': string(authorizer.requestResource.check('create').allowed()), 'r': authorizer.requestResource.check('create').reason()}}"`, ""))
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: team-a}\n"
	for _, c := range []struct {
		groups []string
		want   string
	}{
		{[]string{"system:authenticated"}, `{a: "false", r: "tollgate: the policy sandbox has no authorizer"}`},
		{[]string{"system:authenticated", "system:masters"}, `{a: "true", r: ""}`},
	} {
		r := req{object: cm}.build(t)
		r.UserInfo.Groups = c.groups
		res, err := e.Evaluate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		var got, want struct{ Data map[string]string }
		_ = json.Unmarshal(res.Object, &got)
		_ = json.Unmarshal(mustJSON(t, "data: "+c.want), &want)
		if !reflect.DeepEqual(got.Data, want.Data) {
			t.Errorf("groups %v: data %v, want %v", c.groups, got.Data, want.Data)
		}
	}
}

func TestInvalidRBACSettings(t *testing.T) {
	cases := []struct {
		name, rbac string
		want       []string
	}{
		{"not an object", `rbac: []`, []string{`rbac: must be an object`}},
		{"unknown key", `rbac: {role: []}`, []string{`rbac: unknown field "role"`, `known keys: roles, clusterRoles`}},
		{"null item", `rbac: {roles: [null]}`, []string{`rbac.roles[0]: Invalid value: "null": must be a Role object`}},
		{"wrong kind", `rbac: {roles: [{kind: ClusterRole, metadata: {name: a, namespace: b}}]}`, []string{`rbac.roles[0].kind: Unsupported value: "ClusterRole": supported values: "Role"`}},
		{"wrong version", `rbac: {clusterRoles: [{apiVersion: rbac.authorization.k8s.io/v1beta1, metadata: {name: a}}]}`, []string{`rbac.clusterRoles[0].apiVersion: Unsupported value: "rbac.authorization.k8s.io/v1beta1"`}},
		{"unknown field", `rbac: {clusterRoles: [{metadata: {name: a}, rule: []}]}`, []string{`rbac.clusterRoles[0]`, `unknown field "rule"`}},
		{"role without namespace", `rbac: {roles: [{metadata: {name: a}}]}`, []string{`rbac.roles[0].metadata.namespace: Required value`}},
		{"bad name", `rbac: {clusterRoles: [{metadata: {name: "a/b"}}]}`, []string{`rbac.clusterRoles[0].metadata.name: Invalid value: "a/b": may not contain '/'`}},
		{"rule without verbs", `rbac: {clusterRoles: [{metadata: {name: a}, rules: [{apiGroups: [""], resources: [pods]}]}]}`, []string{`rbac.clusterRoles[0].rules[0].verbs: Required value`}},
		{"rule without groups", `rbac: {clusterRoles: [{metadata: {name: a}, rules: [{resources: [pods], verbs: [get]}]}]}`, []string{`rbac.clusterRoles[0].rules[0].apiGroups: Required value`}},
		{"non-resource URL in a Role", `rbac: {roles: [{metadata: {name: a, namespace: ns}, rules: [{nonResourceURLs: [/x], verbs: [get]}]}]}`, []string{`rbac.roles[0].rules[0].nonResourceURLs: Invalid value: ["/x"]: namespaced rules cannot apply to non-resource URLs`}},
		{"mixed rule", `rbac: {clusterRoles: [{metadata: {name: a}, rules: [{nonResourceURLs: [/x], resources: [pods], verbs: [get]}]}]}`, []string{`rules cannot apply to both regular resources and non-resource URLs`}},
		{"empty aggregation", `rbac: {clusterRoles: [{metadata: {name: a}, aggregationRule: {}}]}`, []string{`rbac.clusterRoles[0].aggregationRule.clusterRoleSelectors: Required value`}},
		{"bad selector", `rbac: {clusterRoles: [{metadata: {name: a}, aggregationRule: {clusterRoleSelectors: [{matchExpressions: [{key: k, operator: Bad}]}]}}]}`, []string{`rbac.clusterRoles[0].aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator: Invalid value: "Bad"`}},
		{"roleRef kind", `rbac: {roleBindings: [{metadata: {name: a, namespace: ns}, roleRef: {kind: User, name: x}}, {metadata: {name: b, namespace: ns}, roleRef: {kind: Role, name: x}}, {metadata: {name: c, namespace: ns}, roleRef: {kind: Foo, name: x}}]}`,
			[]string{`rbac.roleBindings[0].roleRef.kind: Unsupported value: "User": supported values: "Role", "ClusterRole"`, `rbac.roleBindings[2].roleRef.kind: Unsupported value: "Foo"`}},
		{"ClusterRoleBinding to a Role", `rbac: {clusterRoleBindings: [{metadata: {name: a}, roleRef: {kind: Role, name: x}}]}`, []string{`rbac.clusterRoleBindings[0].roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"`}},
		{"roleRef group", `rbac: {clusterRoleBindings: [{metadata: {name: a}, roleRef: {apiGroup: rbac.example.com, kind: ClusterRole, name: x}}]}`, []string{`rbac.clusterRoleBindings[0].roleRef.apiGroup: Unsupported value: "rbac.example.com"`}},
		{"roleRef name", `rbac: {clusterRoleBindings: [{metadata: {name: a}, roleRef: {kind: ClusterRole}}]}`, []string{`rbac.clusterRoleBindings[0].roleRef.name: Required value`}},
		{"subject kind", `rbac: {clusterRoleBindings: [{metadata: {name: a}, roleRef: {kind: ClusterRole, name: x}, subjects: [{kind: Users, name: u}]}]}`, []string{`rbac.clusterRoleBindings[0].subjects[0].kind: Unsupported value: "Users": supported values: "ServiceAccount", "User", "Group"`}},
		{"cluster-wide service account without namespace", `rbac: {clusterRoleBindings: [{metadata: {name: a}, roleRef: {kind: ClusterRole, name: x}, subjects: [{kind: ServiceAccount, name: sa}]}]}`, []string{`rbac.clusterRoleBindings[0].subjects[0].namespace: Required value`}},
		{"service account name", `rbac: {roleBindings: [{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: x}, subjects: [{kind: ServiceAccount, name: "Bad_Name"}]}]}`, []string{`rbac.roleBindings[0].subjects[0].name: Invalid value: "Bad_Name"`}},
		{"service account group", `rbac: {roleBindings: [{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: x}, subjects: [{kind: ServiceAccount, name: sa, apiGroup: rbac.authorization.k8s.io}]}]}`, []string{`rbac.roleBindings[0].subjects[0].apiGroup: Unsupported value: "rbac.authorization.k8s.io": supported values: ""`}},
		{"user group", `rbac: {roleBindings: [{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: x}, subjects: [{kind: User, name: u, apiGroup: v1}]}]}`, []string{`rbac.roleBindings[0].subjects[0].apiGroup: Unsupported value: "v1"`}},
		{"subject name", `rbac: {roleBindings: [{metadata: {name: a, namespace: ns}, roleRef: {kind: Role, name: x}, subjects: [{kind: Group}]}]}`, []string{`rbac.roleBindings[0].subjects[0].name: Required value`}},
		{"duplicate", `rbac: {roles: [{metadata: {name: a, namespace: ns}}, {metadata: {name: a, namespace: m}}, {metadata: {name: a, namespace: ns}}]}`, []string{`rbac.roles[2].metadata.name: Duplicate value: "ns/a"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(policyWith(setReplicas5) + "\n" + c.rbac + "\n"))
			checkInvalidSettings(t, err, c.want)
		})
	}
}

func TestRBACDefaults(t *testing.T) {
	r := decodeFixture(t, `
rbac:
  clusterRoles: [{metadata: {name: a, namespace: ignored}}]
  roleBindings: [{metadata: {name: b, namespace: ns}, roleRef: {kind: ClusterRole, name: a}, subjects: [{kind: User, name: u}, {kind: Group, name: g}, {kind: ServiceAccount, name: s}]}]
`)
	if r.ClusterRoles[0].Namespace != "" {
		t.Errorf("cluster-scoped object kept namespace %q", r.ClusterRoles[0].Namespace)
	}
	rb := r.RoleBindings[0]
	if rb.RoleRef.APIGroup != rbacv1.GroupName || rb.Subjects[0].APIGroup != rbacv1.GroupName || rb.Subjects[1].APIGroup != rbacv1.GroupName || rb.Subjects[2].APIGroup != "" {
		t.Errorf("defaults not applied: %+v", rb)
	}
	if rb.Kind != "RoleBinding" || rb.APIVersion != "rbac.authorization.k8s.io/v1" {
		t.Errorf("type meta %+v", rb.TypeMeta)
	}
}

// BenchmarkAuthorizer is one check against the fixture: an allowed
// RoleBinding check (after all ClusterRoleBindings) and a check nothing allows.
func BenchmarkAuthorizer(b *testing.B) {
	authz := newAuthorizer(decodeFixture(b, rbacFixture))
	for _, c := range []struct {
		name  string
		attrs authorizer.Attributes
	}{
		{"allowed", res(userInfo("dave", "team-a-devs", "system:authenticated"), "list", "", "pods", "team-a", "")},
		{"no opinion", res(userInfo("mallory", "system:authenticated"), "delete", "", "secrets", "team-a", "s")},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, _, err := authz.Authorize(context.Background(), c.attrs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
