package helmchart

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tollgate-dev/tollgate/crds"
	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

var allVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// wantClusterRules and wantRoleRules are the controller's permissions, exactly.
var (
	policyKinds      = []string{"policyservers", "clusteradmissionpolicies", "admissionpolicies", "clusteradmissionpolicygroups", "admissionpolicygroups"}
	wantClusterRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"policies.tollgate.dev"}, Resources: policyKinds, Verbs: []string{"get", "list", "watch", "update", "patch"}},
		{APIGroups: []string{"policies.tollgate.dev"}, Resources: suffixed(policyKinds, "/status"), Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"policies.tollgate.dev"}, Resources: suffixed(policyKinds, "/finalizers"), Verbs: []string{"update"}},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}, Verbs: allVerbs},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
	}
	// contextAwarePolicies=true adds what writing the servers' context-aware ClusterRoles needs.
	wantContextAwareRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"escalate", "bind"}},
	}
	wantRoleRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services", "serviceaccounts"}, Verbs: allVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: allVerbs},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: allVerbs},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: allVerbs},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: allVerbs},
	}
)

func suffixed(ss []string, suffix string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s + suffix
	}
	return out
}

func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--values", allValues}} {
		out, err := runHelm(t, append([]string{"lint", "--strict", chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, args...)...)
		if err != nil {
			t.Errorf("helm lint --strict %v: %v\n%s", args, err, out)
		}
	}
}

// TestCRDsAreCopies fails when charts/tollgate/crds differs from crds/: run make crds.
func TestCRDsAreCopies(t *testing.T) {
	want, names, err := crds.Files()
	if err != nil {
		t.Fatal(err)
	}
	got, err := filepath.Glob(filepath.Join(chartDir, "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var gotNames []string
	for _, p := range got {
		gotNames = append(gotNames, filepath.Base(p))
	}
	sort.Strings(gotNames)
	if !slices.Equal(gotNames, names) {
		t.Errorf("charts/tollgate/crds holds %v, crds/ %v: run make crds", gotNames, names)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(chartDir, "crds", n))
		if err == nil && !bytes.Equal(b, want[n]) {
			t.Errorf("charts/tollgate/crds/%s differs from crds/%s: run make crds", n, n)
		}
	}
}

func TestDefaults(t *testing.T) {
	out, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	m := byKey(t, objs)
	const ctrl = "tollgate-controller"
	want := []string{
		"ClusterRole/tollgate-audit", "ClusterRole/" + ctrl, "ClusterRoleBinding/tollgate-audit",
		"ClusterRoleBinding/tollgate-audit-view", "ClusterRoleBinding/" + ctrl, "CronJob/tollgate-audit", "CustomResourceDefinition/clusterreports.openreports.io",
		"CustomResourceDefinition/reports.openreports.io", "Deployment/" + ctrl, "PolicyServer/default",
		"Role/" + ctrl, "RoleBinding/" + ctrl, "Service/" + ctrl + "-metrics", "ServiceAccount/tollgate-audit", "ServiceAccount/" + ctrl,
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("rendered %v, want %v", got, want)
	}
	checkNamespaces(t, objs)
	checkRBAC(t, m, ctrl, ctrl, false)

	var d appsv1.Deployment
	get(t, m, "Deployment/"+ctrl, &d)
	wantArgs := []string{
		"controller", "--namespace=$(POD_NAMESPACE)", "--leader-elect=true", "--metrics-bind-address=:8088",
		"--health-probe-bind-address=:8089", "--ca-secret=tollgate-ca",
		"--always-accept-admission-reviews-on-deployments-namespace=true", "--skip-namespaces=kube-system,kube-node-lease",
		"--log-level=info", "--log-fmt=json",
	}
	c := checkDeployment(t, &d, ctrl, wantArgs, 8088, 8089)
	if c.Image != "ghcr.io/tollgate-dev/tollgate:"+appVersion(t) || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s %s, want ghcr.io/tollgate-dev/tollgate:%s IfNotPresent", c.Image, c.ImagePullPolicy, appVersion(t))
	}
	ps := d.Spec.Template.Spec.SecurityContext
	sc := c.SecurityContext
	if ps == nil || sc == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil ||
		ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.AllowPrivilegeEscalation == nil ||
		*sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("not the restricted security context: pod %+v container %+v", ps, sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want requests and limits", c.Resources)
	}

	var svc corev1.Service
	get(t, m, "Service/"+ctrl+"-metrics", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8088 || svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") ||
		!reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Errorf("metrics Service %+v does not select the controller's metrics port", svc.Spec)
	}

	var server v1.PolicyServer
	get(t, m, "PolicyServer/default", &server)
	if server.APIVersion != "policies.tollgate.dev/v1" || server.Spec.Image != "ghcr.io/tollgate-dev/tollgate:"+appVersion(t) ||
		server.Spec.Replicas != 1 || server.Spec.NamespacedPoliciesCapabilities == nil || len(server.Spec.NamespacedPoliciesCapabilities) != 0 ||
		server.Spec.NamespacedPoliciesModuleSchemes != nil ||
		server.Spec.MinAvailable != nil || server.Spec.MaxUnavailable != nil || server.Spec.ServiceAccountName != "" ||
		len(server.Spec.Env) != 0 || len(server.Spec.SourceAuthorities) != 0 || len(server.Spec.InsecureSources) != 0 {
		t.Errorf("default PolicyServer %+v", server)
	}
}

