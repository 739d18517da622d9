package capabilities

import (
	"fmt"
	"strings"
)

// capSet is a compiled hostCapabilities list.
type capSet struct {
	all      bool
	exact    map[string]bool
	prefixes []string
}

func (c capSet) allows(path string) bool {
	if c.all || c.exact[path] {
		return true
	}
	for _, p := range c.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// compilePatterns applies Kubewarden's rules (policy-evaluator
// host_capabilities.rs): nil = everything; "*" anywhere = everything;
// "ns/*", "oci/v1/*" = every capability below that segment; else one of the
// 11 capability paths exactly. Partial wildcards ("oci*", "oci/v1/oci_*"),
// unknown paths, bare segments ("oci", "oci/v1") and "" are rejected.
func compilePatterns(patterns []string) (capSet, error) {
	if patterns == nil {
		return capSet{all: true}, nil
	}
	c := capSet{exact: map[string]bool{}}
	for _, p := range patterns {
		if p == "*" {
			c.all = true
			continue
		}
		if err := checkPattern(p); err != nil {
			return capSet{}, err
		}
		if strings.HasSuffix(p, "/*") {
			c.prefixes = append(c.prefixes, strings.TrimSuffix(p, "*"))
		} else {
			c.exact[p] = true
		}
	}
	return c, nil
}

func checkPattern(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty pattern", ErrPattern)
	case strings.HasSuffix(p, "/*"):
		prefix := strings.TrimSuffix(p, "*")
		if strings.Contains(prefix, "*") {
			return fmt.Errorf("%w: %q: '*' may only be a whole last segment", ErrPattern, p)
		}
		for _, c := range capabilityPaths {
			if strings.HasPrefix(c, prefix) {
				return nil
			}
		}
		return fmt.Errorf("%w: %q matches no host capability", ErrPattern, p)
	case strings.Contains(p, "*"):
		return fmt.Errorf("%w: %q: '*' may only be a whole last segment (as in \"oci/*\")", ErrPattern, p)
	}
	for _, c := range capabilityPaths {
		if c == p {
			return nil
		}
	}
	for _, c := range capabilityPaths {
		if strings.HasPrefix(c, p+"/") {
			return fmt.Errorf("%w: %q names a group of capabilities, not one: use %q", ErrPattern, p, p+"/*")
		}
	}
	return fmt.Errorf("%w: %q is not a host capability (want one of %s, a prefix such as \"oci/*\", or \"*\")", ErrPattern, p, strings.Join(capabilityPaths, ", "))
}
