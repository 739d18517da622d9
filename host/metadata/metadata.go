package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tollgate-dev/tollgate/host/wasm/wasmbin"
)

// SectionName is the custom section that carries the metadata.
const SectionName = "io.kubewarden.metadata"

// Well-known annotations.
const (
	AnnotationTitle       = "io.kubewarden.policy.title"
	AnnotationVersion     = "io.kubewarden.policy.version"
	AnnotationDescription = "io.kubewarden.policy.description"
	AnnotationAuthor      = "io.kubewarden.policy.author"
	AnnotationURL         = "io.kubewarden.policy.url"
	AnnotationOCIURL      = "io.kubewarden.policy.ociUrl"
	AnnotationSource      = "io.kubewarden.policy.source"
	AnnotationLicense     = "io.kubewarden.policy.license"
	AnnotationUsage       = "io.kubewarden.policy.usage"
	AnnotationSeverity    = "io.kubewarden.policy.severity"
	AnnotationCategory    = "io.kubewarden.policy.category"
	// AnnotationAnnotator records the tool that annotated the module
	// (kwctl writes io.kubewarden.kwctl with its version).
	AnnotationAnnotator = "io.tollgate.annotate"
)

// ProtocolVersionUnknown is the protocolVersion kwctl annotate writes for
// modules of modes other than kubewarden-wapc (it asks only waPC modules).
const ProtocolVersionUnknown = "Unknown"

// Execution modes.
const (
	ExecutionModeWapc       = "kubewarden-wapc"
	ExecutionModeWasi       = "wasi"
	ExecutionModeOPA        = "opa"
	ExecutionModeGatekeeper = "gatekeeper"
)

// Policy types.
const (
	PolicyTypeKubernetes = "kubernetes"
	PolicyTypeRaw        = "raw"
)

var (
	// ErrInvalid: the metadata does not validate.
	ErrInvalid = errors.New("invalid policy metadata")
)

// Metadata is Kubewarden's policy metadata.
type Metadata struct {
	ProtocolVersion          string                 `json:"protocolVersion"`
	Rules                    []Rule                 `json:"rules"`
	Labels                   map[string]string      `json:"labels,omitempty"`
	Annotations              map[string]string      `json:"annotations,omitempty"`
	Mutating                 bool                   `json:"mutating"`
	BackgroundAudit          *bool                  `json:"backgroundAudit,omitempty"`
	ContextAwareResources    []ContextAwareResource `json:"contextAwareResources,omitempty"`
	ExecutionMode            string                 `json:"executionMode,omitempty"`
	PolicyType               string                 `json:"policyType,omitempty"`
	MinimumKubewardenVersion string                 `json:"minimumKubewardenVersion,omitempty"`
	HostCapabilities         []string               `json:"hostCapabilities,omitempty"`
	// ContextAware is the legacy boolean that predates contextAwareResources.
	// It is read and written so that old modules round-trip unchanged.
	ContextAware *bool `json:"contextAware,omitempty"`
}

// Rule selects the requests a policy wants, as in a webhook configuration.
type Rule struct {
	APIGroups   []string `json:"apiGroups"`
	APIVersions []string `json:"apiVersions"`
	Resources   []string `json:"resources"`
	Operations  []string `json:"operations"`
}

// ContextAwareResource names a resource a policy may read through host calls.
type ContextAwareResource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// IsRaw reports whether the policy takes raw JSON requests.
func (m *Metadata) IsRaw() bool { return m != nil && m.PolicyType == PolicyTypeRaw }

// BackgroundAuditEnabled is backgroundAudit with its default (true).
func (m *Metadata) BackgroundAuditEnabled() bool {
	return m == nil || m.BackgroundAudit == nil || *m.BackgroundAudit
}

// Mode is the execution mode with its default.
func (m *Metadata) Mode() string {
	if m == nil || m.ExecutionMode == "" {
		return ExecutionModeWapc
	}
	return m.ExecutionMode
}

// Title is the policy's title annotation, if any.
func (m *Metadata) Title() string {
	if m == nil {
		return ""
	}
	return m.Annotations[AnnotationTitle]
}

