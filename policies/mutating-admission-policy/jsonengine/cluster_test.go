package jsonengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/policies/mutating-admission-policy/engine"
)

// fromCluster settings (Engine.WithCluster), compared with package engine's
// WithCluster on the same cluster: one table of namespaces, parameter
// objects, kind scopes and authorizer answers (with errors where a host call
// would fail), answering package engine's Cluster and this package's. Both
// engines must give the same outcome AND ask the cluster the same questions
// (a session recorded with one module replays with the other): the label
// selector string, the scope probe, the SubjectAccessReview attributes.

type tableCluster struct {
	namespaces map[string]string // name -> Namespace JSON
	nsErr      map[string]string // name -> the host's error
	scopes     map[string]bool   // "apiVersion/kind" -> namespaced
	scopeErr   string
	params     []string // objects as JSON (with apiVersion, kind, metadata)
	paramsErr  string
	// authz answers by "user verb group resource namespace"; absent: no opinion.
	authz map[string]authzAnswer

	mu    sync.Mutex
	calls []string
}

type authzAnswer struct {
	decision Decision
	reason   string
	err      string
}

func (c *tableCluster) record(call string) {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
}

// questions are the distinct calls made, sorted.
func (c *tableCluster) questions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, q := range c.calls {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	sort.Strings(out)
	c.calls = nil
	return out
}

func (c *tableCluster) namespace(name string) (map[string]any, error) {
	c.record("namespace " + name)
	if msg, ok := c.nsErr[name]; ok {
		return nil, errors.New(msg)
	}
	js, ok := c.namespaces[name]
	if !ok {
		return nil, fmt.Errorf("Cannot find v1/Namespace named '%s'", name)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *tableCluster) ParamsNamespaced(apiVersion, kind string) (bool, error) {
	c.record("scope " + apiVersion + "/" + kind)
	if c.scopeErr != "" {
		return false, errors.New(c.scopeErr)
	}
	return c.scopes[apiVersion+"/"+kind], nil
}

func (c *tableCluster) listParams(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error) {
	c.record(fmt.Sprintf("params %s/%s ns=%q name=%q selector=%q", apiVersion, kind, namespace, name, labelSelector))
	if c.paramsErr != "" {
		return nil, errors.New(c.paramsErr)
	}
	sel, err := labels.Parse(labelSelector)
	if err != nil {
		return nil, fmt.Errorf("bad selector %q: %v", labelSelector, err)
	}
	var out []map[string]any
	for _, js := range c.params {
		var m map[string]any
		if err := json.Unmarshal([]byte(js), &m); err != nil {
			return nil, err
		}
		u := unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() != apiVersion || u.GetKind() != kind || u.GetNamespace() != namespace {
			continue
		}
		if (name != "" && u.GetName() != name) || !sel.Matches(labels.Set(u.GetLabels())) {
			continue
		}
		// list items come without apiVersion and kind
		delete(m, "apiVersion")
		delete(m, "kind")
		out = append(out, m)
	}
	return out, nil
}

func (c *tableCluster) authorize(user string, groups []string, verb, group, version, resource, subresource, namespace, name string) (Decision, string, error) {
	key := strings.Join([]string{user, verb, group, resource, namespace}, " ")
	c.record(fmt.Sprintf("can_i user=%s groups=%v verb=%s group=%q version=%q resource=%s subresource=%q namespace=%q name=%q",
		user, groups, verb, group, version, resource, subresource, namespace, name))
	a, ok := c.authz[key]
	if !ok {
		return DecisionNoOpinion, "", nil
	}
	var err error
	if a.err != "" {
		err = errors.New(a.err)
	}
	return a.decision, a.reason, err
}

// jsonCluster is the table as this package's Cluster.
type jsonCluster struct{ *tableCluster }

func (c jsonCluster) Namespace(name string) (map[string]any, error) { return c.namespace(name) }

func (c jsonCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]map[string]any, error) {
	return c.listParams(apiVersion, kind, namespace, name, labelSelector)
}

