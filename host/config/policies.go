package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/host/group"
)

// Mode is a policy's mode: protect (enforce) or monitor (log only).
type Mode string

// Policy modes, as in Kubewarden's policies.yml `policyMode`.
const (
	ModeProtect Mode = "protect"
	ModeMonitor Mode = "monitor"
)

// ContextAwareResource is a Kubernetes resource a policy may read through
// host calls.
type ContextAwareResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Policy is one entry of policies.yml: a single policy (Module set) or a
// policy group (Group set). Values are immutable once returned by Parse.
type Policy struct {
	// ID is the key in policies.yml; the endpoint is /validate/{ID}.
	ID string
	// Module is the module URI (policies only; empty for groups).
	Module string
	// Settings is a JSON object; {} when none, null or empty were given.
	Settings json.RawMessage
	// AllowedToMutate permits the policy to return a mutated object.
	AllowedToMutate bool
	// Mode is protect or monitor.
	Mode Mode
	// ContextAwareResources the policy may read.
	ContextAwareResources []ContextAwareResource
	// HostCapabilities are the host-capability patterns the policy may use
	// ("*", "oci/*", "kubernetes/get_resource", ...); nil when policies.yml
	// does not say, which tollgate serves as every capability. Patterns are
	// checked where they are enforced (host/capabilities), when the policy loads.
	HostCapabilities []string
	// Message, when set, replaces the rejection message; the original
	// goes to status.details.causes.
	Message string
	// Timeout is timeoutEvalSeconds; zero means the server default.
	Timeout time.Duration
	// Group is set for policy groups.
	Group *Group
	// Shadow is the candidate version evaluated beside this one, complete
	// (what the entry's shadow omits is this version's); nil for none.
	Shadow *Shadow
}

// IsGroup reports whether p is a policy group.
func (p *Policy) IsGroup() bool { return p.Group != nil }

// ContextAware reports whether the entry, or a member of the group,
// declares contextAwareResources.
func (p *Policy) ContextAware() bool {
	if len(p.ContextAwareResources) > 0 {
		return true
	}
	if p.Group != nil {
		for _, m := range p.Group.Members {
			if len(m.ContextAwareResources) > 0 {
				return true
			}
		}
	}
	return false
}

// Group is a policy group: members combined by a boolean expression.
type Group struct {
	// Expression is the source text, e.g. `a() && (b() || !c())`.
	Expression string
	// Expr is the parsed expression.
	Expr group.Expr
	// Members sorted by name.
	Members []Member
}

// Member is one policy of a group.
type Member struct {
	Name                  string
	Module                string
	Settings              json.RawMessage
	ContextAwareResources []ContextAwareResource
	// HostCapabilities as in Policy; a member without its own gets its group's.
	HostCapabilities []string
	Timeout          time.Duration
}

// Sentinel errors; every returned error wraps one of them.
var (
	// ErrInvalid marks a configuration value that is malformed or out of range.
	ErrInvalid = errors.New("invalid configuration")
	// ErrSyntax marks a file that is not well-formed YAML.
	ErrSyntax = errors.New("malformed YAML")
)