func TestAllValues(t *testing.T) {
	out, err := render(t, "--values", allValues)
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	m := byKey(t, objs)
	const ctrl = "tg-controller"
	if _, ok := m["ServiceAccount/existing-sa"]; ok || len(m) != 13 {
		t.Errorf("serviceAccount.create=false still renders it, or not 13 objects (8 + the audit's 5): %d", len(m))
	}
	checkNamespaces(t, objs)
	checkRBAC(t, m, ctrl, "existing-sa", true)

	var d appsv1.Deployment
	get(t, m, "Deployment/"+ctrl, &d)
	wantArgs := []string{
		"controller", "--namespace=$(POD_NAMESPACE)", "--leader-elect=false", "--metrics-bind-address=:9090",
		"--health-probe-bind-address=:9091", "--ca-secret=my-ca",
		"--always-accept-admission-reviews-on-deployments-namespace=false", "--skip-namespaces=kube-system,infra",
		"--log-level=debug", "--log-fmt=text", "--cert-validity=720h", "--ca-validity=8760h",
	}
	c := checkDeployment(t, &d, ctrl, wantArgs, 9090, 9091)
	p := d.Spec.Template.Spec
	if c.Image != "registry.example.com/sec/tollgate:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways || *d.Spec.Replicas != 1 ||
		p.ServiceAccountName != "existing-sa" || p.PriorityClassName != "system-cluster-critical" ||
		p.NodeSelector["kubernetes.io/os"] != "linux" || len(p.Tolerations) != 1 || p.Affinity == nil || p.Affinity.NodeAffinity == nil ||
		len(p.ImagePullSecrets) != 1 || p.ImagePullSecrets[0].Name != "pull-secret" ||
		d.Spec.Template.Labels["team"] != "platform" || d.Spec.Template.Annotations["example.com/scrape"] != "true" ||
		p.SecurityContext.FSGroup == nil || *p.SecurityContext.FSGroup != 1000 ||
		c.Resources.Limits.Memory().Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("controller Deployment does not follow the values: %s", m["Deployment/"+ctrl].json)
	}

	var sm struct {
		Metadata struct{ Labels map[string]string }
		Spec     struct {
			Selector          struct{ MatchLabels map[string]string }
			NamespaceSelector struct{ MatchNames []string }
			Endpoints         []struct{ Port, Path, Interval string }
		}
	}
	if err := json.Unmarshal(m["ServiceMonitor/"+ctrl].json, &sm); err != nil {
		t.Fatalf("ServiceMonitor: %v", err)
	}
	var svc corev1.Service
	get(t, m, "Service/"+ctrl+"-metrics", &svc)
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, the Service has %q", k, v, svc.Labels[k])
		}
	}
	if sm.Metadata.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" ||
		sm.Spec.Endpoints[0].Interval != "15s" || !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor %+v", sm)
	}

	var server v1.PolicyServer
	get(t, m, "PolicyServer/main", &server)
	s := server.Spec
	mustQ := resource.MustParse
	if s.Image != "registry.example.com/sec/policy-server:v9.9.8" || s.Replicas != 3 || s.ServiceAccountName != "policy-server" ||
		s.ImagePullSecret != "policy-pull" || s.VerificationConfig != "sigstore-verification" ||
		s.Annotations["example.com/owner"] != "security" || s.Labels["tier"] != "admission" ||
		!slices.Equal(s.InsecureSources, []string{"registry.local:5000"}) ||
		len(s.SourceAuthorities["registry.internal:5443"]) != 1 || !strings.Contains(s.SourceAuthorities["registry.internal:5443"][0], "BEGIN CERTIFICATE") ||
		!slices.Equal(s.NamespacedPoliciesCapabilities, []v1.HostCapability{"oci/*", "kubernetes/can_i"}) ||
		!slices.Equal(s.NamespacedPoliciesModuleSchemes, []v1.ModuleScheme{"registry", "https"}) ||
		s.Limits.Cpu().Cmp(mustQ("2")) != 0 || s.Requests.Memory().Cmp(mustQ("256Mi")) != 0 ||
		s.MinAvailable == nil || *s.MinAvailable != intstr.FromInt32(2) || s.MaxUnavailable != nil ||
		len(s.Env) != 2 || s.Env[1].ValueFrom == nil || s.Env[1].ValueFrom.FieldRef.FieldPath != "spec.nodeName" ||
		s.Affinity.PodAntiAffinity == nil || len(s.Tolerations) != 1 || s.PriorityClassName != "system-cluster-critical" ||
		s.SecurityContexts.Pod == nil || s.SecurityContexts.Container == nil {
		t.Errorf("PolicyServer does not follow the values: %s", m["PolicyServer/main"].json)
	}
}

