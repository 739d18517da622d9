package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

const gkScaffoldDir = "testdata/scaffold-gatekeeper"

// scaffoldGK runs `tollgate scaffold gatekeeper ARGS` (checking the mutators
// with the embedded module) and returns its standard output and error.
func scaffoldGK(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := newScaffoldCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"gatekeeper", "--cache-dir", sharedCache}, args...))
	err = cmd.Execute()
	return out.String(), errOut.String(), err
}

type gkEntry struct {
	Module                string           `json:"module"`
	AllowedToMutate       bool             `json:"allowedToMutate"`
	ContextAwareResources []map[string]any `json:"contextAwareResources"`
	Settings              struct {
		FromCluster bool             `json:"fromCluster"`
		Mutators    []map[string]any `json:"mutators"`
		Namespaces  []map[string]any `json:"namespaces"`
	} `json:"settings"`
}

func mutatorIDs(ms []map[string]any) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m["kind"].(string)+"/"+m["metadata"].(map[string]any)["name"].(string))
	}
	return out
}

// TestScaffoldGatekeeperPoliciesYML: a directory of a multi-document file
// (with a ConfigMap, skipped with a warning) and a kubectl List (server
// fields dropped) becomes one policies.yml entry for the built-in module.
func TestScaffoldGatekeeperPoliciesYML(t *testing.T) {
	out, errOut, err := scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `pull-and-label.yaml: document 3: skipping kind "ConfigMap" apiVersion "v1": not a Gatekeeper mutator`; !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
	var got map[string]gkEntry
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	e, ok := got["gatekeeper-mutation"]
	if !ok || len(got) != 1 || e.Module != "builtin://gatekeeper-mutation" || !e.AllowedToMutate || e.ContextAwareResources != nil || e.Settings.FromCluster {
		t.Fatalf("entry:\n%s", out)
	}
	// Files sorted, documents and items in order.
	if ids := strings.Join(mutatorIDs(e.Settings.Mutators), " "); ids != "ModifySet/checkout-json-logs AssignImage/mirror-docker-hub Assign/always-pull AssignMetadata/owner-label" {
		t.Fatalf("mutators %s", ids)
	}
	ms := e.Settings.Mutators[0]
	md := ms["metadata"].(map[string]any)
	if _, ok := ms["status"]; ok || md["resourceVersion"] != nil || md["uid"] != nil || md["annotations"] != nil {
		t.Fatalf("server fields kept: %v", ms)
	}
}

// TestScaffoldGatekeeperClusterAdmissionPolicy: rules from applyTo (kinds to
// plural resources) and AssignMetadata's match.kinds, --rules instead, JSON
// output, --from-cluster.
func TestScaffoldGatekeeperClusterAdmissionPolicy(t *testing.T) {
	type cap struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Module                string           `json:"module"`
			Mutating              bool             `json:"mutating"`
			Rules                 []map[string]any `json:"rules"`
			ContextAwareResources []map[string]any `json:"contextAwareResources"`
			Settings              map[string]any   `json:"settings"`
		}
	}
	out, _, err := scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators"), "--output-kind", "clusteradmissionpolicy", "--name", "Platform Mutators", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var c cap
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if c.APIVersion != "policies.kubewarden.io/v1" || c.Kind != "ClusterAdmissionPolicy" || c.Metadata.Name != "platform-mutators" || !c.Spec.Mutating || c.Spec.Module != gkBuiltinModule {
		t.Fatalf("header %+v", c)
	}
	rules, _ := json.Marshal(c.Spec.Rules)
	want := `[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE","UPDATE"],"resources":["pods"]},{"apiGroups":[""],"apiVersions":["*"],"operations":["CREATE","UPDATE"],"resources":["pods"]}]`
	if string(rules) != want {
		t.Fatalf("rules %s, want %s", rules, want)
	}

	out, _, err = scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators", "kubectl-get.yaml"), "--output-kind", "clusteradmissionpolicy", "--from-cluster",
		"--rules", `[{apiGroups: [""], apiVersions: [v1], resources: [pods, pods/ephemeralcontainers], operations: [CREATE]}]`)
	if err != nil {
		t.Fatal(err)
	}
	c = cap{}
	if err := yaml.Unmarshal([]byte(out), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Spec.Rules) != 1 || len(c.Spec.Rules[0]["resources"].([]any)) != 2 || c.Spec.Settings["fromCluster"] != true ||
		len(c.Spec.ContextAwareResources) != 1 || c.Spec.ContextAwareResources[0]["kind"] != "Namespace" {
		t.Fatalf("spec %+v", c.Spec)
	}

	// Kinds to resources: Kubernetes' lowercase-plural guess.
	if got := strings.Join(resourcesOf([]string{"Pod", "Ingress", "NetworkPolicy", "Endpoints"}, "v1"), " "); got != "pods ingresses networkpolicies endpoints" {
		t.Errorf("resources %s", got)
	}
}

