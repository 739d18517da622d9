package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tollgate-dev/tollgate/"

// imports returns, for each non-test Go file under dir (relative to the repository's top), the
// root module's packages it imports.
func imports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join("../..", dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", path)
		out[rel] = nil
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if pkg, ok := strings.CutPrefix(p, module); ok {
				out[rel] = append(out[rel], pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDependencies(t *testing.T) {
	applications := []string{"cmd/", "crds/controller", "crds/audit", "crds/rollout"}
	for _, tc := range []struct {
		dir       string
		forbidden []string
		minFiles  int
	}{
		{"internal", append([]string{"host/"}, applications...), 10},
		{"host", applications, 50},
	} {
		files := imports(t, tc.dir)
		if len(files) < tc.minFiles {
			t.Fatalf("%s: found %d Go files, want at least %d: is the walk still right?", tc.dir, len(files), tc.minFiles)
		}
		for file, pkgs := range files {
			for _, p := range pkgs {
				for _, f := range tc.forbidden {
					if strings.HasPrefix(p, f) || p+"/" == f {
						t.Errorf("%s imports %s: %s/ must not depend on %s", file, module+p, tc.dir, f)
					}
				}
			}
		}
	}
}