// TestPolicyServerVariants covers the PolicyServer values the all-values file cannot set at once.
func TestPolicyServerVariants(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   []string
		check func(t *testing.T, m map[string]object)
	}{
		{"disabled", []string{"policyServer.enabled=false"}, func(t *testing.T, m map[string]object) {
			for k := range m {
				if strings.HasPrefix(k, "PolicyServer/") {
					t.Errorf("policyServer.enabled=false renders %s", k)
				}
			}
		}},
		{"percentages and no capabilities", []string{"policyServer.maxUnavailable=25%", "policyServer.namespacedPoliciesCapabilities=null", "policyServer.image.tag=v2"}, func(t *testing.T, m map[string]object) {
			var ps v1.PolicyServer
			get(t, m, "PolicyServer/default", &ps)
			if ps.Spec.MaxUnavailable == nil || *ps.Spec.MaxUnavailable != intstr.FromString("25%") || ps.Spec.MinAvailable != nil ||
				ps.Spec.NamespacedPoliciesCapabilities != nil || ps.Spec.Image != "ghcr.io/tollgate-dev/tollgate:v2" {
				t.Errorf("PolicyServer %s", m["PolicyServer/default"].json)
			}
		}},
		{"empty capabilities list", []string{"--set-json=policyServer.namespacedPoliciesCapabilities=[]"}, func(t *testing.T, m map[string]object) {
			var ps v1.PolicyServer
			get(t, m, "PolicyServer/default", &ps)
			if ps.Spec.NamespacedPoliciesCapabilities == nil || len(ps.Spec.NamespacedPoliciesCapabilities) != 0 {
				t.Errorf("an empty list (no capability) must be rendered as []: %s", m["PolicyServer/default"].json)
			}
		}},
		{"nothing skipped", []string{"--set-json=skipNamespaces=[]"}, func(t *testing.T, m map[string]object) {
			var d appsv1.Deployment
			get(t, m, "Deployment/tollgate-controller", &d)
			if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--skip-namespaces=") {
				t.Errorf("skipNamespaces=[]: args %q, want --skip-namespaces=", d.Spec.Template.Spec.Containers[0].Args)
			}
		}},
		{"controller replicas", []string{"replicas=3"}, func(t *testing.T, m map[string]object) {
			var d appsv1.Deployment
			get(t, m, "Deployment/tollgate-controller", &d)
			if *d.Spec.Replicas != 3 || !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=true") {
				t.Errorf("replicas %d args %q", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Args)
			}
		}},
		{"release name without tollgate", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			for _, s := range tc.set {
				if strings.HasPrefix(s, "--") {
					args = append(args, s)
				} else {
					args = append(args, "--set", s)
				}
			}
			if tc.check == nil {
				out, err := runHelm(t, "template", "shop", chartDir, "--namespace", namespace, "--kube-version", kubeVersion)
				if err != nil {
					t.Fatal(err)
				}
				if m := byKey(t, decode(t, out)); len(m) != 15 || m["Deployment/shop-tollgate-controller"].Kind == "" || m["CronJob/shop-tollgate-audit"].Kind == "" {
					t.Errorf("release shop: want shop-tollgate-controller, got %v", m)
				}
				return
			}
			out, err := render(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, byKey(t, decode(t, out)))
		})
	}
}