// FieldError names the file, the policy (and group member), the field and the
// value at fault.
type FieldError struct {
	File   string
	Line   int
	Policy string
	Member string
	Field  string
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Policy != "" {
		fmt.Fprintf(&b, ": policy %q", e.Policy)
	}
	if e.Member != "" {
		fmt.Fprintf(&b, " member %q", e.Member)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, ": value %s", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

// Warning is a non-fatal remark about a configuration (an unknown field, an
// unused group member).
type Warning = string

// maxYAMLNodes bounds the work of converting YAML to JSON (alias bombs).
const maxYAMLNodes = 1 << 20

var (
	memberNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ErrEmpty marks a policies.yml with no content (nothing, only comments, or
// null): rather a file caught half-written (an editor that truncates it
// before writing) than a wish to serve nothing, which `{}` says.
var ErrEmpty = errors.New("empty policies file: no map of policies (write {} to serve no policies)")

// ParsePolicies parses and validates a Kubewarden policies.yml. file is used
// in error messages only. Policies are returned sorted by id. All problems
// are reported together. An empty file is an error (ErrEmpty); `{}` is the
// file of no policies.
func ParsePolicies(file string, data []byte) (pols []Policy, warnings []Warning, err error) {
	defer func() {
		if r := recover(); r != nil { // the YAML decoder must never take the server down
			pols, warnings = nil, nil
			err = fmt.Errorf("%s: %w: %v", file, ErrSyntax, r)
		}
	}()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("%s: %w", file, ErrEmpty)
		}
		return nil, nil, fmt.Errorf("%s: %w: %v", file, ErrSyntax, err)
	}
	p := &parser{file: file}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if (root.Kind == yaml.DocumentNode && len(root.Content) == 0) || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		return nil, nil, fmt.Errorf("%s: %w", file, ErrEmpty)
	}
	if root.Kind != yaml.MappingNode {
		p.fail(root, "", "", "", show(root), "the top level must be a map from policy id to policy")
		return nil, nil, errors.Join(p.errs...)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		id := k.Value
		switch {
		case k.Kind != yaml.ScalarNode || id == "":
			p.fail(k, "", "", "id", show(k), "a policy id must be a non-empty string")
			continue
		case strings.Contains(id, "/"):
			p.fail(k, id, "", "id", strconv.Quote(id), "a policy id must not contain '/'")
			continue
		case badPathSegment(id) != "":
			p.fail(k, id, "", "id", strconv.Quote(id), badPathSegment(id))
			continue
		case seen[id]:
			p.fail(k, id, "", "id", strconv.Quote(id), "duplicate policy id")
			continue
		}
		seen[id] = true
		if pol, ok := p.policy(id, v); ok {
			pols = append(pols, pol)
		}
	}
	sort.Slice(pols, func(i, j int) bool { return pols[i].ID < pols[j].ID })
	if len(p.errs) > 0 {
		return nil, p.warnings, errors.Join(p.errs...)
	}
	return pols, p.warnings, nil
}

type parser struct {
	file     string
	errs     []error
	warnings []Warning
	nodes    int
}

func (p *parser) fail(n *yaml.Node, policy, member, field, value, reason string) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Policy: policy, Member: member, Field: field, Value: value, Reason: reason})
}

func (p *parser) warn(n *yaml.Node, policy, member, msg string) {
	where := p.file
	if n != nil && n.Line > 0 {
		where += ":" + strconv.Itoa(n.Line)
	}
	if policy != "" {
		where += fmt.Sprintf(": policy %q", policy)
	}
	if member != "" {
		where += fmt.Sprintf(" member %q", member)
	}
	p.warnings = append(p.warnings, where+": "+msg)
}

