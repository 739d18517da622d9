package gkdiff

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Case is one hand-written case of testdata/cases/*.yaml: settings and the
// requests run against them.
type Case struct {
	Name string `json:"name"`
	// Rule is the rule of issue 14 item 2 the case covers.
	Rule string `json:"rule"`
	// Mutators are Gatekeeper mutator objects. Shorthands: apiVersion
	// defaults to mutations.gatekeeper.sh/v1 (v1alpha1 for AssignImage);
	// "name" sets metadata.name; a spec without applyTo gets
	// applyTo [{groups: [""], versions: [v1], kinds: [Pod]}] for the kinds
	// that need it, unless the case says noDefaults.
	Mutators   []map[string]interface{} `json:"mutators"`
	Namespaces []map[string]interface{} `json:"namespaces"`
	NoDefaults bool                     `json:"noDefaults"`
	// ApplyTo replaces the default applyTo of the shorthand.
	ApplyTo []interface{} `json:"applyTo"`
	// Refused: the settings must be refused; Reason must be in both messages.
	Refused bool   `json:"refused"`
	Reason  string `json:"reason"`
	// TollgateRefuses: tollgate refuses settings Gatekeeper accepts, by
	// design (externalData); Reason must be in tollgate's message.
	TollgateRefuses bool `json:"tollgateRefuses"`
	// SettingsRaw replaces the settings built from Mutators and Namespaces
	// (for JSON number forms YAML cannot keep, or settings that are not
	// even the right shape).
	SettingsRaw string        `json:"settingsRaw"`
	Requests    []CaseRequest `json:"requests"`
}

// CaseRequest is one request of a case.
type CaseRequest struct {
	Name string `json:"name"`
	// Op defaults to CREATE.
	Op string `json:"op"`
	// Object is an object, or the name of a fixture of testdata/objects.yaml.
	Object interface{} `json:"object"`
	// ObjectJSON is the object as raw JSON (number forms YAML loses).
	ObjectJSON string `json:"objectJSON"`
	// Patch is merged into a fixture object (JSON merge patch).
	Patch map[string]interface{} `json:"patch"`
	// Namespace is the request namespace; default the object's.
	Namespace *string `json:"namespace"`
	User      string  `json:"user"`
	// Expect is what Gatekeeper does: mutated, unchanged or rejected (a
	// guard that the case tests what it says).
	Expect string `json:"expect"`
	// Contains must be in the outcome (the mutated object or the reason).
	Contains string `json:"contains"`
}

// kindTable maps a kind to its group and version when the object's
// apiVersion is not enough (it always is in the fixtures).
func splitAPIVersion(av string) (group, version string) {
	if i := strings.IndexByte(av, '/'); i >= 0 {
		return av[:i], av[i+1:]
	}
	return "", av
}

// LoadCases reads every testdata/cases/*.yaml below dir.
func LoadCases(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "cases", "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var all []Case
	names := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var cs []Case
		if err := yaml.UnmarshalStrict(b, &cs); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, c := range cs {
			if c.Name == "" {
				return nil, fmt.Errorf("%s: a case without a name", f)
			}
			if prev, ok := names[c.Name]; ok {
				return nil, fmt.Errorf("%s: case %q already in %s", f, c.Name, prev)
			}
			names[c.Name] = f
			if c.Rule == "" {
				return nil, fmt.Errorf("%s: case %q names no rule", f, c.Name)
			}
			if !c.Refused && !c.TollgateRefuses && len(c.Requests) == 0 {
				return nil, fmt.Errorf("%s: case %q has no request", f, c.Name)
			}
			all = append(all, c)
		}
	}
	return all, nil
}

// Fixtures are the named objects of testdata/objects.yaml.
type Fixtures map[string]map[string]interface{}

// LoadFixtures reads testdata/objects.yaml.
func LoadFixtures(dir string) (Fixtures, error) {
	b, err := os.ReadFile(filepath.Join(dir, "objects.yaml"))
	if err != nil {
		return nil, err
	}
	var f Fixtures
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("objects.yaml: %w", err)
	}
	return f, nil
}

// SettingsJSON is the case's settings with its shorthands expanded.
func (c *Case) SettingsJSON() ([]byte, error) {
	if c.SettingsRaw != "" {
		return []byte(c.SettingsRaw), nil
	}
	ms := make([]interface{}, 0, len(c.Mutators))
	for _, m := range c.Mutators {
		m = deepCopyMap(m)
		kind, _ := m["kind"].(string)
		if _, ok := m["apiVersion"]; !ok {
			if kind == "AssignImage" {
				m["apiVersion"] = mutationsGroup + "/v1alpha1"
			} else {
				m["apiVersion"] = mutationsGroup + "/v1"
			}
		}
		if name, ok := m["name"]; ok {
			delete(m, "name")
			md, _ := m["metadata"].(map[string]interface{})
			if md == nil {
				md = map[string]interface{}{}
			}
			md["name"] = name
			m["metadata"] = md
		}
		if !c.NoDefaults && kind != "AssignMetadata" {
			spec, _ := m["spec"].(map[string]interface{})
			if spec != nil {
				if _, ok := spec["applyTo"]; !ok {
					spec["applyTo"] = []interface{}{map[string]interface{}{
						"groups": []interface{}{""}, "versions": []interface{}{"v1"}, "kinds": []interface{}{"Pod"},
					}}
					if c.ApplyTo != nil {
						spec["applyTo"] = c.ApplyTo
					}
				}
			}
		}
		ms = append(ms, m)
	}
	s := map[string]interface{}{"mutators": ms}
	if len(c.Namespaces) > 0 {
		ns := make([]interface{}, 0, len(c.Namespaces))
		for _, n := range c.Namespaces {
			n = deepCopyMap(n)
			if _, ok := n["apiVersion"]; !ok {
				n["apiVersion"] = "v1"
			}
			if _, ok := n["kind"]; !ok {
				n["kind"] = "Namespace"
			}
			ns = append(ns, n)
		}
		s["namespaces"] = ns
	}
	return json.Marshal(s)
}

// Request builds the admission request of a case request.
func (r *CaseRequest) Request(f Fixtures) (Request, error) {
	var obj map[string]interface{}
	if r.ObjectJSON != "" {
		d := json.NewDecoder(strings.NewReader(r.ObjectJSON))
		d.UseNumber()
		if err := d.Decode(&obj); err != nil {
			return Request{}, fmt.Errorf("objectJSON: %w", err)
		}
		return r.request(obj, []byte(r.ObjectJSON))
	}
	switch o := r.Object.(type) {
	case string:
		fx, ok := f[o]
		if !ok {
			return Request{}, fmt.Errorf("no fixture %q in objects.yaml", o)
		}
		obj = deepCopyMap(fx)
	case map[string]interface{}:
		obj = deepCopyMap(o)
	default:
		return Request{}, fmt.Errorf("object: want a fixture name or an object, got %T", r.Object)
	}
	if r.Patch != nil {
		obj = mergePatch(obj, r.Patch).(map[string]interface{})
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return Request{}, err
	}
	return r.request(obj, b)
}

func (r *CaseRequest) request(obj map[string]interface{}, b []byte) (Request, error) {
	av, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]interface{})
	name, _ := md["name"].(string)
	ns, _ := md["namespace"].(string)
	if r.Namespace != nil {
		ns = *r.Namespace
	}
	g, v := splitAPIVersion(av)
	op := r.Op
	if op == "" {
		op = "CREATE"
	}
	user := r.User
	if user == "" {
		user = "alice"
	}
	return Request{Operation: op, Username: user, Group: g, Version: v, Kind: kind, Namespace: ns, Name: name, Object: b}, nil
}

func deepCopyMap(m map[string]interface{}) map[string]interface{} {
	b, _ := json.Marshal(m)
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var out map[string]interface{}
	_ = d.Decode(&out)
	return out
}

// mergePatch applies an RFC 7386 merge patch.
func mergePatch(target interface{}, patch interface{}) interface{} {
	p, ok := patch.(map[string]interface{})
	if !ok {
		return patch
	}
	t, ok := target.(map[string]interface{})
	if !ok {
		t = map[string]interface{}{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