// Read returns the metadata embedded in a module, or nil when it has none.
func Read(wasm []byte) (*Metadata, error) {
	raw, ok, err := wasmbin.CustomSection(wasm, SectionName)
	if err != nil || !ok {
		return nil, err
	}
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: custom section %s: %v", ErrInvalid, SectionName, err)
	}
	return &m, nil
}

// Decode reads a metadata.yml (YAML or JSON) without validating it. Unknown
// fields are an error naming the field; name is used in messages (usually the
// file path).
func Decode(name string, data []byte) (*Metadata, error) {
	var m Metadata
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	return &m, nil
}

// DecodeFile reads a metadata.yml file without validating it.
func DecodeFile(path string) (*Metadata, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Decode(path, data)
}

var validOperations = map[string]bool{"CREATE": true, "UPDATE": true, "DELETE": true, "CONNECT": true, "*": true}

// Validate checks the metadata as Kubewarden does.
func (m *Metadata) Validate() error {
	var problems []string
	switch {
	case m.Mode() == ExecutionModeWapc && m.ProtocolVersion != "v1":
		problems = append(problems, fmt.Sprintf("protocolVersion: must be \"v1\", got %q", m.ProtocolVersion))
	case m.Mode() != ExecutionModeWapc && m.ProtocolVersion != "v1" && m.ProtocolVersion != ProtocolVersionUnknown:
		// kwctl annotate writes "Unknown" for the modes it does not ask.
		problems = append(problems, fmt.Sprintf("protocolVersion: must be \"v1\" or %q for executionMode %s, got %q", ProtocolVersionUnknown, m.Mode(), m.ProtocolVersion))
	}
	switch m.Mode() {
	case ExecutionModeWapc, ExecutionModeWasi, ExecutionModeOPA, ExecutionModeGatekeeper:
	default:
		problems = append(problems, fmt.Sprintf("executionMode: unknown value %q (want kubewarden-wapc, wasi, opa or gatekeeper)", m.ExecutionMode))
	}
	switch m.PolicyType {
	case "", PolicyTypeKubernetes, PolicyTypeRaw:
	default:
		problems = append(problems, fmt.Sprintf("policyType: unknown value %q (want kubernetes or raw)", m.PolicyType))
	}
	for i, r := range m.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		for _, l := range []struct {
			name string
			v    []string
		}{{"apiGroups", r.APIGroups}, {"apiVersions", r.APIVersions}, {"resources", r.Resources}, {"operations", r.Operations}} {
			if len(l.v) == 0 {
				problems = append(problems, fmt.Sprintf("%s.%s: must not be empty", f, l.name))
			} else if len(l.v) > 1 && contains(l.v, "*") {
				problems = append(problems, fmt.Sprintf("%s.%s: no other value may be listed with '*'", f, l.name))
			}
		}
		for _, op := range r.Operations {
			if !validOperations[op] {
				problems = append(problems, fmt.Sprintf("%s.operations: unknown operation %q (want CREATE, UPDATE, DELETE, CONNECT or *)", f, op))
			}
		}
		for _, res := range r.Resources {
			if res == "" {
				problems = append(problems, fmt.Sprintf("%s.resources: empty resource", f))
			}
		}
	}
	for i, c := range m.ContextAwareResources {
		if c.APIVersion == "" || c.Kind == "" {
			problems = append(problems, fmt.Sprintf("contextAwareResources[%d]: apiVersion and kind are required", i))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// JSON is the canonical encoding stored in the custom section.
func (m *Metadata) JSON() ([]byte, error) {
	c := *m
	if c.Rules == nil {
		c.Rules = []Rule{}
	}
	return json.Marshal(&c)
}

// Annotate returns wasm with m written into its metadata section (replacing
// any previous one). usage, when not empty, becomes the usage annotation.
func Annotate(wasm []byte, m *Metadata, usage string) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	c := *m
	c.Annotations = map[string]string{}
	for k, v := range m.Annotations {
		c.Annotations[k] = v
	}
	if usage != "" {
		c.Annotations[AnnotationUsage] = usage
	}
	raw, err := c.JSON()
	if err != nil {
		return nil, err
	}
	return wasmbin.SetCustomSection(wasm, SectionName, raw)
}

// SortedAnnotationKeys lists annotation keys in a stable order for display.
func (m *Metadata) SortedAnnotationKeys() []string {
	keys := make([]string, 0, len(m.Annotations))
	for k := range m.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
