// Package schema finds mutators whose locations imply different shapes for
// the same path of the same GVK and operation, like Gatekeeper's
// pkg/mutation/schema: such mutators are all disabled.
//
// It must NOT know about objects, settings or the system loop.
package schema

import (
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/mutators"
	"github.com/tollgate-dev/tollgate/policies/gatekeeper-mutation/engine/path/parser"
)

type idSet map[int]bool

type node struct {
	referencedBy  idSet
	mustTerminate idSet
	children      map[string]map[string]*node // key -> node type -> child
}

func newNode() *node { return &node{referencedBy: idSet{}, mustTerminate: idSet{}} }

func key(n parser.Node) string {
	if n.Type == parser.ObjectNode {
		return n.Reference
	}
	return n.KeyField
}

func headType(path []parser.Node, terminal string) string {
	if len(path) < 2 {
		return terminal
	}
	return string(path[1].Type)
}

func (n *node) add(id int, path []parser.Node, terminal string, mustTerminate bool) {
	n.referencedBy[id] = true
	if len(path) == 0 {
		if mustTerminate {
			n.mustTerminate[id] = true
		}
		return
	}
	if n.children == nil {
		n.children = map[string]map[string]*node{}
	}
	k := key(path[0])
	if n.children[k] == nil {
		n.children[k] = map[string]*node{}
	}
	t := headType(path, terminal)
	c := n.children[k][t]
	if c == nil {
		c = newNode()
		n.children[k][t] = c
	}
	c.add(id, path[1:], terminal, mustTerminate)
}

// conflicts mirrors node.conflicts for one child key.
func (n *node) conflicts(k string, into idSet) {
	kids := n.children[k]
	nTypes := len(kids)
	if _, ok := kids[mutators.TerminalUnknown]; ok {
		nTypes--
	}
	mustTerminate, hasGrandchildren := false, false
	for t, c := range kids {
		mustTerminate = mustTerminate || len(c.mustTerminate) > 0
		hasGrandchildren = hasGrandchildren || len(c.children) > 0
		if t == mutators.TerminalUnknown {
			continue
		}
		if nTypes > 1 || t == string(parser.ListNode) && len(c.children) > 1 {
			for id := range c.referencedBy {
				into[id] = true
			}
		}
	}
	if !mustTerminate || !hasGrandchildren {
		return
	}
	for _, c := range kids {
		for id := range c.mustTerminate {
			into[id] = true
		}
		for _, byType := range c.children {
			for _, g := range byType {
				for id := range g.referencedBy {
					into[id] = true
				}
			}
		}
	}
}

// all evaluates conflicts at every node: adding mutators only grows a
// node's conflicts, so this equals Gatekeeper's incremental result.
func (n *node) all(into idSet) {
	for k, byType := range n.children {
		n.conflicts(k, into)
		for _, c := range byType {
			c.all(into)
		}
	}
}

// Conflicting returns the indexes of the mutators (of ms) that conflict.
func Conflicting(ms []*mutators.Mutator) map[int]bool {
	roots := map[mutators.Binding]*node{}
	for i, m := range ms {
		if !m.HasSchema() {
			continue
		}
		for _, b := range m.Bindings {
			r := roots[b]
			if r == nil {
				r = newNode()
				roots[b] = r
			}
			r.add(i, m.Path.Nodes, m.TerminalType(), m.MustTerminate())
		}
	}
	out := idSet{}
	for _, r := range roots {
		r.all(out)
	}
	return out
}
