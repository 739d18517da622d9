package jsonengine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
)

// The authorizer's cases, compared with package engine by TestAgainstEngine:
// the attributes each check builds (requestResource, serviceAccount, path,
// selectors), RBAC's decisions and reasons (role bindings, cluster role
// bindings, aggregated cluster roles, missing roles, system:masters, the
// sandbox without rbac), the library's errors, and the cost of a check (the
// library cost estimator's 350,000: three checks exceed one expression's
// limit).

const configMapTeamA = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: team-a}
data: {k: v}
`

func authzPolicy(mutation, rbac string) string {
	return `
policy:
  metadata: {name: authz}
  matchConstraints:
    resourceRules:
    - {apiGroups: ["", apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps, deployments]}
  reinvocationPolicy: Never
  mutations:` + mutation + "\n" + rbac
}

// annotated is a policy with a variable per key (name, string-valued
// expression: one check each, as a check costs a third of an expression's
// limit) and a mutation that sets the annotations to them.
func annotated(rbac string, kv ...string) string {
	var vars, fields []string
	for i := 0; i < len(kv); i += 2 {
		name := strings.ReplaceAll(kv[i], "-", "_")
		b, _ := json.Marshal(kv[i+1])
		vars = append(vars, fmt.Sprintf("  - {name: %s, expression: %s}", name, b))
		fields = append(fields, fmt.Sprintf("%q: variables.%s", kv[i], name))
	}
	p := authzPolicy(ac("Object{metadata: Object.metadata{annotations: {"+strings.Join(fields, ", ")+"}}}"), rbac)
	return strings.Replace(p, "  mutations:", "  variables:\n"+strings.Join(vars, "\n")+"\n  mutations:", 1)
}

const teamRBAC = `
rbac:
  roles:
  - metadata: {name: cfg-admin, namespace: team-a}
    rules: [{apiGroups: [""], resources: [configmaps], resourceNames: [cfg], verbs: [delete]}]
  roleBindings:
  - metadata: {name: alice-cfg, namespace: team-a}
    roleRef: {kind: Role, name: cfg-admin}
    subjects: [{kind: User, name: alice}]
  - metadata: {name: bob-missing, namespace: team-a}
    roleRef: {kind: Role, name: no-such-role}
    subjects: [{kind: User, name: bob}]
  - metadata: {name: deployer-scales, namespace: team-a}
    roleRef: {kind: ClusterRole, name: scaler}
    subjects: [{kind: ServiceAccount, name: deployer}]
  clusterRoles:
  - metadata: {name: scaler}
    rules: [{apiGroups: ["*"], resources: ["*/scale"], verbs: [update]}]
  - metadata: {name: health}
    rules: [{nonResourceURLs: [/healthz, /live*], verbs: [get]}]
  - metadata: {name: viewer}
    aggregationRule: {clusterRoleSelectors: [{matchLabels: {view: "true"}}]}
  - metadata: {name: view-pods, labels: {view: "true"}}
    rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
  - metadata: {name: view-pods-again, labels: {view: "true"}}
    rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}, {apiGroups: [""], resources: [configmaps], verbs: [list]}]
  clusterRoleBindings:
  - metadata: {name: monitoring}
    roleRef: {kind: ClusterRole, name: health}
    subjects: [{kind: Group, name: monitoring}]
  - metadata: {name: viewers}
    roleRef: {kind: ClusterRole, name: viewer}
    subjects: [{kind: Group, name: viewers}]
  - metadata: {name: carol-missing}
    roleRef: {kind: ClusterRole, name: no-such-cluster-role}
    subjects: [{kind: User, name: carol}, {kind: User, name: bob}]