// TestSchemaRefuses checks that values.schema.json (and the templates' own checks) refuse bad
// values with a message naming the value.
func TestSchemaRefuses(t *testing.T) {
	for _, tc := range []struct {
		set     string
		wantErr string
	}{
		{"logLevel=verbose", "at '/logLevel': value must be one of 'trace', 'debug', 'info', 'warn', 'error'"},
		{"logFormat=xml", "at '/logFormat'"},
		{"extraArgs[0]=rm", "at '/extraArgs/0'"},
		{"contextAwarePolicies=maybe", "at '/contextAwarePolicies'"},
		{"skipNamespaces={kube_system}", "at '/skipNamespaces/0': 'kube_system' does not match pattern"},
		{"policyServer.namespacedPoliciesModuleSchemes={file}", "at '/policyServer/namespacedPoliciesModuleSchemes/0': value must be one of"},
		{"imagee.tag=v1", "additional properties 'imagee' not allowed"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
		{"image.tag=v1+meta", "at '/image/tag'"},
		{"policyServer.name=Default", "at '/policyServer/name': 'Default' does not match pattern"},
		{"policyServer.replicaCount=-1", "at '/policyServer/replicaCount': minimum"},
		{"policyServer.namespacedPoliciesCapabilities={oci/v3/*}", "at '/policyServer/namespacedPoliciesCapabilities/0': value must be one of"},
		{"policyServer.minAvailable=half", "at '/policyServer/minAvailable'"},
		{"policyServer.sourceAuthorities[0].uri=registry:5000", "at '/policyServer/sourceAuthorities/0': missing property 'certs'"},
		{"policyServer.env[0].value=x", "at '/policyServer/env/0': missing property 'name'"},
		{"policyServer.insecureSource=x", "additional properties 'insecureSource' not allowed"},
		{"metrics.port=70000", "at '/metrics/port': maximum"},
		{"alwaysAcceptAdmissionReviewsOnDeploymentsNamespace=maybe", "at '/alwaysAcceptAdmissionReviewsOnDeploymentsNamespace'"},
		{"resources.controler.limits.cpu=1", "additional properties 'controler' not allowed"},
		{"policyServer.minAvailable=1,policyServer.maxUnavailable=1", "set minAvailable or maxUnavailable, not both"},
		{"serviceAccount.create=false", "serviceAccount.name is required when serviceAccount.create is false"},
		{"replicas=2,leaderElection=false", "replicas > 1 needs leaderElection: true"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := render(t, "--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered", tc.set)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("--set %s: %v\nwant an error containing %q", tc.set, err, tc.wantErr)
			}
		})
	}
}

