package helmchart

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	release   = "tollgate"
	namespace = "tollgate-system"
	// kubeVersion is passed to helm so that rendering does not depend on how helm was built
	// (unstamped, it assumes Kubernetes 1.20, below the chart's kubeVersion).
	kubeVersion = "1.36.0"
)

var (
	root      = mustAbs(filepath.Join("..", ".."))
	chartDir  = filepath.Join(root, "charts", "tollgate")
	allValues = mustAbs(filepath.Join("testdata", "all-values.yaml"))
	helmOnce  sync.Once
	helmPath  string
	helmError error
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

// helm returns the pinned helm binary, building it with scripts/install-k8s-tools.sh the first
// time (cached outside the repository). It fails the test when it cannot: it never skips.
func helm(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		cmd := exec.Command(filepath.Join(root, "scripts", "install-k8s-tools.sh"), "helm")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmError = errors.New("scripts/install-k8s-tools.sh helm: " + err.Error() + "\n" + stderr.String())
			return
		}
		for _, l := range strings.Split(string(out), "\n") {
			if p, ok := strings.CutPrefix(l, "helm="); ok {
				helmPath = p
			}
		}
		if helmPath == "" {
			helmError = errors.New("scripts/install-k8s-tools.sh helm printed no helm= line:\n" + string(out))
		}
	})
	if helmError != nil {
		t.Fatalf("the chart tests need helm: %v", helmError)
	}
	return helmPath
}

// runHelm runs helm with args and returns its stdout, or an error holding its stderr.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(strings.TrimSpace(stderr.String() + "\n" + err.Error()))
	}
	return stdout.String(), nil
}

// render runs helm template on the chart with extra args (values files, --set).
func render(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return runHelm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, args...)...)
}

// object is one rendered manifest.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	json []byte
}

func (o object) key() string { return o.Kind + "/" + o.Metadata.Name }

// decode splits a multi-document manifest. A duplicate key in a mapping fails the test (YAML
// parsers disagree on which one wins).
func decode(t testing.TB, manifest string) []object {
	t.Helper()
	var objs []object
	dec := yaml.NewDecoder(strings.NewReader(manifest))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if err == io.EOF {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, manifest)
		}
		if doc == nil {
			continue
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		o.json = b
		objs = append(objs, o)
	}
}

// into decodes o into v, failing on any field v's type does not know (a template typo).
func into(t testing.TB, o object, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(o.json))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v\n%s", o.key(), err, o.json)
	}
}

// byKey indexes objects by kind/name and fails on a duplicate.
func byKey(t testing.TB, objs []object) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, o := range objs {
		if _, dup := m[o.key()]; dup {
			t.Errorf("%s rendered twice", o.key())
		}
		m[o.key()] = o
	}
	return m
}

// get decodes the object kind/name into v, failing when it was not rendered.
func get(t testing.TB, objs map[string]object, key string, v any) {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		t.Fatalf("%s not rendered (have %v)", key, keys)
	}
	into(t, o, v)
}
