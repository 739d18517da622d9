package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Sources is Kubewarden's sources.yml: registries and hosts reached without
// TLS verification, and extra CA certificates per host. This package owns the
// format: ParseSources reads it (every error naming file, line, field and
// value), MarshalSources writes it; host/oci turns it into TLS settings.
type Sources struct {
	// InsecureSources are host[:port] names for which TLS is not verified
	// (and plain HTTP is allowed).
	InsecureSources []string
	// SourceAuthorities maps host[:port] to extra trusted CA certificates.
	SourceAuthorities map[string][]Certificate
}

// Certificate is a CA certificate given inline (Data, PEM) or by file
// (Path, read by whoever uses it; this package does not read it).
type Certificate struct {
	Path string
	Data []byte
}

// ErrEmptySources marks a sources.yml with no content (as ErrEmpty for
// policies.yml): a file caught half-written, which would drop every insecure
// source and CA silently; `{}` says "none".
var ErrEmptySources = errors.New("empty sources file (write {} for no insecure sources or authorities)")

// ParseSources parses a sources.yml (YAML or JSON). An empty file is an error
// (ErrEmptySources); `{}` means none. Both Kubewarden forms of a
// certificate are accepted: `{type: Path, path: ...}` / `{type: Data, data: ...}`
// (the type in any case) and a plain string (PEM data when it starts with
// -----BEGIN, else a path). A host with no certificates (`host: null` or `[]`)
// is accepted and adds none. Hosts (insecure_sources entries and
// source_authorities keys) must be host or host:port: no scheme, path or space.
func ParseSources(file string, data []byte) (src Sources, err error) {
	defer func() {
		if r := recover(); r != nil {
			src, err = Sources{}, fmt.Errorf("%s: %w: %v", file, ErrSyntax, r)
		}
	}()
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Sources{}, fmt.Errorf("%s: %w", file, ErrEmptySources)
		}
		return Sources{}, fmt.Errorf("%s: %w: %v", file, ErrSyntax, err)
	}
	p := &parser{file: file}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = deref(root.Content[0])
	}
	if root == nil || (root.Kind == yaml.DocumentNode && len(root.Content) == 0) || (root.Kind == yaml.ScalarNode && root.Tag == "!!null") {
		return Sources{}, fmt.Errorf("%s: %w", file, ErrEmptySources)
	}
	if root.Kind != yaml.MappingNode {
		p.fail(root, "", "", "", show(root), "the top level must be a map with insecure_sources and source_authorities")
		return Sources{}, errors.Join(p.errs...)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], deref(root.Content[i+1])
		switch k.Value {
		case "insecure_sources":
			if v == nil || v.Kind != yaml.SequenceNode {
				if v != nil && v.Tag == "!!null" {
					continue
				}
				p.fail(v, "", "", "insecure_sources", show(v), "must be a list of host[:port]")
				continue
			}
			for j, it := range v.Content {
				if s, ok := p.str(it, "", "", fmt.Sprintf("insecure_sources[%d]", j)); ok {
					if !validHost(s) {
						p.fail(it, "", "", fmt.Sprintf("insecure_sources[%d]", j), strconv.Quote(s), "must be host or host:port")
						continue
					}
					src.InsecureSources = append(src.InsecureSources, s)
				}
			}
		case "source_authorities":
			if v != nil && v.Tag == "!!null" {
				continue
			}
			if v == nil || v.Kind != yaml.MappingNode {
				p.fail(v, "", "", "source_authorities", show(v), "must be a map from host[:port] to a list of certificates")
				continue
			}
			src.SourceAuthorities = map[string][]Certificate{}
			for j := 0; j+1 < len(v.Content); j += 2 {
				hk, hv := v.Content[j], deref(v.Content[j+1])
				host := hk.Value
				field := "source_authorities." + host
				if !validHost(host) {
					p.fail(hk, "", "", "source_authorities", strconv.Quote(host), "a key must be host or host:port")
					continue
				}
				if hv != nil && hv.Tag == "!!null" {
					continue
				}
				if hv == nil || hv.Kind != yaml.SequenceNode {
					p.fail(hv, "", "", field, show(hv), "must be a list of certificates")
					continue
				}
				for n, c := range hv.Content {
					if cert, ok := p.certificate(c, fmt.Sprintf("%s[%d]", field, n)); ok {
						src.SourceAuthorities[host] = append(src.SourceAuthorities[host], cert)
					}
				}
			}
		default:
			p.fail(k, "", "", k.Value, "", "unknown field (expected insecure_sources or source_authorities)")
		}
	}
	sort.Strings(src.InsecureSources)
	if len(p.errs) > 0 {
		return Sources{}, errors.Join(p.errs...)
	}
	return src, nil
}