// TestControllerFlagsExist checks that every flag the chart passes to `tollgate controller` is
// one that cmd/tollgate/controller.go defines (read as source: the binary is not built here).
func TestControllerFlagsExist(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(root, "cmd", "tollgate", "controller.go"))
	if err != nil {
		t.Fatalf("tollgate controller's flags: %v", err)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\(&[^,]+, "([a-z0-9-]+)"`).FindAllStringSubmatch(string(src), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 5 {
		t.Fatalf("found only %v in cmd/tollgate/controller.go: has the way flags are defined changed?", defined)
	}
	for _, values := range [][]string{nil, {"--values", allValues}} {
		out, err := render(t, values...)
		if err != nil {
			t.Fatal(err)
		}
		var d appsv1.Deployment
		for _, o := range decode(t, out) {
			if o.Kind == "Deployment" {
				into(t, o, &d)
			}
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		if len(args) == 0 || args[0] != "controller" {
			t.Fatalf("args %q: want the controller command first", args)
		}
		for _, a := range args[1:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !defined[name] {
				t.Errorf("the chart passes %s, which tollgate controller does not define (it has %v)", a, defined)
			}
		}
	}
}

// TestSchemaCapabilitiesMatchCRD keeps the schema's capability enum equal to the CRD's.
func TestSchemaCapabilitiesMatchCRD(t *testing.T) {
	var schema struct {
		Properties struct {
			PolicyServer struct {
				Properties struct {
					NamespacedPoliciesCapabilities struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"namespacedPoliciesCapabilities"`
				} `json:"properties"`
			} `json:"policyServer"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	got := schema.Properties.PolicyServer.Properties.NamespacedPoliciesCapabilities.Items.Enum
	files, _, err := crds.Files()
	if err != nil {
		t.Fatal(err)
	}
	crd := string(files["policies.tollgate.dev_policyservers.yaml"])
	i := strings.Index(crd, "namespacedPoliciesCapabilities:")
	j := strings.Index(crd[i:], "enum:")
	if i < 0 || j < 0 {
		t.Fatal("no namespacedPoliciesCapabilities enum in the PolicyServer CRD")
	}
	var want []string
	for _, l := range strings.Split(crd[i+j:], "\n")[1:] {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), "- ")
		if !ok {
			break
		}
		want = append(want, strings.Trim(v, `'"`))
	}
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json capabilities %v, the CRD's %v", got, want)
	}
}

// TestAllValuesCoversValuesYAML keeps testdata/all-values.yaml setting every value, and
// TestREADMEListsValues keeps the chart README's table listing them.
func TestAllValuesCoversValuesYAML(t *testing.T) {
	all := readYAML(t, allValues)
	for _, p := range leafPaths(readYAML(t, filepath.Join(chartDir, "values.yaml")), "", nil) {
		if !hasPath(all, p) {
			t.Errorf("testdata/all-values.yaml does not set %s", p)
		}
	}
}

func TestREADMEListsValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		listed[m[1]] = true
	}
	values := readYAML(t, filepath.Join(chartDir, "values.yaml"))
	var walk func(v map[string]any, prefix string)
	walk = func(v map[string]any, prefix string) {
		for k, c := range v {
			p := prefix + k
			if listed[p] {
				continue
			}
			if cm, ok := c.(map[string]any); ok && len(cm) > 0 {
				walk(cm, p+".")
				continue
			}
			t.Errorf("charts/tollgate/README.md's values table does not list `%s`", p)
		}
	}
	walk(values, "")
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// leafPaths lists the dotted paths of the values that are not non-empty maps.
func leafPaths(v map[string]any, prefix string, out []string) []string {
	for k, c := range v {
		if cm, ok := c.(map[string]any); ok && len(cm) > 0 {
			out = leafPaths(cm, prefix+k+".", out)
			continue
		}
		out = append(out, prefix+k)
	}
	sort.Strings(out)
	return out
}

func hasPath(v map[string]any, path string) bool {
	for {
		k, rest, more := strings.Cut(path, ".")
		c, ok := v[k]
		if !ok {
			return false
		}
		if !more {
			return true
		}
		if v, ok = c.(map[string]any); !ok {
			return false
		}
		path = rest
	}
}

func appVersion(t *testing.T) string {
	t.Helper()
	ch := readYAML(t, filepath.Join(chartDir, "Chart.yaml"))
	v, _ := ch["appVersion"].(string)
	if v == "" || ch["apiVersion"] != "v2" || ch["version"] != "0.1.0" {
		t.Fatalf("Chart.yaml: apiVersion %v version %v appVersion %q", ch["apiVersion"], ch["version"], v)
	}
	return v
}