`

var authzCases = []struct {
	name, settings string
	requests       []testRequest
}{
	{"authorizer: requestResource, bindings and reasons", annotated(teamRBAC,
		"may-delete", `string(authorizer.requestResource.check("delete").allowed())`,
		"why", `authorizer.requestResource.check("delete").reason()`,
		"list-cm", `authorizer.group("").resource("configmaps").namespace("team-a").check("list").reason()`,
		"errored", `string(authorizer.requestResource.check("get").errored())`,
		"error", `authorizer.requestResource.check("get").error()`,
	), []testRequest{
		{op: "CREATE", object: configMapTeamA, want: `RBAC: allowed by RoleBinding \"alice-cfg/team-a\"`},
		{op: "UPDATE", object: configMapTeamA, oldObject: configMapTeamA, user: "bob", groups: []string{"system:authenticated"}, want: `not found`},
		{op: "CREATE", object: configMapTeamA, user: "carol", groups: []string{"viewers"}, want: `ClusterRoleBinding \"viewers\" of ClusterRole \"viewer\"`},
		{op: "CREATE", object: strings.Replace(configMapTeamA, "cfg", "other", 1), user: "root", groups: []string{"system:masters"}, want: `"may-delete":"true"`},
		{op: "CREATE", object: strings.Replace(configMapTeamA, "team-a", "team-b", 1), want: `"may-delete":"false"`},
	}},
	{"authorizer: serviceAccount, path, subresource and selectors", annotated(teamRBAC,
		"scale", `string(authorizer.serviceAccount(object.metadata.namespace, "deployer").group("apps").resource("deployments").subresource("scale").namespace(object.metadata.namespace).check("update").allowed())`,
		"scale-why", `authorizer.serviceAccount(object.metadata.namespace, "deployer").group("apps").resource("deployments").subresource("scale").namespace(object.metadata.namespace).check("update").reason()`,
		"healthz", `authorizer.path("/healthz").check("get").reason()`,
		"livez", `string(authorizer.path("/livez").check("get").allowed())`,
		"pods", `string(authorizer.group("").resource("pods").fieldSelector("spec.nodeName=n1").labelSelector("app in (a,b)").name("p").check("list").allowed())`,
	), []testRequest{
		{op: "CREATE", object: configMapTeamA, user: "mon", groups: []string{"monitoring"}, want: `"healthz":"RBAC: allowed by ClusterRoleBinding \"monitoring\"`},
		{op: "CREATE", object: configMapTeamA, user: "v", groups: []string{"viewers"}, want: `"pods":"true"`},
		{op: "CREATE", object: strings.Replace(configMapTeamA, "team-a", "team-b", 1), want: `"scale":"false"`},
	}},
	{"authorizer: the library's errors", authzPolicy(jp(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"x": string(authorizer.serviceAccount("Bad NS", "x").path("/").check("get").allowed())}}]`)+
		jp(`[JSONPatch{op: "add", path: "/metadata/labels", value: {"x": string(authorizer.path(" ").check("get").allowed())}}]`)+
		jp(`[JSONPatch{op: "add", path: "/metadata/labels", value: {"x": string(authorizer.group("").resource("").check("get").allowed())}}]`), teamRBAC), []testRequest{
		{op: "CREATE", object: configMapTeamA, want: "Invalid service account namespace"},
	}},
	{"authorizer without rbac: the sandbox", annotated("",
		"why", `authorizer.requestResource.check("get").reason()`,
		"masters", `string(authorizer.requestResource.check("get").allowed())`,
	), []testRequest{
		{op: "CREATE", object: configMapTeamA, want: "sandbox"},
		{op: "CREATE", object: configMapTeamA, user: "root", groups: []string{"system:masters"}, want: `"masters":"true"`},
	}},
	{"authorizer: a check costs 350,000", authzPolicy(
		jp(`[JSONPatch{op: "add", path: "/metadata/labels", value: {"two": string(authorizer.requestResource.check("get").allowed() || authorizer.requestResource.check("delete").allowed())}}]`)+
			jp(`[JSONPatch{op: "add", path: "/metadata/annotations", value: {"three": string(authorizer.requestResource.check("get").allowed() || authorizer.requestResource.check("list").allowed() || authorizer.requestResource.check("delete").allowed())}}]`),
		teamRBAC), []testRequest{
		{op: "CREATE", object: configMapTeamA, want: "actual cost limit exceeded"},
		{op: "CREATE", object: configMapTeamA, user: "root", groups: []string{"system:masters"}, want: `"two":"true"`},
	}},
}

// TestRBACErrorsAgainstEngine: invalid "rbac" settings are refused with
// package engine's messages.
func TestRBACErrorsAgainstEngine(t *testing.T) {
	base := authzPolicy(jp(`[]`), "")
	for _, c := range []struct{ name, rbac string }{
		{"not an object", `rbac: [1]`},
		{"unknown key", `rbac: {role: []}`},
		{"rule without verbs and resources", `rbac: {roles: [{metadata: {name: r, namespace: a}, rules: [{apiGroups: [""]}]}]}`},
		{"namespaced non-resource URLs", `rbac: {roles: [{metadata: {name: r, namespace: a}, rules: [{verbs: [get], nonResourceURLs: [/x], resources: [pods]}]}]}`},
		{"role without namespace, bad name", `rbac: {roles: [{metadata: {name: "a/b"}, rules: [{verbs: [get], apiGroups: [""], resources: [pods]}]}]}`},
		{"bad namespace and labels", `rbac: {roles: [{metadata: {name: r, namespace: Team_A, labels: {"-x": "y z"}}, rules: []}]}`},
		{"wrong apiVersion", `rbac: {clusterRoles: [{apiVersion: rbac.authorization.k8s.io/v1beta1, metadata: {name: r}}]}`},
		{"wrong kind", `rbac: {clusterRoles: [{kind: Role, metadata: {name: r}}]}`},
		{"unknown field", `rbac: {clusterRoles: [{metadata: {name: r}, rulez: []}]}`},
		{"empty aggregation rule", `rbac: {clusterRoles: [{metadata: {name: r}, aggregationRule: {clusterRoleSelectors: []}}]}`},
		{"bad aggregation selector", `rbac: {clusterRoles: [{metadata: {name: r}, aggregationRule: {clusterRoleSelectors: [{matchExpressions: [{key: a, operator: Is}]}]}}]}`},
		{"role ref and subjects", `rbac: {clusterRoleBindings: [{metadata: {name: b}, roleRef: {kind: Role, name: ""}, subjects: [{kind: ServiceAccount, name: Bad_SA}, {kind: User, name: u, apiGroup: x}, {kind: Robot, name: r}]}]}`},
		{"duplicates", `rbac: {roleBindings: [{metadata: {name: b, namespace: a}, roleRef: {kind: Role, name: r}, subjects: [{kind: User, name: u}]}, {metadata: {name: b, namespace: a}, roleRef: {kind: ClusterRole, name: r}}]}`},
		{"not an object in a list", `rbac: {roles: [3]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			settings, err := yaml.YAMLToJSON([]byte(base + c.rbac + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, want := engine.Compile(settings)
			if want == nil {
				t.Fatal("package engine accepts the settings")
			}
			_, got := Compile(settings)
			if got == nil || got.Error() != want.Error() {
				t.Fatalf("errors differ\npackage engine: %v\njsonengine:     %v", want, got)
			}
		})
	}
}
