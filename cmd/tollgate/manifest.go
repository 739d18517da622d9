package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/metadata"
)

// policyManifest is a ClusterAdmissionPolicy or AdmissionPolicy given to run
// or bench in place of a module, as kwctl takes one: the module is
// spec.module, the settings spec.settings, and a ClusterAdmissionPolicy's
// spec.contextAwareResources is what --allow-context-aware lets the policy
// read (an AdmissionPolicy may read nothing, as in the cluster).
type policyManifest struct {
	file     string
	kind     string
	module   string
	settings json.RawMessage
	// contextAware is nil for an AdmissionPolicy.
	contextAware []metadata.ContextAwareResource
}

// policyManifestGroups are the API groups whose policies run and bench take.
var policyManifestGroups = []string{"policies.kubewarden.io/", "policies.tollgate.dev/"}

// readPolicyManifest reads arg as a policy manifest when it is a local
// .yaml/.yml file; ok is false for anything else (a module path or URI).
func readPolicyManifest(arg string) (m *policyManifest, ok bool, err error) {
	ext := strings.ToLower(filepath.Ext(arg))
	if ext != ".yaml" && ext != ".yml" || strings.Contains(arg, "://") {
		return nil, false, nil
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		return nil, true, fmt.Errorf("policy manifest: %w", err)
	}
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Module                string                          `json:"module"`
			Settings              json.RawMessage                 `json:"settings"`
			ContextAwareResources []metadata.ContextAwareResource `json:"contextAwareResources"`
			Policies              json.RawMessage                 `json:"policies"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, true, fmt.Errorf("policy manifest %s: %w", arg, err)
	}
	group := false
	for _, g := range policyManifestGroups {
		group = group || strings.HasPrefix(doc.APIVersion, g)
	}
	if !group {
		return nil, true, fmt.Errorf("policy manifest %s: apiVersion %q: want a policy of %s (or give a module path or URI)",
			arg, doc.APIVersion, strings.Join([]string{"policies.kubewarden.io/v1", "policies.tollgate.dev/v1"}, " or "))
	}
	m = &policyManifest{file: arg, kind: doc.Kind, module: doc.Spec.Module}
	switch doc.Kind {
	case "ClusterAdmissionPolicy":
		m.contextAware = doc.Spec.ContextAwareResources
		if m.contextAware == nil {
			m.contextAware = []metadata.ContextAwareResource{}
		}
	case "AdmissionPolicy":
	case "ClusterAdmissionPolicyGroup", "AdmissionPolicyGroup":
		return nil, true, fmt.Errorf("policy manifest %s: kind %s: a policy group cannot be run as one module; run its members (spec.policies) one by one, or serve it", arg, doc.Kind)
	default:
		return nil, true, fmt.Errorf("policy manifest %s: kind %q: want ClusterAdmissionPolicy or AdmissionPolicy", arg, doc.Kind)
	}
	if m.module == "" {
		return nil, true, fmt.Errorf("policy manifest %s: spec.module is empty", arg)
	}
	for i, r := range m.contextAware {
		if r.APIVersion == "" || r.Kind == "" {
			return nil, true, fmt.Errorf("policy manifest %s: spec.contextAwareResources[%d]: apiVersion and kind are required (got %q, %q)", arg, i, r.APIVersion, r.Kind)
		}
	}
	if s := strings.TrimSpace(string(doc.Spec.Settings)); s != "" && s != "null" {
		if !strings.HasPrefix(s, "{") {
			return nil, true, fmt.Errorf("policy manifest %s: spec.settings: want an object, got %s", arg, s)
		}
		m.settings = doc.Spec.Settings
	}
	return m, true, nil
}
