package config

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/host/group"
)

// Shadow is a candidate version of a policy (policies.yml `shadow:`): the
// server evaluates it beside the serving version on the same requests and
// compares the two answers, but only the serving version answers. What the
// entry's shadow omits is the serving version's, already filled in here.
//
// A policy's shadow may give module and/or settings (settings replace the
// serving settings as a whole, they are not merged). A group's shadow may
// give expression and/or policies: each member named there takes its module
// and/or settings over the serving member's of the same name, or is a new
// member (it needs a module then; it has the group's hostCapabilities). Every
// other field (mode, message, allowedToMutate, contextAwareResources,
// hostCapabilities, timeoutEvalSeconds) is the serving version's.
type Shadow struct {
	// Module is the candidate's module URI (policies only).
	Module string
	// Settings is the candidate's settings, a JSON object (policies only).
	Settings json.RawMessage
	// Group is the candidate group (groups only): expression and members.
	Group *Group
}

// ShadowPolicy is p's candidate version as a policy of its own (same id,
// mode, grants and limits; the shadow's module, settings or group, and no
// shadow), or nil when p has no shadow.
func (p *Policy) ShadowPolicy() *Policy {
	if p.Shadow == nil {
		return nil
	}
	c := *p
	c.Shadow = nil
	if p.IsGroup() {
		c.Group = p.Shadow.Group
	} else {
		c.Module, c.Settings = p.Shadow.Module, p.Shadow.Settings
	}
	return &c
}

// EntryShadow is an entry's `shadow:` as it is written (see Shadow): a
// policy's has Module and/or Settings, a group's Expression and/or Policies
// (each member's Module and/or Settings). What is empty (nil) is left out,
// and means the serving version's.
type EntryShadow struct {
	Module     string
	Settings   json.RawMessage // a JSON object
	Expression string
	Policies   map[string]EntryShadow
}

// MarshalJSON writes the shadow, keys sorted, empty fields left out.
func (s EntryShadow) MarshalJSON() ([]byte, error) {
	type wire struct { // fields in key order
		Expression string                 `json:"expression,omitempty"`
		Module     string                 `json:"module,omitempty"`
		Policies   map[string]EntryShadow `json:"policies,omitempty"`
		Settings   json.RawMessage        `json:"settings,omitempty"`
	}
	return marshalNoEscape(wire{Expression: s.Expression, Module: s.Module, Policies: s.Policies, Settings: s.Settings})
}

// shadowNotAllowed are the entry fields a shadow takes from its serving
// version: naming one in `shadow:` is an error rather than a silent no-op.
var shadowNotAllowed = map[string]bool{"policyMode": true, "message": true, "allowedToMutate": true,
	"contextAwareResources": true, "hostCapabilities": true, "timeoutEvalSeconds": true, "namespacedName": true}

// shadow parses an entry's `shadow:` against the serving version pol (its
// module, settings or group already parsed). null is no shadow.
func (p *parser) shadow(id string, n *yaml.Node, pol *Policy, entry map[string]*yaml.Node) *Shadow {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	what := "module and/or settings"
	if pol.IsGroup() {
		what = "expression and/or policies"
	}
	if n == nil || !mapping(n) || len(n.Content) == 0 {
		p.fail(n, id, "", "shadow", show(n), "must be a map with "+what+" (the candidate version; what it omits is the serving version's)")
		return nil
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if _, dup := fields[k.Value]; dup {
			p.fail(k, id, "", "shadow."+k.Value, "", "duplicate field")
			continue
		}
		fields[k.Value] = n.Content[i+1]
		switch {
		case shadowNotAllowed[k.Value]:
			p.fail(k, id, "", "shadow."+k.Value, "", "not allowed in a shadow: a shadow has "+what+"; its other fields are the serving version's")
		case !pol.IsGroup() && (k.Value == "expression" || k.Value == "policies"):
			p.fail(k, id, "", "shadow."+k.Value, "", "a policy's shadow has module and/or settings, not `"+k.Value+"`")
		case pol.IsGroup() && (k.Value == "module" || k.Value == "settings"):
			p.fail(k, id, "", "shadow."+k.Value, "", "a policy group's shadow has expression and/or policies, not `"+k.Value+"`")
		case k.Value != "module" && k.Value != "settings" && k.Value != "expression" && k.Value != "policies":
			p.warn(k, id, "", fmt.Sprintf("unknown field %q in shadow ignored", k.Value))
		}
	}
	if !pol.IsGroup() {
		sh := &Shadow{Module: pol.Module, Settings: pol.Settings}
		if v, ok := fields["module"]; ok {
			sh.Module = p.moduleURI(v, id, "", "shadow.module", "must not be empty (leave it out to evaluate the serving module)")
		}
		if v, ok := fields["settings"]; ok {
			sh.Settings = p.settingsField(v, id, "", "shadow.settings")
		}
		return sh
	}
	if pol.Group == nil {
		return nil
	}
	return &Shadow{Group: p.shadowGroup(id, fields, pol, entry)}
}

