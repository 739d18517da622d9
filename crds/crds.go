package crds

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var manifests embed.FS

// Files returns the name and content of every CRD manifest, sorted by name.
func Files() (map[string][]byte, []string, error) {
	names, err := fs.Glob(manifests, "*.yaml")
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(names)
	out := make(map[string][]byte, len(names))
	for _, n := range names {
		b, err := manifests.ReadFile(n)
		if err != nil {
			return nil, nil, err
		}
		out[n] = b
	}
	return out, names, nil
}