func (c jsonCluster) Authorize(r AuthorizationRequest) (Decision, string, error) {
	if !r.ResourceRequest {
		return DecisionNoOpinion, "non-resource", nil
	}
	return c.authorize(r.User, r.Groups, r.Verb, r.APIGroup, r.APIVersion, r.Resource, r.Subresource, r.Namespace, r.Name)
}

// engineCluster is the table as package engine's Cluster.
type engineCluster struct{ *tableCluster }

func (c engineCluster) Namespace(name string) (*corev1.Namespace, error) {
	m, err := c.namespace(name)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(m)
	ns := &corev1.Namespace{}
	if err := json.Unmarshal(b, ns); err != nil {
		return nil, err
	}
	return ns, nil
}

func (c engineCluster) Params(apiVersion, kind, namespace, name, labelSelector string) ([]*unstructured.Unstructured, error) {
	ms, err := c.listParams(apiVersion, kind, namespace, name, labelSelector)
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, len(ms))
	for i, m := range ms {
		b, _ := json.Marshal(m)
		d, err := DecodeObject(b) // integers as int64, as the guest decodes them
		if err != nil {
			return nil, err
		}
		out[i] = &unstructured.Unstructured{Object: d}
	}
	return out, nil
}

func (c engineCluster) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if !a.IsResourceRequest() {
		return authorizer.DecisionNoOpinion, "non-resource", nil
	}
	var user string
	var groups []string
	if u := a.GetUser(); u != nil {
		user, groups = u.GetName(), u.GetGroups()
	}
	d, reason, err := c.authorize(user, groups, a.GetVerb(), a.GetAPIGroup(), a.GetAPIVersion(), a.GetResource(), a.GetSubresource(), a.GetNamespace(), a.GetName())
	switch d {
	case DecisionAllow:
		return authorizer.DecisionAllow, reason, err
	case DecisionDeny:
		return authorizer.DecisionDeny, reason, err
	}
	return authorizer.DecisionNoOpinion, reason, err
}

const clusterSidecar = `
fromCluster: true
policy:
  metadata: {name: sidecar}
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
    namespaceSelector: {matchLabels: {mesh: enabled}}
  matchConditions:
  - {name: may-not-bypass, expression: '!authorizer.group("mesh.example.com").resource("sidecars").namespace(request.namespace).check("bypass").allowed()'}
  reinvocationPolicy: Never
  variables:
  - {name: deny, expression: 'authorizer.group("").resource("secrets").namespace(request.namespace).check("get").reason()'}
  - {name: errored, expression: 'string(authorizer.group("").resource("pods").namespace(request.namespace).check("exec").errored())'}
  - {name: error, expression: 'authorizer.group("").resource("pods").namespace(request.namespace).check("exec").error()'}
  - {name: path, expression: 'authorizer.path("/healthz").check("get").reason()'}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{metadata: Object.metadata{
          labels: {"team": namespaceObject.metadata.labels["team"]},
          annotations: {"image": string(params.data.image), "deny": variables.deny, "errored": variables.errored,
            "error": variables.error, "path": variables.path,
            "finalizers": namespaceObject.spec.finalizers.join(","), "phase": namespaceObject.status.phase}}}
binding:
  paramRef: {name: mesh-config, parameterNotFoundAction: Deny}
`

const clusterSelected = `
fromCluster: true
policy:
  metadata: {name: replicas}
  paramKind: {apiVersion: example.com/v1, kind: Setting}
  matchConstraints:
    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
    namespaceSelector: {matchExpressions: [{key: env, operator: NotIn, values: [prod, staging]}]}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch: {expression: '[JSONPatch{op: "add", path: "/metadata/labels/" + params.metadata.name, value: string(params.spec.replicas)}]'}
binding:
  paramRef:
    selector:
      matchLabels: {kind: replicas}
      matchExpressions: [{key: tier, operator: In, values: [web, api]}, {key: legacy, operator: DoesNotExist}, {key: kind, operator: Exists}]
    parameterNotFoundAction: Allow
`

