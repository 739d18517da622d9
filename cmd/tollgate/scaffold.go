package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/config"
)

func newScaffoldCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scaffold",
		Short: "Generate configuration from existing policies",
	}
	cmd.AddCommand(newScaffoldMAPCmd(), newScaffoldGatekeeperCmd(), newScaffoldVerificationConfigCmd())
	return cmd
}

// mapBuiltinModule is the built-in module that runs MutatingAdmissionPolicies.
const mapBuiltinModule = "builtin://mutating-admission-policy"

func newScaffoldMAPCmd() *cobra.Command {
	var policyPath, bindingPath, paramsPath, output, module, name string
	var rbacPaths []string
	cmd := &cobra.Command{
		Use:   "map -p POLICY.yaml [-b BINDING.yaml] [--params PARAMS.yaml] [--rbac RBAC.yaml]...",
		Short: "Print the configuration that runs a Kubernetes MutatingAdmissionPolicy with tollgate",
		Long: `Print a policies.yml entry (default) or a Kubewarden-style ClusterAdmissionPolicy
manifest (-o clusteradmissionpolicy) that runs a Kubernetes MutatingAdmissionPolicy,
as it is, through the built-in module builtin://mutating-admission-policy;
-o settings prints only the settings, for tollgate run -s.

POLICY.yaml holds a MutatingAdmissionPolicy (admissionregistration.k8s.io/v1,
v1beta1 or v1alpha1); it may also hold the binding as a second document.
BINDING.yaml holds its MutatingAdmissionPolicyBinding; without one the policy
applies to everything its matchConstraints select. PARAMS.yaml holds the
parameter objects (one or more documents, or a List) the binding's paramRef
selects from. RBAC.yaml (--rbac, repeatable) holds Roles, ClusterRoles,
RoleBindings and ClusterRoleBindings (rbac.authorization.k8s.io/v1; documents or
Lists, e.g. the output of kubectl get clusterroles,clusterrolebindings -o yaml):
the policy's CEL authorizer checks answer from them as the cluster's RBAC would.`,
		Example: `  tollgate scaffold map -p sidecar-policy.yaml -b sidecar-binding.yaml > policies.yml
  tollgate scaffold map -p policy.yaml --params configmaps.yaml -o clusteradmissionpolicy
  tollgate scaffold map -p policy.yaml --rbac roles.yaml --rbac bindings.yaml
  tollgate scaffold map -p policy.yaml -o settings > settings.yml && tollgate run builtin://mutating-admission-policy -r req.json -s settings.yml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(output, "policies-yml", "clusteradmissionpolicy", "settings"); err != nil {
				return err
			}
			out, err := scaffoldMAP(policyPath, bindingPath, paramsPath, rbacPaths, output, module, name)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVarP(&policyPath, "policy", "p", "", "MutatingAdmissionPolicy YAML file (- for stdin)")
	cmd.Flags().StringVarP(&bindingPath, "binding", "b", "", "MutatingAdmissionPolicyBinding YAML file")
	cmd.Flags().StringVar(&paramsPath, "params", "", "parameter objects YAML file (several documents or a List)")
	cmd.Flags().StringArrayVar(&rbacPaths, "rbac", nil, "RBAC objects YAML file: Roles, ClusterRoles, RoleBindings, ClusterRoleBindings (repeatable; several documents or a List)")
	cmd.Flags().StringVarP(&output, "output", "o", "policies-yml", "output: policies-yml, clusteradmissionpolicy, or settings (for tollgate run -s)")
	cmd.Flags().StringVar(&module, "module", mapBuiltinModule, "module URI that runs the policy")
	cmd.Flags().StringVar(&name, "name", "", "policy id / resource name (default: the MutatingAdmissionPolicy's name)")
	_ = cmd.MarkFlagRequired("policy")
	return cmd
}

const (
	mapKind        = "MutatingAdmissionPolicy"
	mapBindingKind = "MutatingAdmissionPolicyBinding"
	mapGroup       = "admissionregistration.k8s.io/"
)

// scaffoldMAP reads the files and renders the configuration.
func scaffoldMAP(policyPath, bindingPath, paramsPath string, rbacPaths []string, output, module, name string) ([]byte, error) {
	docs, err := readYAMLDocs(policyPath)
	if err != nil {
		return nil, err
	}
	var policy, binding map[string]any
	for i, d := range docs {
		kind, _ := d["kind"].(string)
		apiVersion, _ := d["apiVersion"].(string)
		switch {
		case kind == mapKind && strings.HasPrefix(apiVersion, mapGroup):
			if policy != nil {
				return nil, fmt.Errorf("%s: document %d: a second %s (give one policy per file)", policyPath, i+1, mapKind)
			}
			policy = d
		case kind == mapBindingKind && strings.HasPrefix(apiVersion, mapGroup):
			if binding != nil {
				return nil, fmt.Errorf("%s: document %d: a second %s", policyPath, i+1, mapBindingKind)
			}
			binding = d
		default:
			return nil, fmt.Errorf("%s: document %d: kind %q apiVersion %q is not a %s or %s of %s", policyPath, i+1, kind, apiVersion, mapKind, mapBindingKind, strings.TrimSuffix(mapGroup, "/"))
		}
	}
	if policy == nil {
		return nil, fmt.Errorf("%s: no %s in the file", policyPath, mapKind)
	}
	if bindingPath != "" {
		if binding != nil {
			return nil, fmt.Errorf("%s already holds a binding; do not give -b", policyPath)
		}
		bdocs, err := readYAMLDocs(bindingPath)
		if err != nil {
			return nil, err
		}
		if len(bdocs) != 1 || bdocs[0]["kind"] != mapBindingKind {
			return nil, fmt.Errorf("%s: want exactly one %s document", bindingPath, mapBindingKind)
		}
		binding = bdocs[0]
	}
	spec, _ := policy["spec"].(map[string]any)
	if spec == nil {
		return nil, fmt.Errorf("%s: the %s has no spec", policyPath, mapKind)
	}
	policyName := metadataName(policy)
	if policyName == "" {
		return nil, fmt.Errorf("%s: the %s has no metadata.name", policyPath, mapKind)
	}
	if binding != nil {
		bspec, _ := binding["spec"].(map[string]any)
		if pn, _ := bspec["policyName"].(string); pn != "" && pn != policyName {
			return nil, fmt.Errorf("binding %q binds policy %q, not %q", metadataName(binding), pn, policyName)
		}
	}
	var params []map[string]any
	if paramsPath != "" {
		pdocs, err := readYAMLDocs(paramsPath)
		if err != nil {
			return nil, err
		}
		for _, d := range pdocs {
			if items, ok := d["items"].([]any); ok && strings.HasSuffix(fmt.Sprint(d["kind"]), "List") {
				for _, it := range items {
					if m, ok := it.(map[string]any); ok {
						params = append(params, m)
					}
				}
				continue
			}
			params = append(params, d)
		}
	}
	settings := map[string]any{"policy": cleanObject(policy)}
	if binding != nil {
		settings["binding"] = cleanObject(binding)
	}
	if len(params) > 0 {
		var ps []any
		for _, p := range params {
			ps = append(ps, cleanObject(p))
		}
		settings["params"] = ps
	}
	if len(rbacPaths) > 0 {
		rbac, err := readRBAC(rbacPaths)
		if err != nil {
			return nil, err
		}
		settings["rbac"] = rbac
	}
	if name == "" {
		name = policyName
	}
	id := policyID(name)
	var doc any
	switch output {
	case "settings":
		doc = settings
	case "clusteradmissionpolicy":
		doc = map[string]any{
			"apiVersion": "policies.kubewarden.io/v1",
			"kind":       "ClusterAdmissionPolicy",
			"metadata":   map[string]any{"name": id},
			"spec": map[string]any{
				"module":   module,
				"mode":     "protect",
				"mutating": true,
				"rules":    mapRules(spec),
				"failurePolicy": func() string {
					if fp, _ := spec["failurePolicy"].(string); fp != "" {
						return fp
					}
					return "Fail"
				}(),
				"settings": settings,
			},
		}
	default:
		raw, err := marshalJSON(settings, false)
		if err != nil {
			return nil, err
		}
		mutate := true
		doc = map[string]config.Entry{id: {Module: module, AllowedToMutate: &mutate, Settings: bytes.TrimSpace(raw)}}
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf("# Generated by `tollgate scaffold map` from %s: runs the MutatingAdmissionPolicy %q with %s.\n", policyPath, policyName, module)
	return append([]byte(header), b...), nil
}

// rbacLists maps the kinds of rbac.authorization.k8s.io/v1 to the lists of
// the module's "rbac" setting.
var rbacLists = map[string]string{
	"Role":               "roles",
	"ClusterRole":        "clusterRoles",
	"RoleBinding":        "roleBindings",
	"ClusterRoleBinding": "clusterRoleBindings",
}

const rbacAPIVersion = "rbac.authorization.k8s.io/v1"

// readRBAC sorts the RBAC objects of the files (documents, or Lists of
// objects) into the "rbac" setting: {roles, clusterRoles, roleBindings,
// clusterRoleBindings}. Anything else is an error naming the file, the
// document and the kind: the module would refuse it anyway.
func readRBAC(paths []string) (map[string][]any, error) {
	out := map[string][]any{}
	add := func(where docSource, o map[string]any) error {
		kind, _ := o["kind"].(string)
		apiVersion, _ := o["apiVersion"].(string)
		list, ok := rbacLists[kind]
		if !ok || apiVersion != rbacAPIVersion {
			return fmt.Errorf("%s: kind %q apiVersion %q is not a Role, ClusterRole, RoleBinding or ClusterRoleBinding of %s", where, kind, apiVersion, rbacAPIVersion)
		}
		out[list] = append(out[list], cleanObject(o))
		return nil
	}
	for _, p := range paths {
		docs, err := readYAMLDocs(p)
		if err != nil {
			return nil, err
		}
		if err := eachObject(p, docs, add); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// docSource names where an object was read: file, document (1-based) and,
// for an item of a List, its index (0-based; -1 for a document).
type docSource struct {
	file string
	doc  int
	item int
}

func (s docSource) String() string {
	w := fmt.Sprintf("%s: document %d", s.file, s.doc)
	if s.item >= 0 {
		w += fmt.Sprintf(": items[%d]", s.item)
	}
	return w
}

// eachObject calls fn with each object of file's YAML documents: a document,
// or each item of a List (kubectl's List, or a typed list such as RoleList
// read from the API, whose items have no kind: they get the list's kind
// without "List" and its apiVersion). A document whose kind ends in "List"
// without an items array is passed as it is. An item that is not an object
// is an error naming it.
func eachObject(file string, docs []map[string]any, fn func(src docSource, o map[string]any) error) error {
	for i, d := range docs {
		kind, _ := d["kind"].(string)
		items, isList := d["items"].([]any)
		if !strings.HasSuffix(kind, "List") || !isList {
			if err := fn(docSource{file, i + 1, -1}, d); err != nil {
				return err
			}
			continue
		}
		for j, it := range items {
			src := docSource{file, i + 1, j}
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: not an object", src)
			}
			if _, has := m["kind"]; !has && kind != "List" {
				m["kind"] = strings.TrimSuffix(kind, "List")
				m["apiVersion"] = d["apiVersion"]
			}
			if err := fn(src, m); err != nil {
				return err
			}
		}
	}
	return nil
}

// mapRules turns matchConstraints.resourceRules into Kubewarden rules, so
// that the webhook is only called for what the policy can match.
func mapRules(spec map[string]any) []any {
	mc, _ := spec["matchConstraints"].(map[string]any)
	rules, _ := mc["resourceRules"].([]any)
	var out []any
	for _, r := range rules {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		rule := map[string]any{}
		for _, k := range []string{"apiGroups", "apiVersions", "resources", "operations", "scope"} {
			if v, ok := m[k]; ok {
				rule[k] = v
			}
		}
		out = append(out, rule)
	}
	return out
}

// cleanObject drops server-populated metadata that has no place in settings.
func cleanObject(o map[string]any) map[string]any {
	md, _ := o["metadata"].(map[string]any)
	if md == nil {
		return o
	}
	c := map[string]any{}
	for k, v := range o {
		c[k] = v
	}
	m := map[string]any{}
	for k, v := range md {
		switch k {
		case "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink":
		default:
			m[k] = v
		}
	}
	c["metadata"] = m
	return c
}

func metadataName(o map[string]any) string {
	md, _ := o["metadata"].(map[string]any)
	n, _ := md["name"].(string)
	return n
}

var notIDChars = regexp.MustCompile(`[^a-z0-9-]+`)

// policyID makes a Kubernetes-resource-safe id of a policy name.
func policyID(name string) string {
	id := strings.Trim(notIDChars.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if id == "" {
		id = "mutating-admission-policy"
	}
	return id
}

// readYAMLDocs reads the YAML documents of a file (- for stdin), skipping empty ones.
func readYAMLDocs(path string) ([]map[string]any, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	return parseYAMLDocs(path, data)
}

// parseYAMLDocs parses the YAML documents of data, read from path (for
// messages), skipping empty ones.
func parseYAMLDocs(path string, data []byte) ([]map[string]any, error) {
	var docs []map[string]any
	for i, part := range splitYAMLDocs(data) {
		if len(bytes.TrimSpace(stripComments(part))) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(part)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, fmt.Errorf("%s: document %d: not an object: %w", path, i+1, err)
		}
		if m == nil {
			continue
		}
		docs = append(docs, m)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.New("no YAML documents"))
	}
	return docs, nil
}

func splitYAMLDocs(data []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '#' {
			continue
		}
		out = append(out, line...)
	}
	return out
}
