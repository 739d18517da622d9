package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/host/policy"
)

// gkBuiltinModule is the built-in module that runs Gatekeeper mutators.
const gkBuiltinModule = "builtin://gatekeeper-mutation"

const gkMutationsGroup = "mutations.gatekeeper.sh"

// gkKinds are the mutator kinds of mutations.gatekeeper.sh.
var gkKinds = map[string]bool{"Assign": true, "AssignMetadata": true, "ModifySet": true, "AssignImage": true}

type scaffoldGKOptions struct {
	outputKind, format, module, name, rules string
	fromCluster, recursive, noCache         bool
	namespacesPath, cacheDir                string
}

func newScaffoldGatekeeperCmd() *cobra.Command {
	var o scaffoldGKOptions
	cmd := &cobra.Command{
		Use:   "gatekeeper FILE|DIR...",
		Short: "Print the configuration that runs OPA Gatekeeper mutators with tollgate",
		Long: `Print a policies.yml entry (default), a Kubewarden-style ClusterAdmissionPolicy
(--output-kind clusteradmissionpolicy) or only the settings (--output-kind settings,
for tollgate run -s) that run OPA Gatekeeper mutators (Assign, AssignMetadata,
ModifySet, AssignImage of mutations.gatekeeper.sh), as they are, through the
built-in module builtin://gatekeeper-mutation.

Each argument is a YAML (or JSON) file of one or more documents, or a directory
whose .yaml, .yml and .json files are read (-R: and its subdirectories). A List
(kubectl get assign,modifyset -o yaml) is read item by item. Objects that are not
mutators are skipped with a warning on standard error. The mutators are checked
by the module's own validate_settings, so that what this command prints is what
the module accepts; a refusal names the file, the document and the field.

The ClusterAdmissionPolicy's rules are derived from the mutators' applyTo (and,
for AssignMetadata, which has no applyTo, from match.kinds, else every
resource): kinds become resources by Kubernetes' lowercase-plural guess
(k8s.io/apimachinery meta.UnsafeGuessKindToResource: Pod -> pods,
NetworkPolicy -> networkpolicies, Ingress -> ingresses), not by discovery; give
--rules for kinds it guesses wrong.

--from-cluster sets fromCluster: the module reads the request's Namespace from
the cluster (kubernetes/get_resource) for namespaceSelector, and the entry
declares v1 Namespace in contextAwareResources. Without it, --namespaces gives
the Namespace objects namespaceSelector sees (other namespaces have no labels).`,
		Example: `  tollgate scaffold gatekeeper mutators/ > policies.yml
  tollgate scaffold gatekeeper always-pull.yaml owner-label.yaml --output-kind clusteradmissionpolicy
  kubectl get assign,assignmetadata,modifyset,assignimage -A -o yaml | tollgate scaffold gatekeeper - --from-cluster
  tollgate scaffold gatekeeper mutators/ --output-kind settings > settings.yml && tollgate run builtin://gatekeeper-mutation -r review.json -s settings.yml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(o.outputKind, "policies-yml", "clusteradmissionpolicy", "settings"); err != nil {
				return fmt.Errorf("--output-kind %q: want policies-yml, clusteradmissionpolicy or settings", o.outputKind)
			}
			if err := checkFormat(o.format, "yaml", "json"); err != nil {
				return err
			}
			if o.fromCluster && o.namespacesPath != "" {
				return errors.New("--from-cluster reads namespaces from the cluster: do not give --namespaces")
			}
			out, err := scaffoldGatekeeper(cmd.Context(), args, o, cmd.InOrStdin(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.outputKind, "output-kind", "policies-yml", "what to print: policies-yml, clusteradmissionpolicy, or settings (for tollgate run -s)")
	f.StringVarP(&o.format, "output", "o", "yaml", "output format: yaml or json")
	f.StringVar(&o.module, "module", gkBuiltinModule, "module URI that runs the mutators (its validate_settings checks them)")
	f.StringVar(&o.name, "name", "gatekeeper-mutation", "policy id / resource name")
	f.StringVar(&o.rules, "rules", "", "the ClusterAdmissionPolicy's rules as a YAML or JSON list, instead of those derived from applyTo")
	f.BoolVar(&o.fromCluster, "from-cluster", false, "read namespaces from the cluster (settings fromCluster: true, contextAwareResources v1 Namespace)")
	f.StringVar(&o.namespacesPath, "namespaces", "", "YAML file of Namespace objects for namespaceSelector (documents or a List)")
	f.BoolVarP(&o.recursive, "recursive", "R", false, "read directories recursively")
	f.StringVar(&o.cacheDir, "cache-dir", "", "compilation cache directory of the module that checks the mutators")
	f.BoolVar(&o.noCache, "no-cache", false, "do not use the on-disk compilation cache")
	return cmd
}

// docSource is where a mutator came from, for messages.

// gkFiles expands the arguments into files: a directory gives its .yaml,
// .yml and .json files, sorted (recursively with -R).
func gkFiles(args []string, recursive bool) ([]string, error) {
	var files []string
	for _, a := range args {
		if a == "-" {
			files = append(files, a)
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		var found []string
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != a && !recursive {
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", a)
		}
		sort.Strings(found)
		files = append(files, found...)
	}
	return files, nil
}

// readGKDocs reads the YAML documents of a file (- for stdin) as objects.
func readGKDocs(path string, stdin io.Reader) ([]map[string]any, error) {
	if path != "-" {
		return readYAMLDocs(path)
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return nil, err
	}
	return parseYAMLDocs("standard input", data)
}

// isMutator says whether an object is meant as a Gatekeeper mutator: any
// kind of the mutations.gatekeeper.sh group (the module refuses the kinds it
// does not know, with the reason).
func isMutator(o map[string]any) bool {
	av, _ := o["apiVersion"].(string)
	g, _, _ := strings.Cut(av, "/")
	return g == gkMutationsGroup
}

// scaffoldGatekeeper reads the mutators, checks them with the module and
// renders the configuration.
func scaffoldGatekeeper(ctx context.Context, args []string, o scaffoldGKOptions, stdin io.Reader, stderr io.Writer) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	files, err := gkFiles(args, o.recursive)
	if err != nil {
		return nil, err
	}
	var mutators []any
	var sources []docSource
	add := func(src docSource, obj map[string]any) error {
		if !isMutator(obj) {
			fmt.Fprintf(stderr, "tollgate: warning: %s: skipping kind %q apiVersion %q: not a Gatekeeper mutator (%s)\n", src, obj["kind"], obj["apiVersion"], gkMutationsGroup)
			return nil
		}
		mutators = append(mutators, cleanMutator(obj))
		sources = append(sources, src)
		return nil
	}
	for _, f := range files {
		docs, err := readGKDocs(f, stdin)
		if err != nil {
			return nil, err
		}
		name := f
		if f == "-" {
			name = "standard input"
		}
		if err := eachObject(name, docs, add); err != nil {
			return nil, err
		}
	}
	if len(mutators) == 0 {
		return nil, fmt.Errorf("no Gatekeeper mutators (%s) in %s", gkMutationsGroup, strings.Join(args, ", "))
	}
	settings := map[string]any{"mutators": mutators}
	if o.fromCluster {
		settings["fromCluster"] = true
	}
	if o.namespacesPath != "" {
		nss, err := readNamespaces(o.namespacesPath, stdin)
		if err != nil {
			return nil, err
		}
		settings["namespaces"] = nss
	}
	if err := checkGKSettings(ctx, o, settings, sources); err != nil {
		return nil, err
	}

	id := policyID(o.name)
	var doc any
	switch o.outputKind {
	case "settings":
		doc = settings
	case "clusteradmissionpolicy":
		var rules []any
		if o.rules != "" {
			if err := yaml.Unmarshal([]byte(o.rules), &rules); err != nil || len(rules) == 0 {
				return nil, fmt.Errorf("--rules: want a non-empty YAML or JSON list of rules: %v", err)
			}
		} else {
			rules = gkRules(mutators)
		}
		spec := map[string]any{
			"module":        o.module,
			"mode":          "protect",
			"mutating":      true,
			"rules":         rules,
			"failurePolicy": "Fail",
			"settings":      settings,
		}
		if o.fromCluster {
			spec["contextAwareResources"] = []any{map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
		}
		doc = map[string]any{
			"apiVersion": "policies.kubewarden.io/v1",
			"kind":       "ClusterAdmissionPolicy",
			"metadata":   map[string]any{"name": id},
			"spec":       spec,
		}
	default:
		raw, err := marshalJSON(settings, false)
		if err != nil {
			return nil, err
		}
		mutate := true
		entry := config.Entry{Module: o.module, AllowedToMutate: &mutate, Settings: bytes.TrimSpace(raw)}
		if o.fromCluster {
			entry.ContextAwareResources = []config.ContextAwareResource{{APIVersion: "v1", Kind: "Namespace"}}
		}
		doc = map[string]config.Entry{id: entry}
	}
	if o.format == "json" {
		return marshalJSON(doc, true)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf("# Generated by `tollgate scaffold gatekeeper` from %s: %d Gatekeeper mutators run by %s.\n", strings.Join(args, ", "), len(mutators), o.module)
	return append([]byte(header), b...), nil
}

// cleanMutator drops what the API server adds to an object read back (server
// metadata, kubectl's last-applied annotation, status).
func cleanMutator(o map[string]any) map[string]any {
	c := cleanObject(o)
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
	return c
}

func readNamespaces(path string, stdin io.Reader) ([]any, error) {
	docs, err := readGKDocs(path, stdin)
	if err != nil {
		return nil, err
	}
	var out []any
	err = eachObject(path, docs, func(src docSource, m map[string]any) error {
		if m["kind"] != "Namespace" || m["apiVersion"] != "v1" {
			return fmt.Errorf("%s: kind %q apiVersion %q is not a v1 Namespace", src, m["kind"], m["apiVersion"])
		}
		out = append(out, cleanObject(m))
		return nil
	})
	return out, err
}

// mutatorIndex finds "mutators[N]" in the module's refusal.
var mutatorIndex = regexp.MustCompile(`mutators\[(\d+)\]`)

// checkGKSettings runs the module's validate_settings on the settings and
// rewrites a refusal's "mutators[N]" into the file and document of mutator N.
func checkGKSettings(ctx context.Context, o scaffoldGKOptions, settings map[string]any, sources []docSource) error {
	b, err := json.Marshal(settings)
	if err != nil {
		return err
	}
	m, err := newResolver().Resolve(ctx, o.module)
	if err != nil {
		return err
	}
	h, err := policy.NewHost(ctx, policy.HostOptions{CacheDir: o.cacheDir, DisableCache: o.noCache})
	if err != nil {
		return err
	}
	defer h.Close(ctx)
	p, err := h.Load(ctx, policy.Spec{ID: o.module, Module: m.Wasm, Settings: b, PoolSize: 1})
	if err == nil {
		p.Close(ctx)
		return nil
	}
	if !errors.Is(err, policy.ErrInvalidSettings) {
		return err
	}
	msg := err.Error()
	if i := strings.Index(msg, "invalid settings: "); i >= 0 {
		msg = msg[i+len("invalid settings: "):]
	}
	msg = mutatorIndex.ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(mutatorIndex.FindStringSubmatch(s)[1])
		if n < len(sources) {
			return sources[n].String()
		}
		return s
	})
	return fmt.Errorf("invalid mutator: %s", msg)
}

// gkRules derives Kubewarden rules from the mutators' applyTo: one rule per
// applyTo entry (kinds to resources by meta.UnsafeGuessKindToResource,
// operations as given, else CREATE and UPDATE); an AssignMetadata applies to
// its match.kinds, else to every resource.
func gkRules(mutators []any) []any {
	var out []any
	seen := map[string]bool{}
	addRule := func(groups, versions, resources, operations []string) {
		sort.Strings(resources)
		r := map[string]any{"apiGroups": groups, "apiVersions": versions, "resources": resources, "operations": operations}
		k, _ := json.Marshal(r)
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, r)
		}
	}
	createUpdate := []string{"CREATE", "UPDATE"}
	for _, mv := range mutators {
		m, _ := mv.(map[string]any)
		spec, _ := m["spec"].(map[string]any)
		if m["kind"] == "AssignMetadata" {
			match, _ := spec["match"].(map[string]any)
			kinds, _ := match["kinds"].([]any)
			if len(kinds) == 0 {
				addRule([]string{"*"}, []string{"*"}, []string{"*"}, createUpdate)
			}
			for _, kv := range kinds {
				k, _ := kv.(map[string]any)
				groups := strs(k["apiGroups"])
				if len(groups) == 0 {
					groups = []string{"*"}
				}
				addRule(groups, []string{"*"}, resourcesOf(strs(k["kinds"]), "v1"), createUpdate)
			}
			continue
		}
		applyTo, _ := spec["applyTo"].([]any)
		for _, av := range applyTo {
			a, _ := av.(map[string]any)
			ops := strs(a["operations"])
			if len(ops) == 0 {
				ops = createUpdate
			}
			versions := strs(a["versions"])
			v := "v1"
			if len(versions) > 0 {
				v = versions[0]
			}
			addRule(strs(a["groups"]), versions, resourcesOf(strs(a["kinds"]), v), ops)
		}
	}
	return out
}

func resourcesOf(kinds []string, version string) []string {
	if len(kinds) == 0 {
		return []string{"*"}
	}
	var out []string
	for _, k := range kinds {
		if k == "*" || k == "" {
			return []string{"*"}
		}
		plural, _ := meta.UnsafeGuessKindToResource(schema.GroupVersionKind{Version: version, Kind: k})
		out = append(out, plural.Resource)
	}
	return out
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