// show renders a node's value for an error message, truncated.
func show(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	var s string
	switch n.Kind {
	case yaml.ScalarNode:
		s = strconv.Quote(n.Value)
	case yaml.MappingNode:
		s = "<map>"
	case yaml.SequenceNode:
		s = "<list>"
	case yaml.AliasNode:
		s = "*" + n.Value
	default:
		s = "<document>"
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func mapping(n *yaml.Node) bool {
	return n.Kind == yaml.MappingNode
}

func (p *parser) policy(id string, n *yaml.Node) (Policy, bool) {
	n = deref(n)
	if n == nil || !mapping(n) {
		p.fail(n, id, "", "", show(n), "a policy must be a map with `module` (or `policies` and `expression` for a group)")
		return Policy{}, false
	}
	errsBefore := len(p.errs)
	pol := Policy{ID: id, Mode: ModeProtect, Settings: json.RawMessage("{}")}
	fields := map[string]*yaml.Node{}
	var keys []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if _, dup := fields[k.Value]; dup {
			p.fail(k, id, "", k.Value, "", "duplicate field")
			continue
		}
		fields[k.Value] = n.Content[i+1]
		keys = append(keys, k)
	}
	_, hasPolicies := fields["policies"]
	_, hasExpr := fields["expression"]
	isGroup := hasPolicies || hasExpr
	// namespacedName is the Kubewarden controller's note of the policy
	// resource an entry comes from, on every entry: accepted silently.
	known := map[string]bool{"module": !isGroup, "settings": !isGroup, "allowedToMutate": !isGroup,
		"policyMode": true, "contextAwareResources": !isGroup, "message": true, "timeoutEvalSeconds": !isGroup,
		"policies": isGroup, "expression": isGroup, "namespacedName": true, "hostCapabilities": true, "shadow": true}
	for _, k := range keys {
		if !known[k.Value] {
			if isGroup && (k.Value == "module" || k.Value == "settings" || k.Value == "allowedToMutate") {
				p.fail(k, id, "", k.Value, "", "a policy group has `policies` and `expression`, not `"+k.Value+"`")
				continue
			}
			p.warn(k, id, "", fmt.Sprintf("unknown field %q ignored", k.Value))
		}
	}
	if v, ok := fields["policyMode"]; ok {
		s, ok := p.str(v, id, "", "policyMode")
		if ok {
			switch Mode(s) {
			case ModeProtect, ModeMonitor:
				pol.Mode = Mode(s)
			default:
				p.fail(v, id, "", "policyMode", strconv.Quote(s), "must be protect or monitor")
			}
		}
	}
	if v, ok := fields["message"]; ok {
		if s, ok := p.str(v, id, "", "message"); ok {
			pol.Message = s
		}
	}
	if isGroup {
		pol.Group = p.group(id, fields)
	} else {
		v, ok := fields["module"]
		if !ok {
			p.fail(n, id, "", "module", "", "missing: every policy needs a module URI")
		} else {
			pol.Module = p.moduleURI(v, id, "", "module", "must not be empty")
		}
		if v, ok := fields["settings"]; ok {
			pol.Settings = p.settings(v, id, "")
		}
		if v, ok := fields["allowedToMutate"]; ok {
			pol.AllowedToMutate = p.boolean(v, id, "", "allowedToMutate")
		}
		if v, ok := fields["contextAwareResources"]; ok {
			pol.ContextAwareResources = p.resources(v, id, "")
		}
		if v, ok := fields["hostCapabilities"]; ok {
			pol.HostCapabilities = p.capabilities(v, id, "")
		}
		if v, ok := fields["timeoutEvalSeconds"]; ok {
			pol.Timeout = p.timeout(v, id, "")
		}
	}
	if v, ok := fields["shadow"]; ok {
		pol.Shadow = p.shadow(id, v, &pol, fields)
	}
	return pol, len(p.errs) == errsBefore
}

func (p *parser) group(id string, fields map[string]*yaml.Node) *Group {
	g := &Group{}
	mv, ok := fields["policies"]
	if mv = deref(mv); !ok || mv == nil || !mapping(mv) || len(mv.Content) == 0 {
		p.fail(mv, id, "", "policies", show(mv), "a policy group needs a non-empty map of member policies")
	} else {
		seen := map[string]bool{}
		for i := 0; i+1 < len(mv.Content); i += 2 {
			k, v := mv.Content[i], deref(mv.Content[i+1])
			name := k.Value
			if !p.memberName(k, id, "policies", seen) {
				continue
			}
			if v == nil || !mapping(v) {
				p.fail(v, id, name, "", show(v), "a member must be a map with `module`")
				continue
			}
			m := Member{Name: name, Settings: json.RawMessage("{}")}
			hasModule := false
			for j := 0; j+1 < len(v.Content); j += 2 {
				fk, fv := v.Content[j], v.Content[j+1]
				switch fk.Value {
				case "module":
					hasModule = true
					m.Module = p.moduleURI(fv, id, name, "module", "must not be empty")
				case "settings":
					m.Settings = p.settings(fv, id, name)
				case "contextAwareResources":
					m.ContextAwareResources = p.resources(fv, id, name)
				case "hostCapabilities":
					m.HostCapabilities = p.capabilities(fv, id, name)
				case "timeoutEvalSeconds":
					m.Timeout = p.timeout(fv, id, name)
				case "allowedToMutate", "policyMode", "message":
					p.fail(fk, id, name, fk.Value, "", "not allowed on a group member (groups do not mutate; mode and message belong to the group)")
				default:
					p.warn(fk, id, name, fmt.Sprintf("unknown field %q ignored", fk.Value))
				}
			}
			if !hasModule {
				p.fail(v, id, name, "module", "", "missing: every group member needs a module URI")
			}
			if m.HostCapabilities == nil {
				if gv, ok := fields["hostCapabilities"]; ok {
					m.HostCapabilities = p.capabilities(gv, id, "")
				}
			}
			g.Members = append(g.Members, m)
		}
		sort.Slice(g.Members, func(i, j int) bool { return g.Members[i].Name < g.Members[j].Name })
	}
	ev, ok := fields["expression"]
	if !ok {
		p.fail(nil, id, "", "expression", "", "missing: a policy group needs an expression")
		return g
	}
	s, ok := p.str(ev, id, "", "expression")
	if !ok {
		return g
	}
	g.Expression = s
	expr, err := group.Parse(s)
	if err != nil {
		p.fail(ev, id, "", "expression", strconv.Quote(s), err.Error())
		return g
	}
	g.Expr = expr
	used := map[string]bool{}
	for _, name := range group.Calls(expr) {
		used[name] = true
	}
	names := map[string]bool{}
	for _, m := range g.Members {
		names[m.Name] = true
		if !used[m.Name] {
			p.warn(ev, id, m.Name, "member is not used by the expression")
		}
	}
	for _, name := range group.Calls(expr) {
		if !names[name] && len(g.Members) > 0 {
			p.fail(ev, id, "", "expression", strconv.Quote(s), fmt.Sprintf("calls %s() which is not a member of the group", name))
		}
	}
	return g
}

// memberName checks a group member's name (key k of field): an identifier
// not seen before in the same map (seen, which it adds it to).
func (p *parser) memberName(k *yaml.Node, id, field string, seen map[string]bool) bool {
	name := k.Value
	if !memberNameRE.MatchString(name) {
		p.fail(k, id, name, field, strconv.Quote(name), "a member name must be an identifier ([A-Za-z_][A-Za-z0-9_]*) so the expression can call it")
		return false
	}
	if seen[name] {
		p.fail(k, id, name, field, strconv.Quote(name), "duplicate member")
		return false
	}
	seen[name] = true
	return true
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// moduleURI reads a module URI: a string, which must not be empty (the
// reason given when it is).
func (p *parser) moduleURI(n *yaml.Node, policy, member, field, empty string) string {
	s, ok := p.str(n, policy, member, field)
	if ok && s == "" {
		p.fail(n, policy, member, field, `""`, empty)
	}
	return s
}

func (p *parser) str(n *yaml.Node, policy, member, field string) (string, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n, policy, member, field, show(n), "must be a string")
		return "", false
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, policy, member, field string) bool {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		p.fail(n, policy, member, field, show(n), "must be true or false")
		return false
	}
	b, err := strconv.ParseBool(strings.ToLower(n.Value))
	if err != nil {
		p.fail(n, policy, member, field, show(n), "must be true or false")
	}
	return b
}

