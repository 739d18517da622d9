package mapdiff_test

import (
	"context"
	"fmt"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Cases that use CEL's authorizer. The module answers from the settings'
// "rbac" objects; the reference plugin asks a table authorizer that allows
// exactly the checks those objects allow (RBAC's decisions themselves are
// compared with Kubernetes' RBAC authorizer in test/rbacdiff). What these
// cases compare is everything around the decision: the attributes each side
// builds (authorizer.requestResource from the request, serviceAccount(...),
// path(...), the user of the request), and how decisions and reasons reach
// variables, match conditions and mutations.

// decision is the reference's answer to one check.
type decision struct {
	allowed bool
	reason  string
}

// checkKey names a check by every attribute RBAC reads.
func checkKey(a authorizer.Attributes) string {
	u := a.GetUser()
	if !a.IsResourceRequest() {
		return fmt.Sprintf("%s %v: %s path %s", u.GetName(), u.GetGroups(), a.GetVerb(), a.GetPath())
	}
	return fmt.Sprintf("%s %v: %s %s/%s/%s ns=%s name=%s", u.GetName(), u.GetGroups(), a.GetVerb(),
		a.GetAPIGroup(), a.GetResource(), a.GetSubresource(), a.GetNamespace(), a.GetName())
}

// tableAuthorizer answers listed checks as listed and anything else with
// "no opinion" and no reason.
type tableAuthorizer map[string]decision

func (t tableAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, ok := t[checkKey(a)]
	if !ok || !d.allowed {
		return authorizer.DecisionNoOpinion, d.reason, nil
	}
	return authorizer.DecisionAllow, d.reason, nil
}

func init() {
	for _, c := range authzCases {
		cases = append(cases, c.dcase)
		caseAuthz[c.name] = c.authz
	}
}

// caseAuthz is the reference's authorizer of a case, by case name (default:
// the test context's, which allows everything).
var caseAuthz = map[string]tableAuthorizer{}

const configMapIn = `
apiVersion: v1
kind: ConfigMap
metadata: {name: %s, namespace: %s}
data: {k: v}
`

const deploymentIn = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: %s}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: app, image: api:1}]
`

var authzCases = []struct {
	dcase
	authz tableAuthorizer
}{
	{
		dcase: dcase{name: "authorizer requestResource in a variable",
			settings: `
policy:
  metadata: {name: authz}
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}
  reinvocationPolicy: Never
  variables:
  - {name: mayDelete, expression: "authorizer.requestResource.check('delete')"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{annotations: {
          "may-delete": string(variables.mayDelete.allowed()),
          "why": variables.mayDelete.reason()}}}
rbac:
  roles:
  - metadata: {name: cfg-admin, namespace: team-a}
    rules: [{apiGroups: [""], resources: [configmaps], resourceNames: [cfg], verbs: [delete]}]
  roleBindings:
  - metadata: {name: alice-cfg, namespace: team-a}
    roleRef: {kind: Role, name: cfg-admin}
    subjects: [{kind: User, name: alice}]
`,
			requests: []dreq{
				{name: "allowed by a RoleBinding", op: "CREATE", object: fmt.Sprintf(configMapIn, "cfg", "team-a"), expect: `RBAC: allowed by RoleBinding`},
				{name: "update, allowed", op: "UPDATE", object: fmt.Sprintf(configMapIn, "cfg", "team-a"), oldObject: fmt.Sprintf(configMapIn, "cfg", "team-a"), expect: `"may-delete":"true"`},
				{name: "other name", op: "CREATE", object: fmt.Sprintf(configMapIn, "other", "team-a"), expect: `"may-delete":"false"`},
				{name: "other user", op: "CREATE", object: fmt.Sprintf(configMapIn, "cfg", "team-a"), user: "bob", groups: []string{"system:authenticated"}, expect: `"may-delete":"false"`},
				{name: "system:masters", op: "CREATE", object: fmt.Sprintf(configMapIn, "other", "team-b"), user: "root", groups: []string{"system:masters", "system:authenticated"}, expect: `"may-delete":"true"`},
			},
		},
		authz: tableAuthorizer{
			"alice [system:authenticated]: delete /configmaps/ ns=team-a name=cfg":                 {true, `RBAC: allowed by RoleBinding "alice-cfg/team-a" of Role "cfg-admin" to User "alice"`},
			"root [system:masters system:authenticated]: delete /configmaps/ ns=team-b name=other": {true, ""},
		},
	},
	{
		dcase: dcase{name: "authorizer serviceAccount in a match condition, path in a mutation",
			settings: `
policy:
  metadata: {name: authz-sa}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  reinvocationPolicy: Never
  matchConditions:
  - name: deployer-may-scale
    expression: >
      authorizer.serviceAccount(object.metadata.namespace, 'deployer').group('apps')
        .resource('deployments').subresource('scale').namespace(object.metadata.namespace)
        .check('update').allowed()
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "replace", path: "/spec/replicas",
          value: authorizer.path('/healthz').check('get').allowed() ? 3 : 2}]
rbac:
  clusterRoles:
  - metadata: {name: scaler}
    rules: [{apiGroups: ["*"], resources: ["*/scale"], verbs: [update]}]
  - metadata: {name: health}
    rules: [{nonResourceURLs: [/healthz, /livez], verbs: [get]}]
  roleBindings:
  - metadata: {name: deployer-scales, namespace: default}
    roleRef: {kind: ClusterRole, name: scaler}
    subjects: [{kind: ServiceAccount, name: deployer}]
  clusterRoleBindings:
  - metadata: {name: health}
    roleRef: {kind: ClusterRole, name: health}
    subjects: [{kind: Group, name: monitoring}]
`,
			requests: []dreq{
				{name: "condition true, path not allowed", op: "CREATE", object: fmt.Sprintf(deploymentIn, "default"), expect: `"replicas":2`},
				{name: "condition true, path allowed", op: "CREATE", object: fmt.Sprintf(deploymentIn, "default"), user: "mon", groups: []string{"monitoring"}, expect: `"replicas":3`},
				{name: "condition false", op: "CREATE", object: fmt.Sprintf(deploymentIn, "batch"), user: "mon", groups: []string{"monitoring"}},
			},
		},
		authz: tableAuthorizer{
			"system:serviceaccount:default:deployer [system:serviceaccounts system:serviceaccounts:default]: update apps/deployments/scale ns=default name=": {true, `RBAC: allowed by RoleBinding "deployer-scales/default" of ClusterRole "scaler" to ServiceAccount "deployer/default"`},
			"mon [monitoring]: get path /healthz": {true, `RBAC: allowed by ClusterRoleBinding "health" of ClusterRole "health" to Group "monitoring"`},
		},
	},
}
