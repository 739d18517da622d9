package capabilities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// kwctl's session format: a YAML list of exchanges
//
//   - type: Exchange
//     request: |
//     !KubernetesGetResource
//     api_version: v1
//     ...
//     response:
//     type: Success        # or Error, with message
//     payload: '{"apiVersion":"v1",...}'
//
// where request is itself a YAML document tagged with the request's variant.
type sessionExchange struct {
	Type     string          `yaml:"type"`
	Request  string          `yaml:"request"`
	Response sessionResponse `yaml:"response"`
}

type sessionResponse struct {
	Type    string  `yaml:"type"`
	Payload *string `yaml:"payload,omitempty"`
	Message *string `yaml:"message,omitempty"`
}

// encodeRequest writes a request as kwctl does: a YAML mapping tagged with
// the variant name, Option fields as null.
func encodeRequest(r *request) (string, error) {
	var src any = r.value
	if v, ok := r.value.(*verifyRequest); ok {
		src = v.fields
	}
	var n yaml.Node
	if err := n.Encode(src); err != nil {
		return "", err
	}
	n.Tag = "!" + r.tag
	n.Style = 0
	var buf strings.Builder
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// Recorder appends every answered host call to a session file, in kwctl's
// format, as it happens (a crash keeps what was recorded). Safe for
// concurrent use.
type Recorder struct {
	path string
	mu   sync.Mutex
	f    *os.File
	n    int
	err  error
}

// NewRecorder creates (or truncates) the session file.
func NewRecorder(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSession, err)
	}
	return &Recorder{path: path, f: f}, nil
}

func (r *Recorder) add(req *request, out []byte, callErr error) {
	text, err := encodeRequest(req)
	ex := sessionExchange{Type: "Exchange", Request: text}
	if callErr != nil {
		msg := callErr.Error()
		ex.Response = sessionResponse{Type: "Error", Message: &msg}
	} else {
		p := string(out)
		ex.Response = sessionResponse{Type: "Success", Payload: &p}
	}
	var b []byte
	if err == nil {
		b, err = yaml.Marshal([]sessionExchange{ex})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || r.f == nil {
		return
	}
	if err == nil {
		_, err = r.f.Write(b)
	}
	if err != nil {
		r.err = fmt.Errorf("%w: recording to %s: %w", ErrSession, r.path, err)
		return
	}
	r.n++
}

// Len is how many exchanges were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Close finishes the file (an empty session is written as []) and reports
// the first write error.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return r.err
	}
	if r.n == 0 && r.err == nil {
		_, r.err = r.f.WriteString("[]\n")
	}
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = fmt.Errorf("%w: %s: %w", ErrSession, r.path, err)
	}
	r.f = nil
	return r.err
}

// Replayer answers host calls from a recorded session, in order: each call
// takes the next exchange, which must be the same request (by value: absent
// and null are the same, field_masks is a set).
type Replayer struct {
	name    string
	mu      sync.Mutex
	entries []replayEntry
	next    int
	repeat  bool
}

// Repeat makes the session start over once every exchange was replayed
// (for benchmarks that evaluate the recorded evaluation many times). Call
// it before the first call.
func (r *Replayer) Repeat() { r.repeat = true }

type replayEntry struct {
	index, line int
	tag         string
	fields      map[string]any
	payload     []byte
	message     *string
}

// LoadSession reads a session file.
func LoadSession(path string) (*Replayer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSession, err)
	}
	return ParseSession(path, b)
}

// ParseSession parses a session; name is used in errors.
func ParseSession(name string, data []byte) (*Replayer, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w %s: not YAML: %v", ErrSession, name, err)
	}
	r := &Replayer{name: name}
	if len(doc.Content) == 0 {
		return r, nil
	}
	seq := doc.Content[0]
	if seq.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%w %s: line %d: want a list of exchanges", ErrSession, name, seq.Line)
	}
	for i, item := range seq.Content {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w %s: entry %d (line %d): %s", ErrSession, name, i+1, item.Line, fmt.Sprintf(format, args...))
		}
		var ex sessionExchange
		if err := item.Decode(&ex); err != nil {
			return nil, bad("%v", err)
		}
		if ex.Type != "Exchange" {
			return nil, bad("type is %q, want Exchange", ex.Type)
		}
		tag, fields, err := parseRecordedRequest(ex.Request)
		if err != nil {
			return nil, bad("request: %v", err)
		}
		e := replayEntry{index: i + 1, line: item.Line, tag: tag, fields: fields}
		switch ex.Response.Type {
		case "Success":
			if ex.Response.Payload == nil {
				return nil, bad("a Success response needs a payload")
			}
			e.payload = []byte(*ex.Response.Payload)
		case "Error":
			msg := ""
			if ex.Response.Message != nil {
				msg = *ex.Response.Message
			}
			e.message = &msg
		default:
			return nil, bad("response type is %q, want Success or Error", ex.Response.Type)
		}
		r.entries = append(r.entries, e)
	}
	return r, nil
}

func parseRecordedRequest(text string) (string, map[string]any, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return "", nil, err
	}
	if len(doc.Content) == 0 {
		return "", nil, errors.New("empty request")
	}
	n := doc.Content[0]
	if !strings.HasPrefix(n.Tag, "!") || strings.HasPrefix(n.Tag, "!!") {
		return "", nil, errors.New("the request has no variant tag (such as !KubernetesGetResource)")
	}
	tag := strings.TrimPrefix(n.Tag, "!")
	if n.Kind != yaml.MappingNode {
		return "", nil, fmt.Errorf("%s: want a mapping of fields", tag)
	}
	n.Tag = "!!map"
	var v map[string]any
	if err := n.Decode(&v); err != nil {
		return "", nil, fmt.Errorf("%s: %w", tag, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", tag, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return "", nil, fmt.Errorf("%s: %w", tag, err)
	}
	return tag, normalize(tag, m), nil
}

// Len is how many exchanges the session holds; Remaining how many were not replayed.
func (r *Replayer) Len() int { return len(r.entries) }

// Remaining is how many exchanges were not replayed yet.
func (r *Replayer) Remaining() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries) - r.next
}

func (r *Replayer) answer(_ context.Context, req *request) ([]byte, error) {
	got := req.fields()
	r.mu.Lock()
	if r.repeat && r.next >= len(r.entries) && len(r.entries) > 0 {
		r.next = 0
	}
	if r.next >= len(r.entries) {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: the list of recorded responses is empty (session %s: all %d exchanges were replayed; this request was not recorded: %s)",
			ErrReplay, r.name, len(r.entries), describe(req.tag, got))
	}
	e := r.entries[r.next]
	r.next++
	r.mu.Unlock()
	if !sameRequest(e.tag, e.fields, req.tag, got) {
		return nil, fmt.Errorf("%w: unexpected request. Was expecting %s, got %s instead (session %s, entry %d, line %d)",
			ErrReplay, describe(e.tag, e.fields), describe(req.tag, got), r.name, e.index, e.line)
	}
	if e.message != nil {
		return nil, errors.New(*e.message)
	}
	return e.payload, nil
}
