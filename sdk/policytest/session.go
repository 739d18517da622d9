//go:build !wasip1

package policytest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
)

// ErrSession is wrapped by the errors of a session file that cannot be read.
var ErrSession = errors.New("host capabilities session")

// sessionTags maps a kwctl session request's tag to its host call and to
// the payload the guest sends for it.
var sessionTags = map[string]struct {
	namespace, operation string
	payload              func(body map[string]any) any
}{
	"KubernetesGetResource":           {"kubernetes", "get_resource", same},
	"KubernetesListResourceNamespace": {"kubernetes", "list_resources_by_namespace", same},
	"KubernetesListResourceAll":       {"kubernetes", "list_resources_all", same},
	"KubernetesCanI": {"kubernetes", "can_i", func(b map[string]any) any {
		return map[string]any{"subject_access_review": b["request"], "disable_cache": b["disable_cache"]}
	}},
	"OciManifestDigest":          {"oci", "v1/manifest_digest", field("image")},
	"OciManifest":                {"oci", "v1/oci_manifest", field("image")},
	"OciManifestAndConfig":       {"oci", "v1/oci_manifest_config", field("image")},
	"DNSLookupHost":              {"net", "v1/dns_lookup_host", field("host")},
	"CryptoIsCertificateTrusted": {"crypto", "v1/is_certificate_trusted", field("request")},
}

func same(b map[string]any) any { return b }

func field(name string) func(map[string]any) any {
	return func(b map[string]any) any { return b[name] }
}

// isSigstoreTag reports the Sigstore variants, which kwctl records for
// oci/v1/verify and oci/v2/verify alike.
func isSigstoreTag(tag string) bool { return strings.HasPrefix(tag, "Sigstore") }

// exchange is one recorded host call of a session.
type exchange struct {
	entry, line          int
	tag                  string
	namespace, operation string // "" for the Sigstore variants (either verify)
	request              any    // normalized payload
	display              string // the request as recorded
	answer               []byte
	errMsg               string
	isErr                bool
}

// session is a loaded kwctl session, answered in order.
type session struct {
	path      string
	exchanges []*exchange
	next      int
}

// ReplaySession makes the Host answer host calls from a session file in
// kwctl's format (as written by `kwctl run` or `tollgate run
// --record-host-capabilities-interactions`, and as Kubewarden's policy
// repositories keep them in test_data/): each call takes the next recorded
// exchange, which must be the same request (compared as in Answer), and
// gets its answer, or its error as "Callback evaluation failure: <message>".
// A different request is answered with kwctl's "Replay error: unexpected
// request" naming the session entry (the exchange is consumed, as in kwctl);
// a call past the end with "the list of recorded responses is empty".
//
// Handle handlers and canned answers are tried first. A file that does not
// parse is an error naming the file, the entry and its line.
func (h *Host) ReplaySession(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSession, err)
	}
	s, err := parseSession(path, string(data))
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.session = s
	h.mu.Unlock()
	return nil
}

// SessionRemaining returns how many exchanges of the replayed session the
// policy has not used (a test may require 0).
func (h *Host) SessionRemaining() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.session == nil {
		return 0
	}
	return len(h.session.exchanges) - h.session.next
}

func parseSession(path, src string) (*session, error) {
	doc, _, err := parseYAML(src)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrSession, path, err)
	}
	list, ok := doc.([]any)
	if doc != nil && !ok {
		return nil, fmt.Errorf("%w %s: not a list of exchanges", ErrSession, path)
	}
	lines := entryLines(src)
	s := &session{path: path}
	for i, e := range list {
		line := 0
		if i < len(lines) {
			line = lines[i]
		}
		x, err := parseExchange(e)
		if err != nil {
			return nil, fmt.Errorf("%w %s: entry %d (line %d): %w", ErrSession, path, i+1, line, err)
		}
		x.entry, x.line = i+1, line
		s.exchanges = append(s.exchanges, x)
	}
	return s, nil
}

// entryLines returns the line numbers of the top-level "- " items.
func entryLines(src string) []int {
	var out []int
	for n, l := range strings.Split(src, "\n") {
		if l == "-" || strings.HasPrefix(l, "- ") {
			out = append(out, n+1)
		}
	}
	return out
}

func parseExchange(e any) (*exchange, error) {
	m, ok := e.(map[string]any)
	if !ok {
		return nil, errors.New("not a mapping")
	}
	if t, _ := m["type"].(string); t != "Exchange" {
		return nil, fmt.Errorf("type: %q is not Exchange", m["type"])
	}
	reqSrc, ok := m["request"].(string)
	if !ok {
		return nil, errors.New("request: not a string")
	}
	body, tag, err := parseYAML(reqSrc)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if tag == "" {
		return nil, errors.New("request: the request has no variant tag (such as !KubernetesGetResource)")
	}
	bm, _ := body.(map[string]any)
	if body != nil && bm == nil {
		return nil, fmt.Errorf("request: !%s is not a mapping", tag)
	}
	x := &exchange{tag: tag, display: strings.TrimSpace(reqSrc)}
	switch kind, known := sessionTags[tag]; {
	case known:
		x.namespace, x.operation = kind.namespace, kind.operation
		x.request = normalize(kind.namespace+"/"+kind.operation, roundTrip(kind.payload(bm)))
	case isSigstoreTag(tag):
		x.request = map[string]any{"variant": tag, "fields": dropNulls(roundTrip(bm))}
	default:
		return nil, fmt.Errorf("request: unknown request variant !%s", tag)
	}
	resp, ok := m["response"].(map[string]any)
	if !ok {
		return nil, errors.New("response: not a mapping")
	}
	switch resp["type"] {
	case "Success":
		p, ok := resp["payload"].(string)
		if !ok {
			return nil, errors.New("response: a Success needs a string payload")
		}
		x.answer = []byte(p)
	case "Error":
		msg, ok := resp["message"].(string)
		if !ok {
			return nil, errors.New("response: an Error needs a string message")
		}
		x.isErr, x.errMsg = true, msg
	default:
		return nil, fmt.Errorf("response: type %q is not Success or Error", resp["type"])
	}
	return x, nil
}

// roundTrip gives a value the types encoding/json would decode it to.
func roundTrip(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(b, &out) != nil {
		return v
	}
	return out
}

// answer replays the next exchange for a call.
func (s *session) answer(namespace, operation string, payload []byte) ([]byte, error) {
	got := fmt.Sprintf("%s/%s %s", namespace, operation, payload)
	if s.next >= len(s.exchanges) {
		return nil, fmt.Errorf("the list of recorded responses is empty (session %s, request %s)", s.path, got)
	}
	x := s.exchanges[s.next]
	s.next++
	norm, err := normalizePayload(namespace, operation, payload)
	if err != nil {
		return nil, fmt.Errorf("invalid host call payload: %w", err)
	}
	match := reflect.DeepEqual(norm, x.request)
	if x.namespace == "" { // a Sigstore variant: either verify operation
		match = match && namespace == "oci" && (operation == "v1/verify" || operation == "v2/verify")
	} else {
		match = match && x.namespace == namespace && x.operation == operation
	}
	if !match {
		return nil, fmt.Errorf("Replay error: unexpected request. Was expecting %s, got %s instead (session %s, entry %d, line %d)",
			strings.ReplaceAll(x.display, "\n", " "), got, s.path, x.entry, x.line)
	}
	if x.isErr {
		return nil, errors.New(callbackFailure + x.errMsg)
	}
	return append([]byte(nil), x.answer...), nil
}