// checkNamespaces: namespaced objects are in the release namespace, cluster-scoped ones have none.
func checkNamespaces(t *testing.T, objs []object) {
	t.Helper()
	cluster := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "PolicyServer": true, "CustomResourceDefinition": true}
	for _, o := range objs {
		if cluster[o.Kind] != (o.Metadata.Namespace == "") || (!cluster[o.Kind] && o.Metadata.Namespace != namespace) {
			t.Errorf("%s has namespace %q", o.key(), o.Metadata.Namespace)
		}
	}
}

// checkRBAC: exactly the expected rules, no wildcard anywhere, secrets only in the Role, and
// bindings of the controller's ServiceAccount.
func checkRBAC(t *testing.T, m map[string]object, name, sa string, contextAware bool) {
	t.Helper()
	var cr rbacv1.ClusterRole
	var r rbacv1.Role
	get(t, m, "ClusterRole/"+name, &cr)
	get(t, m, "Role/"+name, &r)
	want := wantClusterRules
	if contextAware {
		want = slices.Concat(wantClusterRules, wantContextAwareRules)
	}
	if !reflect.DeepEqual(cr.Rules, want) {
		t.Errorf("ClusterRole rules\n%+v\nwant\n%+v", cr.Rules, want)
	}
	if !reflect.DeepEqual(r.Rules, wantRoleRules) {
		t.Errorf("Role rules\n%+v\nwant\n%+v", r.Rules, wantRoleRules)
	}
	for kind, rules := range map[string][]rbacv1.PolicyRule{"ClusterRole": cr.Rules, "Role": r.Rules} {
		for _, rule := range rules {
			for _, s := range slices.Concat(rule.Verbs, rule.Resources, rule.APIGroups, rule.ResourceNames, rule.NonResourceURLs) {
				if strings.Contains(s, "*") {
					t.Errorf("%s grants a wildcard %q in %+v", kind, s, rule)
				}
			}
			if kind == "ClusterRole" && slices.Contains(rule.Resources, "secrets") {
				t.Errorf("the ClusterRole grants secrets cluster-wide")
			}
		}
	}
	for k := range m {
		// the audit's own ClusterRole is checked by TestAuditCronJob
		if kind, _, _ := strings.Cut(k, "/"); (kind == "ClusterRole" || kind == "Role") && k != kind+"/"+name && !strings.HasSuffix(k, "-audit") {
			t.Errorf("unexpected %s", k)
		}
	}
	var crb rbacv1.ClusterRoleBinding
	var rb rbacv1.RoleBinding
	get(t, m, "ClusterRoleBinding/"+name, &crb)
	get(t, m, "RoleBinding/"+name, &rb)
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}) || !reflect.DeepEqual(crb.Subjects, wantSubjects) {
		t.Errorf("ClusterRoleBinding %+v %+v", crb.RoleRef, crb.Subjects)
	}
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}) || !reflect.DeepEqual(rb.Subjects, wantSubjects) {
		t.Errorf("RoleBinding %+v %+v", rb.RoleRef, rb.Subjects)
	}
}

// checkDeployment checks the controller container's args, downward-API namespace, ports and
// probes, and returns it.
func checkDeployment(t *testing.T, d *appsv1.Deployment, name string, wantArgs []string, metricsPort, probePort int32) corev1.Container {
	t.Helper()
	if d.Name != name || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment %s with %d containers", d.Name, len(d.Spec.Template.Spec.Containers))
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, d.Spec.Template.Labels)
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Command) != 0 || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("controller command %q args\n%q\nwant\n%q", c.Command, c.Args, wantArgs)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "POD_NAMESPACE" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef == nil ||
		c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env %+v: want POD_NAMESPACE from metadata.namespace", c.Env)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != metricsPort || ports["health"] != probePort {
		t.Errorf("ports %v, want metrics %d health %d", ports, metricsPort, probePort)
	}
	for _, pr := range []struct {
		p    *corev1.Probe
		path string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port != intstr.FromString("health") {
			t.Errorf("probe %+v: want GET %s on port health", pr.p, pr.path)
		}
	}
	return c
}
