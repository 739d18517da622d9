package capabilities

import "strings"

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

// applyMasks prunes an object to the field_masks paths as Kubewarden does:
// apiVersion, kind and metadata always survive; other keys outside the tree
// are dropped; arrays are transparent. No masks: the object as it is. The
// input is never modified (it may be a cache's object).
func applyMasks(obj map[string]any, paths []string) map[string]any {
	if len(paths) == 0 {
		return obj
	}
	root := buildMask(paths)
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
