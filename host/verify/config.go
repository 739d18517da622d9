package verify

import (
	"bytes"
	"crypto"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"go.yaml.in/yaml/v3"
)

// ErrConfig: the verification config is malformed. The message names the
// file, the entry (allOf[0], anyOf.signatures[1]) and the field.
var ErrConfig = errors.New("invalid verification config")

// Entry kinds, as Kubewarden names them.
const (
	KindPubKey        = "pubKey"
	KindGenericIssuer = "genericIssuer"
	KindGithubAction  = "githubAction"
)

// GitHubIssuer is the OIDC issuer of GitHub Actions' workflow tokens.
const GitHubIssuer = "https://token.actions.githubusercontent.com"

// Config is a Kubewarden verification config (apiVersion v1): every allOf
// entry, and at least AnyOf.MinimumMatches of AnyOf.Signatures, must be
// satisfied by a verified signature.
type Config struct {
	APIVersion string
	AllOf      []Entry
	AnyOf      *AnyOf
}

// AnyOf is the anyOf section.
type AnyOf struct {
	MinimumMatches int
	Signatures     []Entry
}

// Entry is one signature requirement.
type Entry struct {
	Kind string
	// pubKey: the PEM public key (parsed into key) and a label.
	Key   string
	Owner string // pubKey: a label; githubAction: the repository owner
	// genericIssuer
	Issuer  string
	Subject Subject
	// githubAction
	Repo string
	// Annotations must each be in the signature payload's optional map with
	// an equal value.
	Annotations map[string]string

	name string           // allOf[0], anyOf.signatures[1]
	key  crypto.PublicKey // parsed Key
}

// Subject of a genericIssuer entry: exactly one of Equal and URLPrefix.
type Subject struct {
	Equal     string
	URLPrefix string
}

// Name is where the entry is in the config: "allOf[0]", "anyOf.signatures[1]".
func (e *Entry) Name() string { return e.name }

// String describes the requirement for messages.
func (e *Entry) String() string {
	var s string
	switch e.Kind {
	case KindPubKey:
		s = "pubKey"
		if e.Owner != "" {
			s += fmt.Sprintf(" (owner %q)", e.Owner)
		}
	case KindGenericIssuer:
		s = fmt.Sprintf("genericIssuer issuer %q", e.Issuer)
		if e.Subject.Equal != "" {
			s += fmt.Sprintf(" subject %q", e.Subject.Equal)
		} else {
			s += fmt.Sprintf(" subject urlPrefix %q", e.Subject.URLPrefix)
		}
	case KindGithubAction:
		s = fmt.Sprintf("githubAction owner %q", e.Owner)
		if e.Repo != "" {
			s += fmt.Sprintf(" repo %q", e.Repo)
		}
	}
	if len(e.Annotations) > 0 {
		keys := make([]string, 0, len(e.Annotations))
		for k := range e.Annotations {
			keys = append(keys, k+"="+e.Annotations[k])
		}
		slices.Sort(keys)
		s += " annotations " + strings.Join(keys, ",")
	}
	return e.name + " " + s
}

// keyless reports whether the entry is satisfied by certificates (and so
// needs the Sigstore trust root).
func (e *Entry) keyless() bool { return e.Kind != KindPubKey }

// Entries lists allOf then anyOf.signatures.
func (c *Config) Entries() []*Entry {
	var out []*Entry
	for i := range c.AllOf {
		out = append(out, &c.AllOf[i])
	}
	if c.AnyOf != nil {
		for i := range c.AnyOf.Signatures {
			out = append(out, &c.AnyOf.Signatures[i])
		}
	}
	return out
}

// NeedsTrustRoot reports whether some entry is keyless.
func (c *Config) NeedsTrustRoot() bool {
	for _, e := range c.Entries() {
		if e.keyless() {
			return true
		}
	}
	return false
}

// LoadConfig reads and validates a verification config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return ParseConfig(path, b)
}