func (p *parser) timeout(n *yaml.Node, policy, member string) time.Duration {
	n = deref(n)
	const field = "timeoutEvalSeconds"
	if n == nil || n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		p.fail(n, policy, member, field, show(n), "must be a number of seconds")
		return 0
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 3600 {
		p.fail(n, policy, member, field, show(n), "must be a number of seconds greater than 0 and at most 3600")
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

// capabilities parses hostCapabilities: a list of strings (null = not given).
func (p *parser) capabilities(n *yaml.Node, policy, member string) []string {
	n = deref(n)
	const field = "hostCapabilities"
	if n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		p.fail(n, policy, member, field, show(n), `must be a list of patterns such as "*", "oci/*" or "kubernetes/get_resource"`)
		return nil
	}
	out := []string{}
	for i, it := range n.Content {
		if s, ok := p.str(it, policy, member, fmt.Sprintf("%s[%d]", field, i)); ok {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) resources(n *yaml.Node, policy, member string) []ContextAwareResource {
	n = deref(n)
	const field = "contextAwareResources"
	if n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n == nil || n.Kind != yaml.SequenceNode {
		p.fail(n, policy, member, field, show(n), "must be a list of {apiVersion, kind}")
		return nil
	}
	var out []ContextAwareResource
	for i, it := range n.Content {
		it = deref(it)
		f := fmt.Sprintf("%s[%d]", field, i)
		if it == nil || !mapping(it) {
			p.fail(it, policy, member, f, show(it), "must be a map with apiVersion and kind")
			continue
		}
		var r ContextAwareResource
		for j := 0; j+1 < len(it.Content); j += 2 {
			k, v := it.Content[j], it.Content[j+1]
			switch k.Value {
			case "apiVersion":
				r.APIVersion, _ = p.str(v, policy, member, f+".apiVersion")
			case "kind":
				r.Kind, _ = p.str(v, policy, member, f+".kind")
			default:
				p.warn(k, policy, member, fmt.Sprintf("unknown field %q in %s ignored", k.Value, f))
			}
		}
		if r.APIVersion == "" || r.Kind == "" {
			p.fail(it, policy, member, f, fmt.Sprintf("{apiVersion: %q, kind: %q}", r.APIVersion, r.Kind), "apiVersion and kind are both required")
			continue
		}
		out = append(out, r)
	}
	return out
}

// settings converts a YAML settings node to a JSON object.
func (p *parser) settings(n *yaml.Node, policy, member string) json.RawMessage {
	return p.settingsField(n, policy, member, "settings")
}

// settingsField is settings for the field named field.
func (p *parser) settingsField(n *yaml.Node, policy, member, field string) json.RawMessage {
	n = deref(n)
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return json.RawMessage("{}")
	}
	if !mapping(n) {
		p.fail(n, policy, member, field, show(n), "must be a map (or absent)")
		return json.RawMessage("{}")
	}
	v, err := p.toJSONValue(n, 0)
	if err != nil {
		p.fail(n, policy, member, field, "", err.Error())
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(v)
	if err != nil {
		p.fail(n, policy, member, field, "", err.Error())
		return json.RawMessage("{}")
	}
	return b
}

func (p *parser) toJSONValue(n *yaml.Node, depth int) (any, error) {
	p.nodes++
	if p.nodes > maxYAMLNodes {
		return nil, fmt.Errorf("settings too large (more than %d YAML nodes after alias expansion)", maxYAMLNodes)
	}
	if depth > 200 {
		return nil, errors.New("settings nested too deeply")
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unresolved alias", n.Line)
		}
		return p.toJSONValue(n.Alias, depth+1)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := deref(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: map keys must be scalars", n.Content[i].Line)
			}
			if k.Tag == "!!merge" {
				return nil, fmt.Errorf("line %d: YAML merge keys (<<) are not supported in settings", k.Line)
			}
			v, err := p.toJSONValue(n.Content[i+1], depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := p.toJSONValue(c, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %v", n.Line, err)
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
			var u uint64
			if err := n.Decode(&u); err == nil {
				return u, nil
			}
			return nil, fmt.Errorf("line %d: integer %q out of range", n.Line, n.Value)
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %v", n.Line, err)
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("line %d: %q has no JSON representation", n.Line, n.Value)
			}
			return f, nil
		default:
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// badPathSegment says why id cannot be served as the last segment of its
// endpoints' paths (/validate/{id}), or "" when it can. "." and ".." are
// removed from a path by every client and by the server's router (which
// redirects to the cleaned path), so such a policy could never be reached.
// Other ids are used verbatim in URLs (the operator's webhook paths, curl,
// the docs), so they may hold only what a path segment holds unescaped (RFC
// 3986 pchar: letters, digits, "-._~!$&'()*+,;=:@"), never '%' (the server
// unescapes the segment: "a%41" would be served as "aA").
func badPathSegment(id string) string {
	if id == "." || id == ".." {
		return "a policy id must not be \".\" or \"..\": a URL path cannot end in such a segment, so /validate/" + id + " could never be reached"
	}
	for i, r := range id {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~!$&'()*+,;=:@", r) {
			continue
		}
		return fmt.Sprintf("a policy id must be usable verbatim as a URL path segment (/validate/{id}): ASCII letters, digits and -._~!$&'()*+,;=:@ only, not %q (byte %d)", r, i)
	}
	return ""
}