// shadowGroup is a group's candidate: the serving members with shadow.policies
// over them, and shadow.expression or the serving one. entry is the group
// entry's fields (a new member has the group's hostCapabilities).
func (p *parser) shadowGroup(id string, fields map[string]*yaml.Node, pol *Policy, entry map[string]*yaml.Node) *Group {
	serving := pol.Group
	g := &Group{Expression: serving.Expression, Expr: serving.Expr}
	byName := map[string]int{}
	for _, m := range serving.Members {
		byName[m.Name] = len(g.Members)
		g.Members = append(g.Members, m)
	}
	if mv, ok := fields["policies"]; ok {
		mv = deref(mv)
		if mv == nil || !mapping(mv) || len(mv.Content) == 0 {
			p.fail(mv, id, "", "shadow.policies", show(mv), "must be a non-empty map of members (each with module and/or settings)")
		} else {
			seen := map[string]bool{}
			for i := 0; i+1 < len(mv.Content); i += 2 {
				k, v := mv.Content[i], deref(mv.Content[i+1])
				name := k.Value
				field := "shadow.policies." + name
				if !p.memberName(k, id, "shadow.policies", seen) {
					continue
				}
				if v == nil || !mapping(v) || len(v.Content) == 0 {
					p.fail(v, id, name, field, show(v), "must be a map with module and/or settings")
					continue
				}
				idx, exists := byName[name]
				if !exists {
					idx = len(g.Members)
					byName[name] = idx
					m := Member{Name: name, Settings: json.RawMessage("{}")}
					if gv, ok := entry["hostCapabilities"]; ok {
						m.HostCapabilities = p.capabilities(gv, id, "")
					}
					g.Members = append(g.Members, m)
				}
				m := &g.Members[idx]
				hasModule := false
				for j := 0; j+1 < len(v.Content); j += 2 {
					fk, fv := v.Content[j], v.Content[j+1]
					switch fk.Value {
					case "module":
						hasModule = true
						m.Module = p.moduleURI(fv, id, name, field+".module", "must not be empty (leave it out to evaluate the serving member's module)")
					case "settings":
						m.Settings = p.settingsField(fv, id, name, field+".settings")
					case "contextAwareResources", "hostCapabilities", "timeoutEvalSeconds", "allowedToMutate", "policyMode", "message":
						p.fail(fk, id, name, field+"."+fk.Value, "", "not allowed in a shadow: a shadow member has module and/or settings; its other fields are the serving member's")
					default:
						p.warn(fk, id, name, fmt.Sprintf("unknown field %q in shadow ignored", fk.Value))
					}
				}
				if !exists && !hasModule {
					p.fail(v, id, name, field+".module", "", "missing: "+name+" is not a member of the serving group, so its shadow needs a module URI")
				}
			}
		}
	}
	sort.Slice(g.Members, func(i, j int) bool { return g.Members[i].Name < g.Members[j].Name })
	if ev, ok := fields["expression"]; ok {
		s, ok := p.str(ev, id, "", "shadow.expression")
		if !ok {
			return g
		}
		expr, err := group.Parse(s)
		if err != nil {
			p.fail(ev, id, "", "shadow.expression", strconv.Quote(s), err.Error())
			return g
		}
		g.Expression, g.Expr = s, expr
		names := map[string]bool{}
		for _, m := range g.Members {
			names[m.Name] = true
		}
		for _, name := range group.Calls(expr) {
			if !names[name] {
				p.fail(ev, id, "", "shadow.expression", strconv.Quote(s), fmt.Sprintf("calls %s() which is not a member of the group or of its shadow's policies", name))
			}
		}
	}
	return g
}