// validHost reports whether h is host or host:port as it appears in module
// URIs: not empty, no scheme, path or white space.
func validHost(h string) bool {
	return h != "" && !strings.ContainsAny(h, "/ \t\r\n")
}

// MarshalSources writes s as sources.yml in the controller's form: JSON,
// indented, keys sorted, both keys always present, certificates as
// {type: Path, path} or {type: Data, data}, and a final newline.
func MarshalSources(s Sources) ([]byte, error) {
	type cert struct {
		Data string `json:"data,omitempty"`
		Path string `json:"path,omitempty"`
		Type string `json:"type"`
	}
	insecure := s.InsecureSources
	if insecure == nil {
		insecure = []string{}
	}
	auth := map[string][]cert{}
	for host, certs := range s.SourceAuthorities {
		out := make([]cert, 0, len(certs))
		for _, c := range certs {
			if c.Path != "" {
				out = append(out, cert{Type: "Path", Path: c.Path})
			} else {
				out = append(out, cert{Type: "Data", Data: string(c.Data)})
			}
		}
		auth[host] = out
	}
	b, err := json.MarshalIndent(struct {
		InsecureSources   []string          `json:"insecure_sources"`
		SourceAuthorities map[string][]cert `json:"source_authorities"`
	}{insecure, auth}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (p *parser) certificate(n *yaml.Node, field string) (Certificate, bool) {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode {
		if strings.HasPrefix(strings.TrimSpace(n.Value), "-----BEGIN") {
			return Certificate{Data: []byte(n.Value)}, true
		}
		if n.Value == "" {
			p.fail(n, "", "", field, `""`, "empty certificate")
			return Certificate{}, false
		}
		return Certificate{Path: n.Value}, true
	}
	if n == nil || n.Kind != yaml.MappingNode {
		p.fail(n, "", "", field, show(n), "must be {type: Path, path: FILE} or {type: Data, data: PEM}")
		return Certificate{}, false
	}
	var typ, path, data string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		s, ok := p.str(v, "", "", field+"."+k.Value)
		if !ok {
			return Certificate{}, false
		}
		switch k.Value {
		case "type":
			typ = s
		case "path":
			path = s
		case "data":
			data = s
		default:
			p.fail(k, "", "", field+"."+k.Value, "", "unknown field (expected type, path, data)")
			return Certificate{}, false
		}
	}
	switch strings.ToLower(typ) {
	case "path":
		if path == "" {
			p.fail(n, "", "", field+".path", `""`, "type Path needs a path")
			return Certificate{}, false
		}
		return Certificate{Path: path}, true
	case "data":
		if !strings.Contains(data, "-----BEGIN") {
			p.fail(n, "", "", field+".data", "", "type Data needs PEM data (-----BEGIN CERTIFICATE-----)")
			return Certificate{}, false
		}
		return Certificate{Data: []byte(data)}, true
	default:
		p.fail(n, "", "", field+".type", strconv.Quote(typ), "must be Path or Data")
		return Certificate{}, false
	}
}