func TestScaffoldGatekeeperNamespaces(t *testing.T) {
	out, _, err := scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators"), "--output-kind", "settings", "--namespaces", filepath.Join(gkScaffoldDir, "namespaces.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Namespaces []struct {
			Kind     string
			Metadata struct{ Name string }
		}
	}
	if err := yaml.Unmarshal([]byte(out), &s); err != nil || len(s.Namespaces) != 2 || s.Namespaces[1].Kind != "Namespace" || s.Namespaces[1].Metadata.Name != "sandbox" {
		t.Fatalf("%v %+v\n%s", err, s, out)
	}
}

func TestScaffoldGatekeeperErrors(t *testing.T) {
	dir := t.TempDir()
	write := fileWriter(t, dir)
	good := filepath.Join(gkScaffoldDir, "mutators")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no argument", nil, "requires at least 1 arg"},
		{"missing file", []string{filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"invalid location", []string{filepath.Join(gkScaffoldDir, "bad")}, "bad/mutators.yaml: document 2 (Assign/trailing-dot): spec.location: invalid location format `spec.containers[name: *].` for Assign trailing-dot: trailing separators are forbidden"},
		{"schema: wrong type", []string{write("type.yaml", "apiVersion: mutations.gatekeeper.sh/v1\nkind: ModifySet\nmetadata: {name: m}\nspec:\n  applyTo: [{groups: [''], kinds: [Pod], versions: [v1]}]\n  location: spec.x\n  parameters: {operation: append, values: {fromList: [a]}}\n")},
			`type.yaml: document 1 (ModifySet/m): spec.parameters.operation: Unsupported value: "append"`},
		{"in a list", []string{write("list.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: mutations.gatekeeper.sh/v1, kind: AssignMetadata, metadata: {name: ok}, spec: {location: metadata.labels.a, parameters: {assign: {value: b}}}}\n- {apiVersion: mutations.gatekeeper.sh/v1, kind: AssignMetadata, metadata: {name: num}, spec: {location: metadata.labels.a, parameters: {assign: {value: 3}}}}\n")},
			`list.yaml: document 1: items[1] (AssignMetadata/num)`},
		{"externalData", []string{write("ext.yaml", "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: ext}\nspec:\n  applyTo: [{groups: [''], kinds: [Pod], versions: [v1]}]\n  location: spec.x\n  parameters: {assign: {externalData: {provider: p}}}\n")},
			"ext.yaml: document 1 (Assign/ext)"},
		{"only other kinds", []string{write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")}, "no Gatekeeper mutators (mutations.gatekeeper.sh) in"},
		{"empty directory", []string{t.TempDir()}, "no .yaml, .yml or .json files"},
		{"output kind", []string{good, "--output-kind", "deployment"}, `--output-kind "deployment": want policies-yml, clusteradmissionpolicy or settings`},
		{"output format", []string{good, "-o", "xml"}, `unknown output format "xml"`},
		{"rules not a list", []string{good, "--output-kind", "clusteradmissionpolicy", "--rules", "pods"}, "--rules: want a non-empty YAML or JSON list"},
		{"from-cluster and namespaces", []string{good, "--from-cluster", "--namespaces", filepath.Join(gkScaffoldDir, "namespaces.yaml")}, "do not give --namespaces"},
		{"namespaces not namespaces", []string{good, "--namespaces", write("ns.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")}, `ns.yaml: document 1: kind "ConfigMap" apiVersion "v1" is not a v1 Namespace`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := scaffoldGK(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// patchOf decodes the JSONPatch of a run's AdmissionResponse.
func patchOf(t *testing.T, out string) string {
	t.Helper()
	var resp struct {
		Allowed bool   `json:"allowed"`
		Patch   string `json:"patch"`
		Status  struct {
			Message string `json:"message"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || !resp.Allowed {
		t.Fatalf("response %q: %v", out, err)
	}
	p, err := base64.StdEncoding.DecodeString(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	return string(p)
}

// gkWantOps are the JSONPatch operations the scaffold fixtures' mutators
// make on test/testdata/reviews/pod.json (namespace storefront).
var gkWantOps = []string{
	`{"op":"add","path":"/metadata/labels/mutated-by","value":"gatekeeper"}`,
	`{"op":"add","path":"/spec/containers/0/args","value":["--log-format=json"]}`,
	`{"op":"replace","path":"/spec/containers/1/image","value":"mirror.example.com/envoyproxy/envoy:v1.31.2"}`,
	`{"op":"replace","path":"/spec/containers/2/imagePullPolicy","value":"Always"}`,
}

// TestScaffoldGatekeeperRun runs the scaffolded settings with `tollgate run`
// on the 5 KB Pod.
func TestScaffoldGatekeeperRun(t *testing.T) {
	settings, _, err := scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators"), "--output-kind", "settings")
	if err != nil {
		t.Fatal(err)
	}
	sf := filepath.Join(t.TempDir(), "settings.yml")
	if err := os.WriteFile(sf, []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := tollgate(t, "", "run", gkBuiltinModule, "-r", testfixture.Path("test/testdata/reviews/pod.json"), "-s", sf, "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	p := patchOf(t, out)
	for _, op := range gkWantOps {
		if !strings.Contains(p, op) {
			t.Errorf("patch lacks %s:\n%s", op, p)
		}
	}
}

// TestScaffoldGatekeeperServe serves the scaffolded policies.yml entry with
// `tollgate serve` over HTTPS (a generated certificate) and mutates the
// 5 KB Pod through /validate/<id>.
func TestScaffoldGatekeeperServe(t *testing.T) {
	entry, _, err := scaffoldGK(t, filepath.Join(gkScaffoldDir, "mutators"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	if err := os.WriteFile(pfile, []byte(entry), 0o644); err != nil {
		t.Fatal(err)
	}
	url, client := startServeTLS(t, dir, "--policies", pfile)
	review := testfixture.File(t, "test/testdata/reviews/pod.json")
	resp, err := client.Post(url+"/validate/gatekeeper-mutation", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var ar struct {
		Response json.RawMessage `json:"response"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ar) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	p := patchOf(t, string(ar.Response))
	for _, op := range gkWantOps {
		if !strings.Contains(p, op) {
			t.Errorf("patch lacks %s:\n%s", op, p)
		}
	}
}

// startServeTLS runs `tollgate serve` with a generated certificate in dir
// until the test ends; it returns the webhook's https URL and a client that
// trusts the certificate's CA.
func startServeTLS(t *testing.T, dir string, args ...string) (string, *http.Client) {
	t.Helper()
	_, stderr, _ := startServeUntil(t, regexp.MustCompile(`webhook=(https://127\.0\.0\.1:\d+)`), append([]string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0",
		"--state-dir=" + filepath.Join(dir, "tls"), "--cache-dir=" + filepath.Join(dir, "cache")}, args...)...)
	url := regexp.MustCompile(`webhook=(https://127\.0\.0\.1:\d+)`).FindStringSubmatch(stderr.String())[1]
	ca, err := os.ReadFile(filepath.Join(dir, "tls", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("ca.pem holds no certificate")
	}
	return url, &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// TestRunBuiltinGatekeeper: `tollgate run builtin://gatekeeper-mutation`
// on the 5 KB Pod with the benchmark's five mutators gives their JSONPatch;
// settings the module refuses fail the command naming the mutator and the
// field; `tollgate bench` measures the same evaluation.
func TestRunBuiltinGatekeeper(t *testing.T) {
	pod := testfixture.Path("test/testdata/reviews/pod.json")
	settings := testfixture.Path("policies/gatekeeper-mutation/testdata/settings-bench.yaml")
	out, err := tollgate(t, "", "run", gkBuiltinModule, "-r", pod, "-s", settings, "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	p := patchOf(t, out)
	for _, op := range []string{
		`{"op":"add","path":"/metadata/labels/mutated-by","value":"tollgate"}`,
		`{"op":"add","path":"/spec/containers/0/args","value":["--log-format=json"]}`,
		`{"op":"replace","path":"/spec/containers/0/terminationMessagePolicy","value":"FallbackToLogsOnError"}`,
		`{"op":"replace","path":"/spec/containers/1/image","value":"mirror.example.com/envoyproxy/envoy:v1.31.2"}`,
		`{"op":"replace","path":"/spec/containers/0/imagePullPolicy","value":"Always"}`,
		`{"op":"replace","path":"/spec/containers/2/imagePullPolicy","value":"Always"}`,
	} {
		if !strings.Contains(p, op) {
			t.Errorf("patch lacks %s:\n%s", op, p)
		}
	}

	assign := func(name, location, params string) string {
		return `{"apiVersion":"mutations.gatekeeper.sh/v1","kind":"Assign","metadata":{"name":"` + name + `"},"spec":{"applyTo":[{"groups":[""],"versions":["v1"],"kinds":["Pod"]}],"location":"` + location + `","parameters":` + params + `}}`
	}
	for _, c := range []struct{ name, settings, want string }{
		{"metadata location", `{"mutators":[` + assign("labels", "metadata.labels.x", `{"assign":{"value":"v"}}`) + `]}`,
			"mutators[0] (Assign/labels): spec.location: assign labels can't change metadata"},
		{"pathTests", `{"mutators":[` + assign("ok", "spec.a", `{"assign":{"value":1}}`) + `,` + assign("tests", "spec.x", `{"assign":{"value":1},"pathTests":[{"subPath":"spec.y","condition":"MustExist"}]}`) + `]}`,
			`mutators[1] (Assign/tests): spec.parameters.pathTests: all subpaths must be a prefix of the ` + "`location`"},
		{"schema", `{"mutators":[` + assign("cond", "spec.x", `{"assign":{"value":1},"pathTests":[{"subPath":"spec","condition":"Maybe"}]}`) + `]}`,
			`mutators[0] (Assign/cond): spec.parameters.pathTests[0].condition: Unsupported value: "Maybe"`},
		{"unknown setting", `{"mutatorz":[]}`, "unknown field mutatorz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tollgate(t, "", "run", gkBuiltinModule, "-r", pod, "--settings-json", c.settings)
			if err == nil || !strings.Contains(err.Error(), "settings rejected by the policy") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want a refusal with %q", err, c.want)
			}
		})
	}

	out, err = tollgate(t, "", "bench", gkBuiltinModule, "-r", pod, "-s", settings, "--count", "50", "--warmup", "5", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Count    int   `json:"count"`
		P50      int64 `json:"p50_ns"`
		Accepted bool  `json:"accepted"`
		Mutated  bool  `json:"mutated"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Count != 50 || b.P50 <= 0 || !b.Accepted || !b.Mutated {
		t.Fatalf("bench: %v %s", err, out)
	}
}

// TestServeBuiltinGatekeeper: a policies.yml entry of the built-in module
// mutates through the HTTPS server; an entry whose settings the module
// refuses fails alone (its endpoint answers 500), and the log names the
// mutator and the field.
func TestServeBuiltinGatekeeper(t *testing.T) {
	dir := t.TempDir()
	pfile := filepath.Join(dir, "policies.yml")
	settings, err := os.ReadFile(testfixture.Path("policies/gatekeeper-mutation/testdata/settings-bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	entries := `bench:
  module: builtin://gatekeeper-mutation
  allowedToMutate: true
  settings: ` + string(settings) + `
broken:
  module: builtin://gatekeeper-mutation
  allowedToMutate: true
  settings:
    mutators:
    - {apiVersion: mutations.gatekeeper.sh/v1alpha1, kind: AssignImage, metadata: {name: no-parts}, spec: {applyTo: [{groups: [""], versions: [v1], kinds: [Pod]}], location: "spec.containers[name: *].image", parameters: {}}}
`
	if err := os.WriteFile(pfile, []byte(entries), 0o644); err != nil {
		t.Fatal(err)
	}
	url, client := startServeTLS(t, dir, "--policies", pfile)
	review := testfixture.File(t, "test/testdata/reviews/pod.json")
	post := func(id string) (int, string) {
		resp, err := client.Post(url+"/validate/"+id, "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("bench")
	var ar struct {
		Response json.RawMessage `json:"response"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ar) != nil {
		t.Fatalf("%d %s", code, body)
	}
	if p := patchOf(t, string(ar.Response)); !strings.Contains(p, `{"op":"replace","path":"/spec/containers/1/image","value":"mirror.example.com/envoyproxy/envoy:v1.31.2"}`) {
		t.Fatalf("patch %s", p)
	}
	if code, body := post("broken"); code == http.StatusOK && strings.Contains(body, `"allowed":true`) {
		t.Fatalf("the broken policy answered %d %s", code, body)
	}
}

// TestScaffoldGatekeeperStdin: `-` reads the mutators from standard input
// (kubectl get ... -o yaml | tollgate scaffold gatekeeper -); messages name
// it "standard input".
func TestScaffoldGatekeeperStdin(t *testing.T) {
	in, err := os.ReadFile(filepath.Join(gkScaffoldDir, "mutators", "kubectl-get.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(stdin string) (string, error) {
		cmd := newScaffoldCmd()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetIn(strings.NewReader(stdin))
		cmd.SetArgs([]string{"gatekeeper", "--cache-dir", sharedCache, "-", "--output-kind", "settings"})
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run(string(in))
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Mutators []map[string]any }
	if err := yaml.Unmarshal([]byte(out), &s); err != nil || strings.Join(mutatorIDs(s.Mutators), " ") != "ModifySet/checkout-json-logs AssignImage/mirror-docker-hub" {
		t.Fatalf("%v\n%s", err, out)
	}
	bad := "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: meta}\nspec: {applyTo: [{groups: [''], kinds: [Pod], versions: [v1]}], location: metadata.name, parameters: {assign: {value: x}}}\n"
	if _, err := run(bad); err == nil || !strings.Contains(err.Error(), "standard input: document 1 (Assign/meta): spec.location: assign meta can't change metadata") {
		t.Fatalf("err %v", err)
	}
}
