package gkdiff

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Known is one documented, counted difference between Gatekeeper and
// tollgate that could not be fixed yet (testdata/known-differences.yaml).
// The suite prints every one it sees, and fails when a listed case agrees
// with Gatekeeper (so that the list only shrinks).
type Known struct {
	Case string `json:"case"`
	// Side is native, wasm or "" for both.
	Side string `json:"side"`
	Why  string `json:"why"`
}

// KnownList is the list of known differences.
type KnownList []Known

// LoadKnown reads testdata/known-differences.yaml (a missing file is an
// empty list).
func LoadKnown(dir string) (KnownList, error) {
	b, err := os.ReadFile(filepath.Join(dir, "known-differences.yaml"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l KnownList
	if err := yaml.UnmarshalStrict(b, &l); err != nil {
		return nil, fmt.Errorf("known-differences.yaml: %w", err)
	}
	for i, k := range l {
		if k.Case == "" || k.Why == "" {
			return nil, fmt.Errorf("known-differences.yaml: entry %d needs case and why", i)
		}
	}
	return l, nil
}

func (l KnownList) match(caseName, side string) (Known, bool) {
	for _, k := range l {
		if k.Case == caseName && (k.Side == "" || k.Side == side) {
			return k, true
		}
	}
	return Known{}, false
}