// ParseConfig parses and validates a verification config; name (a file
// name) prefixes every error.
func ParseConfig(name string, data []byte) (*Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %s: %s", ErrConfig, name, fmt.Sprintf(format, args...))
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return nil, bad("not YAML: %v", err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, bad("want a mapping with apiVersion, allOf and/or anyOf")
	}
	c := &Config{}
	fields, err := mapping(root, "the top level", "apiVersion", "allOf", "anyOf")
	if err != nil {
		return nil, bad("%v", err)
	}
	if n, ok := fields["apiVersion"]; ok {
		c.APIVersion = n.Value
	}
	if c.APIVersion != "v1" {
		if c.APIVersion == "" {
			return nil, bad("apiVersion: missing: want v1")
		}
		return nil, bad("apiVersion: %q is not supported: want v1", c.APIVersion)
	}
	if n, ok := fields["allOf"]; ok && !isNull(n) {
		if c.AllOf, err = entries(n, "allOf"); err != nil {
			return nil, bad("%v", err)
		}
	}
	if n, ok := fields["anyOf"]; ok && !isNull(n) {
		af, err := mapping(n, "anyOf", "minimumMatches", "signatures")
		if err != nil {
			return nil, bad("%v", err)
		}
		c.AnyOf = &AnyOf{MinimumMatches: 1}
		if m, ok := af["minimumMatches"]; ok {
			if err := m.Decode(&c.AnyOf.MinimumMatches); err != nil || c.AnyOf.MinimumMatches < 1 {
				return nil, bad("anyOf.minimumMatches: %q is not a whole number >= 1", m.Value)
			}
		}
		s, ok := af["signatures"]
		if !ok || isNull(s) {
			return nil, bad("anyOf.signatures: missing: anyOf needs a list of signatures")
		}
		if c.AnyOf.Signatures, err = entries(s, "anyOf.signatures"); err != nil {
			return nil, bad("%v", err)
		}
		if len(c.AnyOf.Signatures) == 0 {
			return nil, bad("anyOf.signatures: empty list")
		}
		if c.AnyOf.MinimumMatches > len(c.AnyOf.Signatures) {
			return nil, bad("anyOf.minimumMatches: %d is more than the %d signatures listed: it can never be satisfied",
				c.AnyOf.MinimumMatches, len(c.AnyOf.Signatures))
		}
	}
	if len(c.AllOf) == 0 && c.AnyOf == nil {
		return nil, bad("neither allOf nor anyOf lists a signature: such a config would accept anything")
	}
	return c, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// mapping returns the fields of a mapping node, refusing keys not in allowed.
func mapping(n *yaml.Node, where string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s (line %d): want a mapping", where, n.Line)
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("%s (line %d): unknown field %q (want %s)", where, n.Content[i].Line, k, strings.Join(allowed, ", "))
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s (line %d): field %q given twice", where, n.Content[i].Line, k)
		}
		out[k] = v
	}
	return out, nil
}

func str(fields map[string]*yaml.Node, where, key string) (string, error) {
	n, ok := fields[key]
	if !ok || isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("%s.%s (line %d): want a string", where, key, n.Line)
	}
	return n.Value, nil
}

func entries(n *yaml.Node, where string) ([]Entry, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s (line %d): want a list of signatures", where, n.Line)
	}
	out := make([]Entry, 0, len(n.Content))
	for i, en := range n.Content {
		e, err := entry(en, fmt.Sprintf("%s[%d]", where, i))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func entry(n *yaml.Node, where string) (Entry, error) {
	e := Entry{name: where}
	if n.Kind != yaml.MappingNode {
		return e, fmt.Errorf("%s (line %d): want a mapping with a kind", where, n.Line)
	}
	var kind string
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			kind = n.Content[i+1].Value
		}
	}
	var allowed []string
	switch kind {
	case KindPubKey:
		allowed = []string{"kind", "key", "owner", "annotations"}
	case KindGenericIssuer:
		allowed = []string{"kind", "issuer", "subject", "annotations"}
	case KindGithubAction:
		allowed = []string{"kind", "owner", "repo", "annotations"}
	case "":
		return e, fmt.Errorf("%s (line %d): kind: missing: want pubKey, genericIssuer or githubAction", where, n.Line)
	default:
		return e, fmt.Errorf("%s (line %d): kind: %q is not pubKey, genericIssuer or githubAction", where, n.Line, kind)
	}
	e.Kind = kind
	f, err := mapping(n, where+" ("+kind+")", allowed...)
	if err != nil {
		return e, err
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"key", &e.Key}, {"owner", &e.Owner}, {"issuer", &e.Issuer}, {"repo", &e.Repo}} {
		if *k.dst, err = str(f, where, k.key); err != nil {
			return e, err
		}
	}
	if a, ok := f["annotations"]; ok && !isNull(a) {
		af, err := mapping(a, where+".annotations", mappingKeys(a)...)
		if err != nil {
			return e, err
		}
		e.Annotations = map[string]string{}
		for k, v := range af {
			if v.Kind != yaml.ScalarNode || isNull(v) {
				return e, fmt.Errorf("%s.annotations.%s (line %d): want a string value", where, k, v.Line)
			}
			e.Annotations[k] = v.Value
		}
	}
	switch kind {
	case KindPubKey:
		if strings.TrimSpace(e.Key) == "" {
			return e, fmt.Errorf("%s (pubKey): key: missing: want a PEM public key (-----BEGIN PUBLIC KEY-----)", where)
		}
		k, err := cryptoutils.UnmarshalPEMToPublicKey([]byte(e.Key))
		if err != nil {
			return e, fmt.Errorf("%s (pubKey): key: not a PEM public key: %v", where, err)
		}
		e.key = k
	case KindGenericIssuer:
		if e.Issuer == "" {
			return e, fmt.Errorf("%s (genericIssuer): issuer: missing: want the OIDC issuer URL, such as https://token.actions.githubusercontent.com", where)
		}
		s, ok := f["subject"]
		if !ok || isNull(s) {
			return e, fmt.Errorf("%s (genericIssuer): subject: missing: want {equal: ...} or {urlPrefix: ...}", where)
		}
		sf, err := mapping(s, where+".subject", "equal", "urlPrefix")
		if err != nil {
			return e, err
		}
		if e.Subject.Equal, err = str(sf, where+".subject", "equal"); err != nil {
			return e, err
		}
		if e.Subject.URLPrefix, err = str(sf, where+".subject", "urlPrefix"); err != nil {
			return e, err
		}
		if (e.Subject.Equal == "") == (e.Subject.URLPrefix == "") {
			return e, fmt.Errorf("%s (genericIssuer): subject: want exactly one of equal and urlPrefix", where)
		}
		if e.Subject.URLPrefix != "" && !strings.HasSuffix(e.Subject.URLPrefix, "/") {
			// As Kubewarden: a prefix ends a path segment, so that
			// https://github.com/acme does not match https://github.com/acme-evil.
			e.Subject.URLPrefix += "/"
		}
	case KindGithubAction:
		if e.Owner == "" {
			return e, fmt.Errorf("%s (githubAction): owner: missing: want the GitHub user or organisation", where)
		}
	}
	return e, nil
}