func newTableCluster() *tableCluster {
	return &tableCluster{
		namespaces: map[string]string{
			"mesh":  `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"mesh","labels":{"mesh":"enabled","team":"payments","kubernetes.io/metadata.name":"mesh"}},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}`,
			"plain": `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"plain","labels":{"team":"x"}}}`,
			"prod":  `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"prod","labels":{"env":"prod"}}}`,
			"dev":   `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"dev","labels":{"env":"dev"}}}`,
		},
		nsErr:  map[string]string{"secret": "kubernetes/get_resource: Policy has not been granted access to Kubernetes v1/Namespace resources. The violation has been reported."},
		scopes: map[string]bool{"v1/ConfigMap": true},
		params: []string{
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mesh-config","namespace":"mesh"},"data":{"image":"mesh/proxy:1.2"}}`,
			`{"apiVersion":"example.com/v1","kind":"Setting","metadata":{"name":"a","labels":{"kind":"replicas","tier":"web"}},"spec":{"replicas":3}}`,
			`{"apiVersion":"example.com/v1","kind":"Setting","metadata":{"name":"b","labels":{"kind":"replicas","tier":"api"}},"spec":{"replicas":5}}`,
			`{"apiVersion":"example.com/v1","kind":"Setting","metadata":{"name":"c","labels":{"kind":"replicas","tier":"db"}},"spec":{"replicas":7}}`,
			`{"apiVersion":"example.com/v1","kind":"Setting","metadata":{"name":"d","labels":{"kind":"replicas","tier":"web","legacy":"y"}},"spec":{"replicas":9}}`,
		},
		authz: map[string]authzAnswer{
			"olga bypass mesh.example.com sidecars mesh": {DecisionAllow, "RBAC: allowed by RoleBinding", ""},
			"dev get  secrets mesh":                      {DecisionDeny, "denied by the webhook authorizer", ""},
			"dev exec  pods mesh":                        {DecisionNoOpinion, "", "SubjectAccessReview failed: timeout"},
		},
	}
}

