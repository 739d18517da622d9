package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
	"github.com/tollgate-dev/tollgate/host/config"
)

func cfgI32(v int32) *int32 { return &v }

func cfgPS(caps ...v1.HostCapability) *v1.PolicyServer {
	return &v1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1.PolicyServerSpec{Image: "tollgate:test", Replicas: 1, NamespacedPoliciesCapabilities: caps}}
}

func cfgPSSchemes(schemes ...v1.ModuleScheme) *v1.PolicyServer {
	ps := cfgPS()
	ps.Spec.NamespacedPoliciesModuleSchemes = schemes
	return ps
}

func cfgModule(uri, settings string) v1.ModuleSpec {
	m := v1.ModuleSpec{Module: uri}
	if settings != "" {
		m.Settings = runtime.RawExtension{Raw: []byte(settings)}
	}
	return m
}

func TestBuildPolicyEntry(t *testing.T) {
	webhook := v1.WebhookSpec{PolicyServer: "default"}
	monitor := webhook
	monitor.Mode = v1.ModeMonitor
	tests := []struct {
		name    string
		policy  v1.Policy
		ps      *v1.PolicyServer
		wantID  string
		want    string // JSON of the entry
		wantErr string // substrings of the error, "|"-separated
	}{
		{
			name: "cluster policy",
			policy: &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "caps"}, Spec: v1.ClusterAdmissionPolicySpec{
				WebhookSpec: webhook, Mutating: true, Message: "no",
				ModuleSpec:            v1.ModuleSpec{Module: "ghcr.io/kubewarden/policies/psp-capabilities:v0.1.9", Settings: runtime.RawExtension{Raw: []byte(`{"b":12345678901234567890,"a":[1,2]}`)}, TimeoutEvalSeconds: cfgI32(5)},
				ContextAwareResources: []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}},
			}},
			ps:     cfgPS("oci/*"),
			wantID: "clusterwide-caps",
			want: `{"allowedToMutate":true,"contextAwareResources":[{"apiVersion":"v1","kind":"Namespace"}],"hostCapabilities":["*"],"message":"no",` +
				`"module":"registry://ghcr.io/kubewarden/policies/psp-capabilities:v0.1.9","namespacedName":{"Name":"caps","Namespace":""},"policyMode":"protect",` +
				`"settings":{"a":[1,2],"b":12345678901234567890},"timeoutEvalSeconds":5}`,
		},
		{
			name: "namespaced policy, capabilities from the server, null settings",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "labels"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: monitor, ModuleSpec: cfgModule("https://h/p.wasm", "null")}},
			ps:     cfgPS("oci/*", "kubernetes/get_resource"),
			wantID: "namespaced-team-a-labels",
			want: `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":["oci/*","kubernetes/get_resource"],"module":"https://h/p.wasm",` +
				`"namespacedName":{"Name":"labels","Namespace":"team-a"},"policyMode":"monitor","settings":{}}`,
		},
		{
			name: "namespaced policy, no capabilities set: none",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("registry://r/p:1", "")}},
			ps:     cfgPS(),
			wantID: "namespaced-ns-p",
			want:   `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":[],"module":"registry://r/p:1","namespacedName":{"Name":"p","Namespace":"ns"},"policyMode":"protect","settings":{}}`,
		},
		{
			name: "namespaced policy, no PolicyServer: no capabilities",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("builtin://mutating-admission-policy", "")}},
			wantID: "namespaced-ns-p",
			want:   `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":[],"module":"builtin://mutating-admission-policy","namespacedName":{"Name":"p","Namespace":"ns"},"policyMode":"protect","settings":{}}`,
		},
		{
			name: "namespaced policy, file:// module: refused whatever the server allows",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("FILE:///etc/passwd", "")}},
			ps:      cfgPSSchemes(v1.ModuleSchemeRegistry, v1.ModuleSchemeHTTP),
			wantID:  "namespaced-ns-f",
			wantErr: `AdmissionPolicy ns/f|spec.module: value "FILE:///etc/passwd"|may never use file:// modules`,
		},
		{
			name: "namespaced policy, http:// not in the default schemes",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("http://10.0.0.1:5000/p.wasm", "")}},
			ps:      cfgPS(),
			wantID:  "namespaced-ns-h",
			wantErr: `spec.module: value "http://10.0.0.1:5000/p.wasm"|PolicyServer "default" allows registry, https, builtin to namespaced policies (the default of spec.namespacedPoliciesModuleSchemes)`,
		},
		{
			name: "namespaced policy, http:// allowed by the server",
			policy: &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h"}, Spec: v1.AdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("http://10.0.0.1:5000/p.wasm", "")}},
			ps:     cfgPSSchemes(v1.ModuleSchemeHTTP),
			wantID: "namespaced-ns-h",
			want:   `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":[],"module":"http://10.0.0.1:5000/p.wasm","namespacedName":{"Name":"h","Namespace":"ns"},"policyMode":"protect","settings":{}}`,
		},
		{
			name: "namespaced group member, a scheme the server does not allow (no scheme is registry)",
			policy: &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}, Spec: v1.AdmissionPolicyGroupSpec{
				WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a() && b()", Message: "m"},
				Policies: map[string]v1.PolicyGroupMember{"a": {ModuleSpec: cfgModule("https://h/a.wasm", "")}, "b": {ModuleSpec: cfgModule("r/b:1", "")}}}},
			ps:      cfgPSSchemes(v1.ModuleSchemeHTTPS),
			wantID:  "namespaced-group-ns-g",
			wantErr: `spec.policies.b.module: value "r/b:1"|may not use registry:// modules|allows https to namespaced policies (spec.namespacedPoliciesModuleSchemes)`,
		},
		{
			name: "cluster policy, file:// module: allowed",
			policy: &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Spec: v1.ClusterAdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("file:///p.wasm", "")}},
			ps:     cfgPSSchemes(v1.ModuleSchemeHTTPS),
			wantID: "clusterwide-f",
			want:   `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":["*"],"module":"file:///p.wasm","namespacedName":{"Name":"f","Namespace":""},"policyMode":"protect","settings":{}}`,
		},
		{
			name: "cluster group",
			policy: &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "signed"}, Spec: v1.ClusterAdmissionPolicyGroupSpec{
				WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a() || !b()", Message: "unsigned"},
				Policies: map[string]v1.ClusterPolicyGroupMember{
					"a": {ModuleSpec: v1.ModuleSpec{Module: "r/a:1", TimeoutEvalSeconds: cfgI32(3)}, ContextAwareResources: []v1.ContextAwareResource{{APIVersion: "v1", Kind: "Secret"}}},
					"b": {ModuleSpec: cfgModule("https://x/b.wasm", `{"tags":["latest"]}`)},
				}}},
			ps:     cfgPS("oci/*"),
			wantID: "clusterwide-group-signed",
			want: `{"expression":"a() || !b()","message":"unsigned","namespacedName":{"Name":"signed","Namespace":""},"policies":{` +
				`"a":{"contextAwareResources":[{"apiVersion":"v1","kind":"Secret"}],"hostCapabilities":["*"],"module":"registry://r/a:1","settings":{},"timeoutEvalSeconds":3},` +
				`"b":{"contextAwareResources":[],"hostCapabilities":["*"],"module":"https://x/b.wasm","settings":{"tags":["latest"]}}},"policyMode":"protect"}`,
		},
		{
			name: "namespaced group",
			policy: &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}, Spec: v1.AdmissionPolicyGroupSpec{
				WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a()", Message: "m"},
				Policies: map[string]v1.PolicyGroupMember{"a": {ModuleSpec: cfgModule("r/a:1", "")}}}},
			ps:     cfgPS("net/*"),
			wantID: "namespaced-group-ns-g",
			want: `{"expression":"a()","message":"m","namespacedName":{"Name":"g","Namespace":"ns"},"policies":{` +
				`"a":{"contextAwareResources":[],"hostCapabilities":["net/*"],"module":"registry://r/a:1","settings":{}}},"policyMode":"protect"}`,
		},
		{
			name: "group expression the server refuses",
			policy: &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1.ClusterAdmissionPolicyGroupSpec{
				WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a() &&", Message: "m"},
				Policies: map[string]v1.ClusterPolicyGroupMember{"a": {ModuleSpec: cfgModule("r/a:1", "")}}}},
			wantID:  "clusterwide-group-bad",
			wantErr: `ClusterAdmissionPolicyGroup bad|spec.expression: value "a() &&"`,
		},
		{
			name: "settings that are not an object",
			policy: &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "list"}, Spec: v1.ClusterAdmissionPolicySpec{
				WebhookSpec: webhook, ModuleSpec: cfgModule("r/a:1", `[1]`)}},
			wantID:  "clusterwide-list",
			wantErr: "spec.settings|must be an object",
		},
		{
			name: "member settings that are not an object",
			policy: &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}, Spec: v1.AdmissionPolicyGroupSpec{
				WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a()", Message: "m"},
				Policies: map[string]v1.PolicyGroupMember{"a": {ModuleSpec: cfgModule("r/a:1", `"x"`)}}}},
			wantID:  "namespaced-group-ns-g",
			wantErr: "spec.policies.a.settings|must be an object",
		},
		{
			name: "empty module",
			policy: &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "nomod"}, Spec: v1.ClusterAdmissionPolicySpec{
				WebhookSpec: webhook}},
			wantID:  "clusterwide-nomod",
			wantErr: `spec.module: value ""`,
		},
	}
	shadowed := func(sh *v1.PolicyShadow) *v1.ClusterAdmissionPolicy {
		return &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: v1.ClusterAdmissionPolicySpec{
			WebhookSpec: webhook, ModuleSpec: cfgModule("registry://r/p:1", `{"a":1}`), Shadow: sh}}
	}
	shadowGroup := func(sh *v1.GroupShadow) *v1.AdmissionPolicyGroup {
		return &v1.AdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}, Spec: v1.AdmissionPolicyGroupSpec{
			WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "a()", Message: "no"},
			Policies: map[string]v1.PolicyGroupMember{"a": {ModuleSpec: cfgModule("registry://r/a:1", "")}}, Shadow: sh}}
	}
	tests = append(tests, []struct {
		name    string
		policy  v1.Policy
		ps      *v1.PolicyServer
		wantID  string
		want    string
		wantErr string
	}{
		{
			name:   "shadow: module and settings",
			policy: shadowed(&v1.PolicyShadow{Module: "r/p:2", Settings: &runtime.RawExtension{Raw: []byte(`{"b":2,"a":1}`)}}),
			wantID: "clusterwide-s",
			want: `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":["*"],"module":"registry://r/p:1","namespacedName":{"Name":"s","Namespace":""},` +
				`"policyMode":"protect","settings":{"a":1},"shadow":{"module":"registry://r/p:2","settings":{"a":1,"b":2}}}`,
		},
		{
			name:   "shadow: settings only",
			policy: shadowed(&v1.PolicyShadow{Settings: &runtime.RawExtension{Raw: []byte(`{}`)}}),
			wantID: "clusterwide-s",
			want: `{"allowedToMutate":false,"contextAwareResources":[],"hostCapabilities":["*"],"module":"registry://r/p:1","namespacedName":{"Name":"s","Namespace":""},` +
				`"policyMode":"protect","settings":{"a":1},"shadow":{"settings":{}}}`,
		},
		{
			name:    "shadow: settings not an object",
			policy:  shadowed(&v1.PolicyShadow{Settings: &runtime.RawExtension{Raw: []byte(`[1]`)}}),
			wantID:  "clusterwide-s",
			wantErr: `ClusterAdmissionPolicy s|spec.shadow.settings|must be an object`,
		},
		{
			name:    "shadow: a tenant's file:// module refused",
			policy:  shadowGroup(&v1.GroupShadow{Policies: map[string]v1.PolicyShadow{"a": {Module: "file:///etc/passwd"}}}),
			ps:      cfgPS(),
			wantID:  "namespaced-group-ns-g",
			wantErr: `spec.shadow.policies.a.module: value "file:///etc/passwd"|may never use file:// modules`,
		},
		{
			name:   "group shadow: expression and a member's settings",
			policy: shadowGroup(&v1.GroupShadow{Expression: "!a()", Policies: map[string]v1.PolicyShadow{"a": {Settings: &runtime.RawExtension{Raw: []byte(`{"x":1}`)}}}}),
			ps:     cfgPS(),
			wantID: "namespaced-group-ns-g",
			want: `{"expression":"a()","message":"no","namespacedName":{"Name":"g","Namespace":"ns"},"policies":{"a":{"contextAwareResources":[],"hostCapabilities":[],` +
				`"module":"registry://r/a:1","settings":{}}},"policyMode":"protect","shadow":{"expression":"!a()","policies":{"a":{"settings":{"x":1}}}}}`,
		},
		{
			name:    "group shadow: a new member without a module",
			policy:  shadowGroup(&v1.GroupShadow{Expression: "a() && b()", Policies: map[string]v1.PolicyShadow{"b": {Settings: &runtime.RawExtension{Raw: []byte(`{}`)}}}}),
			ps:      cfgPS(),
			wantID:  "namespaced-group-ns-g",
			wantErr: `AdmissionPolicyGroup ns/g: spec.shadow.policies.b.module: missing: b is not a member of the serving group`,
		},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, entry, err := BuildPolicyEntry(tt.policy, tt.ps, Options{})
			if id != tt.wantID {
				t.Errorf("id = %q, want %q", id, tt.wantID)
			}
			if tt.wantErr != "" {
				if !errors.Is(err, ErrPolicyRefused) {
					t.Fatalf("err = %v, want ErrPolicyRefused", err)
				}
				for _, s := range strings.Split(tt.wantErr, "|") {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("err = %q, want it to contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(entry)
			if string(got) != tt.want {
				t.Errorf("entry =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestBuildConfig(t *testing.T) {
	webhook := v1.WebhookSpec{PolicyServer: "default"}
	good := &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: v1.ClusterAdmissionPolicySpec{WebhookSpec: webhook, ModuleSpec: cfgModule("r/a:1", `{"z":1,"a":{"y":2,"b":3}}`)}}
	bad := &v1.ClusterAdmissionPolicyGroup{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1.ClusterAdmissionPolicyGroupSpec{
		WebhookSpec: webhook, GroupSpec: v1.GroupSpec{Expression: "(a()", Message: "m"},
		Policies: map[string]v1.ClusterPolicyGroupMember{"a": {ModuleSpec: cfgModule("r/a:1", "")}}}}
	ns := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a-b", Name: "c"}, Spec: v1.AdmissionPolicySpec{WebhookSpec: webhook, ModuleSpec: cfgModule("r/a:1", "")}}
	clash := &v1.AdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b-c"}, Spec: v1.AdmissionPolicySpec{WebhookSpec: webhook, ModuleSpec: cfgModule("r/a:1", "")}}

	b1, skipped := buildConfig([]v1.Policy{bad, ns, good, clash}, cfgPS(), Options{}, BuildPolicyEntry)
	b2, _ := buildConfig([]v1.Policy{clash, good, ns, bad}, cfgPS(), Options{}, BuildPolicyEntry)
	if string(b1) != string(b2) {
		t.Errorf("the order of the policies changed the bytes:\n%s\n%s", b1, b2)
	}
	pols, warnings, err := config.ParsePolicies("policies.yml", b1)
	if err != nil {
		t.Fatalf("the server refuses the file: %v\n%s", err, b1)
	}
	var ids []string
	for _, p := range pols {
		ids = append(ids, p.ID)
	}
	if want := []string{"clusterwide-good", "namespaced-a-b-c"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	for _, w := range warnings {
		if !strings.Contains(w, "namespacedName") && !strings.Contains(w, "hostCapabilities") {
			t.Errorf("unexpected warning %q", w)
		}
	}
	if len(skipped) != 2 || skipped["clusterwide-group-bad"] == nil || skipped["namespaced-a-b-c"] == nil {
		t.Fatalf("skipped = %v, want clusterwide-group-bad and namespaced-a-b-c", skipped)
	}
	if !strings.Contains(string(b1), `"settings": {`+"\n"+`      "a": {`) {
		t.Errorf("settings keys are not sorted:\n%s", b1)
	}

	// An id collision between two namespaced policies is reported for the second one in
	// namespace and name order.
	if err := skipped["namespaced-a-b-c"]; err == nil || !strings.Contains(err.Error(), "AdmissionPolicy a-b/c: id \"namespaced-a-b-c\" is already used by AdmissionPolicy a/b-c") {
		t.Errorf("collision: skipped = %v", skipped)
	}

	empty, skipped := buildConfig(nil, cfgPS(), Options{}, BuildPolicyEntry)
	if string(empty) != "{}\n" || skipped != nil {
		t.Errorf("no policies: %q, %v", empty, skipped)
	}
}

// TestBuildConfigOutput: the policies.yml of one PolicyServer, byte for byte; a policy the server
// would refuse is left out, with the reason.
func TestBuildConfigOutput(t *testing.T) {
	ps := &v1.PolicyServer{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	labels := &v1.AdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "labels"},
		Spec: v1.AdmissionPolicySpec{ModuleSpec: v1.ModuleSpec{
			Module:   "ghcr.io/kubewarden/policies/safe-labels:v1.0.0",
			Settings: runtime.RawExtension{Raw: []byte(`{"mandatory_labels": ["owner"]}`)},
		}},
	}
	broken := &v1.ClusterAdmissionPolicyGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "signed"},
		Spec: v1.ClusterAdmissionPolicyGroupSpec{
			GroupSpec: v1.GroupSpec{Expression: "signed() &&", Message: "unsigned image"},
			Policies:  map[string]v1.ClusterPolicyGroupMember{"signed": {ModuleSpec: v1.ModuleSpec{Module: "registry://r/sig:1"}}},
		},
	}
	yml, skipped := buildConfig([]v1.Policy{labels, broken}, ps, Options{}, BuildPolicyEntry)
	const want = `{
  "namespaced-team-a-labels": {
    "allowedToMutate": false,
    "contextAwareResources": [],
    "hostCapabilities": [],
    "module": "registry://ghcr.io/kubewarden/policies/safe-labels:v1.0.0",
    "namespacedName": {
      "Name": "labels",
      "Namespace": "team-a"
    },
    "policyMode": "protect",
    "settings": {
      "mandatory_labels": [
        "owner"
      ]
    }
  }
}
`
	if string(yml) != want {
		t.Errorf("policies.yml =\n%s\nwant\n%s", yml, want)
	}
	const refused = `the policy server would refuse this policy: ClusterAdmissionPolicyGroup signed: spec.expression: value "signed() &&": unexpected end of expression at offset 11`
	if err := skipped["clusterwide-group-signed"]; len(skipped) != 1 || err == nil || err.Error() != refused {
		t.Errorf("skipped = %v, want clusterwide-group-signed: %s", skipped, refused)
	}
}

func TestBuildSources(t *testing.T) {
	ps := cfgPS()
	ps.Spec.InsecureSources = []string{"b:5000", "a:5000", "b:5000"}
	ps.Spec.SourceAuthorities = map[string][]string{"r.example.com": {"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}
	b, err := BuildSources(ps)
	if err != nil {
		t.Fatal(err)
	}
	src, err := config.ParseSources("sources.yml", b)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:5000", "b:5000"}; !reflect.DeepEqual(src.InsecureSources, want) {
		t.Errorf("insecure = %v, want %v", src.InsecureSources, want)
	}
	if c := src.SourceAuthorities["r.example.com"]; len(c) != 1 || !strings.Contains(string(c[0].Data), "MIIB") {
		t.Errorf("authorities = %+v", src.SourceAuthorities)
	}

	ps.Spec.SourceAuthorities = map[string][]string{"r.example.com": {"not a pem"}}
	ps.Spec.InsecureSources = []string{"http://x/"}
	_, err = BuildSources(ps)
	if !errors.Is(err, ErrSources) {
		t.Fatalf("err = %v, want ErrSources", err)
	}
	for _, s := range []string{`spec.insecureSources[0]: value "http://x/"`, `spec.sourceAuthorities["r.example.com"][0]`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("err = %q, want it to contain %q", err, s)
		}
	}

	empty, err := BuildSources(cfgPS())
	if err != nil || string(empty) != "{\n  \"insecure_sources\": [],\n  \"source_authorities\": {}\n}\n" {
		t.Errorf("empty sources: %q, %v", empty, err)
	}
}

// BenchmarkBuildConfig: the work of one PolicyServer reconcile's ConfigMap for 200 policies.
func BenchmarkBuildConfig(b *testing.B) {
	var pols []v1.Policy
	for i := range 200 {
		pols = append(pols, &v1.ClusterAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i)}, Spec: v1.ClusterAdmissionPolicySpec{
			WebhookSpec: v1.WebhookSpec{PolicyServer: "default"},
			ModuleSpec:  cfgModule("registry://ghcr.io/kubewarden/policies/safe-labels:v1.0.0", `{"mandatory_labels":["owner","team"],"denied_labels":["x"]}`)}})
	}
	ps := cfgPS()
	b.ReportAllocs()
	for b.Loop() {
		buildConfig(pols, ps, Options{}, BuildPolicyEntry)
	}
}
