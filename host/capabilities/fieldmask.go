package capabilities

import (
	"sort"
	"strings"
)

// maskNode is a field_masks tree: keep marks a path that ends here (its
// whole subtree is kept).
type maskNode struct {
	keep     bool
	children map[string]*maskNode
}

func buildMask(paths []string) *maskNode {
	root := &maskNode{children: map[string]*maskNode{}}
	for _, p := range paths {
		n := root
		for _, seg := range strings.Split(p, ".") {
			if seg == "" {
				continue
			}
			c, ok := n.children[seg]
			if !ok {
				c = &maskNode{children: map[string]*maskNode{}}
				n.children[seg] = c
			}
			n = c
		}
		if n != root {
			n.keep = true
		}
	}
	return root
}

// fieldMask is a request's field_masks, compiled once per host call: the
// tree, and a key naming the set (paths sorted, duplicates dropped) under
// which a cache keeps an object's masked encoding.
type fieldMask struct {
	key  string
	root *maskNode
}

// newFieldMask compiles paths; nil when there are none (the whole object).
func newFieldMask(paths []string) *fieldMask {
	if len(paths) == 0 {
		return nil
	}
	sorted := append([]string(nil), paths...)
	sort.Strings(sorted)
	uniq := sorted[:0]
	for i, p := range sorted {
		if i == 0 || p != sorted[i-1] {
			uniq = append(uniq, p)
		}
	}
	return &fieldMask{key: strings.Join(uniq, "\x00"), root: buildMask(uniq)}
}

// apply prunes an object to the field_masks paths as Kubewarden does:
// apiVersion, kind and metadata always survive; other keys outside the tree
// are dropped; arrays are transparent. No masks (m nil): the object as it
// is. The input is never modified (it may be a cache's object).
func (m *fieldMask) apply(obj map[string]any) map[string]any {
	if m == nil {
		return obj
	}
	root := m.root
	out := make(map[string]any, len(root.children)+3)
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "metadata":
			out[k] = v
			continue
		}
		if c, ok := root.children[k]; ok {
			out[k] = prune(v, c)
		}
	}
	return out
}

func prune(v any, n *maskNode) any {
	if n.keep {
		return v
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n.children))
		for k, c := range n.children {
			if x, ok := t[k]; ok {
				out[k] = prune(x, c)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = prune(x, n)
		}
		return out
	}
	return v
}