func mappingKeys(n *yaml.Node) []string {
	var ks []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		ks = append(ks, n.Content[i].Value)
	}
	return ks
}

// Flags are kwctl's verification flags.
type Flags struct {
	Keys        []string          // -k/--verification-key: PEM files
	Annotations map[string]string // -a/--verification-annotation
	CertEmail   string            // --cert-email
	CertIssuer  string            // --cert-oidc-issuer
	GitHubOwner string            // --github-owner
	GitHubRepo  string            // --github-repo
}

// Empty reports whether no verification flag was given.
func (f Flags) Empty() bool {
	return len(f.Keys) == 0 && len(f.Annotations) == 0 && f.CertEmail == "" && f.CertIssuer == "" && f.GitHubOwner == "" && f.GitHubRepo == ""
}

// ConfigFromFlags builds the allOf-only config kwctl builds from its flags:
// one pubKey per key file, a genericIssuer (subject equal to the e-mail),
// a githubAction; the annotations go into each.
func ConfigFromFlags(f Flags) (*Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if (f.CertEmail == "") != (f.CertIssuer == "") {
		return nil, bad("--cert-email and --cert-oidc-issuer go together")
	}
	if f.GitHubRepo != "" && f.GitHubOwner == "" {
		return nil, bad("--github-repo needs --github-owner")
	}
	if len(f.Keys) == 0 && f.CertEmail == "" && f.GitHubOwner == "" {
		if len(f.Annotations) > 0 {
			return nil, bad("--verification-annotation needs a signer: -k/--verification-key, --cert-email with --cert-oidc-issuer, or --github-owner")
		}
		return nil, bad("no signer given: use -k/--verification-key, --cert-email with --cert-oidc-issuer, --github-owner, or --verification-config-path")
	}
	c := &Config{APIVersion: "v1"}
	add := func(e Entry) {
		e.name = fmt.Sprintf("allOf[%d]", len(c.AllOf))
		if len(f.Annotations) > 0 {
			e.Annotations = f.Annotations
		}
		c.AllOf = append(c.AllOf, e)
	}
	for _, path := range f.Keys {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, bad("--verification-key: %v", err)
		}
		k, err := cryptoutils.UnmarshalPEMToPublicKey(b)
		if err != nil {
			return nil, bad("--verification-key %s: not a PEM public key: %v", path, err)
		}
		add(Entry{Kind: KindPubKey, Key: string(b), Owner: path, key: k})
	}
	if f.CertEmail != "" {
		add(Entry{Kind: KindGenericIssuer, Issuer: f.CertIssuer, Subject: Subject{Equal: f.CertEmail}})
	}
	if f.GitHubOwner != "" {
		add(Entry{Kind: KindGithubAction, Owner: f.GitHubOwner, Repo: f.GitHubRepo})
	}
	return c, nil
}

// Scaffold is what `tollgate scaffold verification-config` prints, as
// kwctl's: only policies signed by Kubewarden's GitHub workflows pass.
const Scaffold = `# Default Kubewarden verification config
#
# With this config, only modules signed by Kubewarden's own GitHub
# workflows (the kubewarden organisation) are accepted. Edit it, then give it
# to tollgate verify --verification-config-path or tollgate serve
# --verification-path.
apiVersion: v1
allOf:
  - kind: githubAction
    owner: kubewarden
anyOf: null
`
