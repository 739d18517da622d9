package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestKubewardenOperatorJSON: the policies.yml the Kubewarden controller
// writes into its ConfigMap is compact JSON (json.Marshal: <, > and & as
// \u escapes, null settings, namespacedName on every entry and
// hostCapabilities on every policy and group member). It parses as YAML,
// with hostCapabilities kept, and namespacedName accepted silently.
func TestKubewardenOperatorJSON(t *testing.T) {
	data, err := os.ReadFile("testdata/kubewarden-operator.json")
	if err != nil {
		t.Fatal(err)
	}
	pols, warns, err := ParsePolicies("policies.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	// namespacedName is the controller's bookkeeping (silent)
	if len(warns) != 0 {
		t.Errorf("warnings: %q", warns)
	}
	var ids []string
	for _, p := range pols {
		ids = append(ids, p.ID)
	}
	if got := strings.Join(ids, ","); got != "clusterwide-psp-capabilities,clusterwide-signed-images,namespaced-team-a-labels" {
		t.Fatalf("ids = %s", got)
	}
	psp, g, ns := pols[0], pols[1], pols[2]
	if psp.Module != "registry://ghcr.io/kubewarden/policies/psp-capabilities:v0.1.9" || !psp.AllowedToMutate || psp.Mode != ModeProtect ||
		psp.Timeout != 5*time.Second || psp.Message != "capabilities must be <dropped> & listed" ||
		string(psp.Settings) != `{"allowed_capabilities":["CHOWN"],"required_drop_capabilities":["NET_ADMIN"]}` {
		t.Errorf("psp = %+v settings %s", psp, psp.Settings)
	}
	if ns.Mode != ModeMonitor || ns.AllowedToMutate || string(ns.Settings) != "{}" ||
		len(ns.ContextAwareResources) != 1 || ns.ContextAwareResources[0] != (ContextAwareResource{"v1", "Namespace"}) {
		t.Errorf("namespaced = %+v settings %s", ns, ns.Settings)
	}
	if !g.IsGroup() || g.Group.Expression != "sigstore_pgp() && reject_latest()" || g.Message != "the image is not signed" || len(g.Group.Members) != 2 {
		t.Fatalf("group = %+v", g)
	}
	latest, pgp := g.Group.Members[0], g.Group.Members[1]
	if string(latest.Settings) != `{"tags":{"reject":["latest"]}}` || string(pgp.Settings) != "{}" || pgp.Timeout != 3*time.Second ||
		len(pgp.ContextAwareResources) != 1 || pgp.ContextAwareResources[0].Kind != "Secret" {
		t.Errorf("members = %+v", g.Group.Members)
	}
	caps := []string{strings.Join(psp.HostCapabilities, ","), strings.Join(ns.HostCapabilities, ","),
		strings.Join(latest.HostCapabilities, ","), strings.Join(pgp.HostCapabilities, ",")}
	if got := strings.Join(caps, " "); got != "* kubernetes/get_resource,oci/v1/* * *" {
		t.Errorf("hostCapabilities = %s", got)
	}
}

// TestKubewardenOperatorSourcesJSON: sources.yml as the controller writes
// it (JSON, certificates as {type: Data, data: PEM}, empty lists and maps).
func TestKubewardenOperatorSourcesJSON(t *testing.T) {
	data, err := os.ReadFile("testdata/kubewarden-operator-sources.json")
	if err != nil {
		t.Fatal(err)
	}
	src, err := ParseSources("sources.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	certs := src.SourceAuthorities["registry.example.com:5500"]
	if len(src.InsecureSources) != 1 || src.InsecureSources[0] != "localhost:5000" || len(certs) != 1 ||
		!strings.HasPrefix(string(certs[0].Data), "-----BEGIN CERTIFICATE-----\nMIIB") {
		t.Fatalf("sources = %+v", src)
	}
	empty, err := ParseSources("sources.yml", []byte(`{"insecure_sources":[],"source_authorities":{}}`))
	if err != nil || len(empty.InsecureSources) != 0 || len(empty.SourceAuthorities) != 0 {
		t.Fatalf("empty sources: %+v %v", empty, err)
	}
}
