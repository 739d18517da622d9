package enginecmp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// Module is a policy module and the settings it runs with.
type Module struct {
	// Name names the module in benchmark names and tables.
	Name string
	// Dir is the repository-relative directory of its policy.wasm.
	Dir string
	// Settings is the repository-relative settings file (JSON or YAML), "" for {}.
	Settings string
	// Big marks a module too large to compile for every test run under
	// wasmtime and plain wazero (the 66 MB MutatingAdmissionPolicy module):
	// only taken when ENGINECMP_BIG=1.
	Big bool
}

// Modules are the modules compared: Kubewarden's kinds of guest (TinyGo
// `-target=wasi`, TinyGo `wasi-legacy`, a standard-Go reactor) and the
// built-in MutatingAdmissionPolicy module.
var Modules = []Module{
	{Name: "capabilities-drop", Dir: "examples/capabilities-drop"},
	{Name: "required-labels", Dir: "examples/required-labels", Settings: "examples/required-labels/testdata/settings.json"},
	{Name: "go-image-registries", Dir: "examples/go-image-registries", Settings: "examples/go-image-registries/testdata/settings.json"},
	{Name: "mutating-admission-policy", Dir: "policies/mutating-admission-policy", Settings: "policies/mutating-admission-policy/testdata/sidecar-settings.yml", Big: true},
}

// BenchReview is the request every benchmark sends: the realistic 5 KB Pod.
const BenchReview = "test/testdata/reviews/pod.json"

// Loaded is a module read from disk with its settings as compact JSON.
type Loaded struct {
	Module
	Wasm     []byte
	Settings json.RawMessage
}

// Load reads a module and its settings.
func Load(m Module) (*Loaded, error) {
	wasm, err := os.ReadFile(testfixture.Path(m.Dir + "/policy.wasm"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (build the policies first: make policies)", m.Name, err)
	}
	l := &Loaded{Module: m, Wasm: wasm, Settings: json.RawMessage(`{}`)}
	if m.Settings != "" {
		b, err := os.ReadFile(testfixture.Path(m.Settings))
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Settings, err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, j); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Settings, err)
		}
		l.Settings = buf.Bytes()
	}
	return l, nil
}

// Request is an admission request as every engine gets it.
type Request struct {
	// Name is the repository-relative file it came from.
	Name string
	// Parsed is the request as host/policy's Evaluate takes it.
	Parsed *admission.Request
	// Payload is the ValidationRequest the guest receives, built as host/policy/eval
	// builds it: {"request":<request>,"settings":<settings>}.
	Payload []byte
}

// LoadRequest reads an AdmissionReview (or request), compacts it as an
// apiserver sends it, and builds the ValidationRequest for settings.
func LoadRequest(rel string, settings json.RawMessage) (*Request, error) {
	b, err := os.ReadFile(testfixture.Path(rel))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	req, err := admission.ParseReview(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	p := make([]byte, 0, len(req.Raw)+len(settings)+26)
	p = append(p, `{"request":`...)
	p = append(p, req.Raw...)
	p = append(p, `,"settings":`...)
	p = append(p, settings...)
	p = append(p, '}')
	return &Request{Name: rel, Parsed: req, Payload: p}, nil
}