func TestFromClusterAgainstEngine(t *testing.T) {
	pod := func(ns string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: app, namespace: " + ns + "}\nspec: {containers: [{name: app, image: nginx}]}\n"
	}
	deploy := func(ns string) string {
		return strings.Replace(deploymentYAML, "namespace: team-a", "namespace: "+ns, 1)
	}
	dev, olga := []string{"developers", "system:authenticated"}, []string{"mesh-operators", "system:authenticated"}
	for _, c := range []struct {
		name, settings string
		cluster        func(*tableCluster)
		requests       []testRequest
	}{
		{"sidecar: namespace, param, authorizer", clusterSidecar, nil, []testRequest{
			{op: "CREATE", object: pod("mesh"), user: "dev", groups: dev, want: `"errored":"true"`},
			{op: "CREATE", object: pod("mesh"), user: "olga", groups: olga, want: "unchanged"},
			{op: "CREATE", object: pod("plain"), user: "dev", groups: dev, want: "unchanged"},
			{op: "CREATE", object: pod("secret"), user: "dev", groups: dev, want: "Policy has not been granted access to Kubernetes v1/Namespace resources"},
			{op: "CREATE", object: pod("nosuch"), user: "dev", groups: dev, want: "Cannot find v1/Namespace named 'nosuch'"},
		}},
		{"sidecar: param missing", clusterSidecar, func(c *tableCluster) { c.params = nil }, []testRequest{
			{op: "CREATE", object: pod("mesh"), user: "dev", groups: dev, want: "no params found for policy binding with `Deny` parameterNotFoundAction"},
		}},
		{"sidecar: the scope cannot be read", clusterSidecar, func(c *tableCluster) {
			c.scopeErr = "kubernetes/get_resource: Policy has not been granted access to Kubernetes v1/ConfigMap resources"
		}, []testRequest{
			{op: "CREATE", object: pod("mesh"), user: "dev", groups: dev, want: "failed to find the scope of paramKind /v1, Kind=ConfigMap"},
		}},
		{"sidecar: the param cannot be read", clusterSidecar, func(c *tableCluster) { c.paramsErr = "kubernetes/get_resource: connection refused" }, []testRequest{
			{op: "CREATE", object: pod("mesh"), user: "dev", groups: dev, want: "failed to list params: kubernetes/get_resource: connection refused"},
		}},
		{"selected cluster-scoped params", clusterSelected, nil, []testRequest{
			{op: "CREATE", object: deploy("dev"), want: `"a":"3","app":"api","b":"5"`},
			{op: "CREATE", object: deploy("prod"), want: "unchanged"},
		}},
		{"selected params: none, Allow", clusterSelected, func(c *tableCluster) { c.params = c.params[:1] }, []testRequest{
			{op: "CREATE", object: deploy("dev"), want: "unchanged"},
		}},
		{"selected params: the list fails", clusterSelected, func(c *tableCluster) { c.paramsErr = "kubernetes/list_resources_all: forbidden" }, []testRequest{
			{op: "CREATE", object: deploy("dev"), want: "failed to list params: kubernetes/list_resources_all: forbidden"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			settings, err := yaml.YAMLToJSON([]byte(c.settings))
			if err != nil {
				t.Fatal(err)
			}
			table := newTableCluster()
			if c.cluster != nil {
				c.cluster(table)
			}
			ref, err := engine.Compile(settings)
			if err != nil {
				t.Fatalf("package engine refuses the settings: %v", err)
			}
			if !ref.Settings().FromCluster {
				t.Fatal("package engine: not fromCluster")
			}
			ref = ref.WithCluster(engineCluster{table})
			e, err := Compile(settings)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if !e.FromCluster() {
				t.Fatal("FromCluster() is false")
			}
			e = e.WithCluster(jsonCluster{table})
			for i, r := range c.requests {
				req := admissionRequest(t, r)
				want, err := ref.Evaluate(context.Background(), req)
				if err != nil {
					t.Fatalf("request %d: package engine: %v", i, err)
				}
				wantQ := table.questions()
				got, err := e.Evaluate(context.Background(), req)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				gotQ := table.questions()
				w, g := outcome(t, want.Accepted, want.Object, want.Message, want.Code), outcome(t, got.Accepted, got.Object, got.Message, got.Code)
				if w != g {
					t.Fatalf("request %d differs\npackage engine: %s\njsonengine:     %s", i, w, g)
				}
				if !strings.Contains(w, r.want) {
					t.Fatalf("request %d: the outcome does not contain %q (the case does not test what it says): %s", i, r.want, w)
				}
				if strings.Join(wantQ, "\n") != strings.Join(gotQ, "\n") {
					t.Fatalf("request %d: the engines ask the cluster different questions\npackage engine:\n  %s\njsonengine:\n  %s", i, strings.Join(wantQ, "\n  "), strings.Join(gotQ, "\n  "))
				}
			}
		})
	}
}

// TestFromClusterRefusesOfflineObjects: with fromCluster, the settings may
// not also hold params, namespaces or rbac (package engine's message).
func TestFromClusterRefusesOfflineObjects(t *testing.T) {
	base := policyYAML("", jp(`[]`)) + "fromCluster: true\n"
	for _, c := range []struct{ extra, want string }{
		{"params: [{apiVersion: v1, kind: ConfigMap, metadata: {name: x}}]\n", "remove params"},
		{"namespaces: [{metadata: {name: x}}]\nrbac: {roles: []}\n", "remove rbac, namespaces"},
	} {
		settings, err := yaml.YAMLToJSON([]byte(base + c.extra))
		if err != nil {
			t.Fatal(err)
		}
		_, refErr := engine.Compile(settings)
		_, err = Compile(settings)
		if err == nil || refErr == nil || err.Error() != refErr.Error() || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("got %v\npackage engine: %v\nwant the same error, containing %q", err, refErr, c.want)
		}
	}
}
