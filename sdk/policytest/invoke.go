//go:build !wasip1

package policytest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/tollgate-dev/tollgate/sdk/guest"
	"github.com/tollgate-dev/tollgate/sdk/protocol"
)

// Validate runs the policy's `validate` operation on payload and decodes its
// answer. A guest error (the operation returned an error or panicked) is
// returned as the error.
func Validate(payload []byte) (protocol.ValidationResponse, error) {
	out, err := guest.Invoke("validate", payload)
	if err != nil {
		return protocol.ValidationResponse{}, fmt.Errorf("validate: %w", err)
	}
	return DecodeValidationResponse(out)
}

// ValidateSettings runs the policy's `validate_settings` operation on settings
// (encoded with encoding/json unless a json.RawMessage; nil means {}) and
// decodes its answer.
func ValidateSettings(settings any) (protocol.SettingsValidationResponse, error) {
	raw, ok := settings.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = encodeSettings(settings); err != nil {
			return protocol.SettingsValidationResponse{}, err
		}
	}
	out, err := guest.Invoke("validate_settings", raw)
	if err != nil {
		return protocol.SettingsValidationResponse{}, fmt.Errorf("validate_settings: %w", err)
	}
	return DecodeSettingsValidationResponse(out)
}

// LogRecord is one record a policy logged through kubewarden/tracing/log.
type LogRecord struct {
	Level   string
	Message string
	// Fields holds every other key of the record.
	Fields map[string]any
	// Raw is the record as the policy sent it.
	Raw string
}

// Host answers the policy's host calls during a test, in place of the
// tollgate host: it records log records and answers other calls from, in
// this order, handlers (Handle), canned answers (Answer, Fail) and a
// replayed kwctl session (ReplaySession).
type Host struct {
	mu       sync.Mutex
	logs     []LogRecord
	handlers map[string]func(payload []byte) ([]byte, error)
	calls    []Call
	canned   map[string][]*canned
	session  *session
}

// NewHost installs a Host as the answer to guest.HostCall until the test
// ends (t is a *testing.T, *testing.B or anything with Cleanup). Tests that
// use it must not run in parallel with each other.
func NewHost(t interface{ Cleanup(func()) }) *Host {
	h := &Host{handlers: map[string]func([]byte) ([]byte, error){}}
	prev := guest.SetHostCallHandler(h.call)
	t.Cleanup(func() { guest.SetHostCallHandler(prev) })
	return h
}

// Handle answers the host call kubewarden/namespace/operation with fn.
func (h *Host) Handle(namespace, operation string, fn func(payload []byte) ([]byte, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.handlers[namespace+"/"+operation] = fn
}

// Logs returns the records logged so far.
func (h *Host) Logs() []LogRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogRecord(nil), h.logs...)
}

func (h *Host) call(binding, namespace, operation string, payload []byte) ([]byte, error) {
	if binding != "kubewarden" {
		return nil, fmt.Errorf("unknown binding %q", binding)
	}
	if namespace == "tracing" && operation == "log" {
		rec, err := parseLogRecord(payload)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		h.logs = append(h.logs, rec)
		h.mu.Unlock()
		return nil, nil
	}
	h.mu.Lock()
	h.calls = append(h.calls, Call{Namespace: namespace, Operation: operation, Payload: append([]byte(nil), payload...)})
	fn := h.handlers[namespace+"/"+operation]
	h.mu.Unlock()
	if fn != nil {
		return fn(payload)
	}
	if answer, err, ok := h.answerCanned(namespace, operation, payload); ok {
		return answer, err
	}
	h.mu.Lock()
	s := h.session
	h.mu.Unlock()
	if s != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		return s.answer(namespace, operation, payload)
	}
	return nil, fmt.Errorf("host call %s/%s is not handled by this test", namespace, operation)
}

// parseLogRecord checks a record the way Kubewarden's policy-evaluator does:
// a JSON object whose level is trace, debug, info, warning or error (in any
// case).
func parseLogRecord(payload []byte) (LogRecord, error) {
	var fields map[string]any
	if err := json.Unmarshal(payload, &fields); err != nil {
		return LogRecord{}, fmt.Errorf("log record is not a JSON object: %w", err)
	}
	level, _ := fields["level"].(string)
	level = strings.ToLower(level)
	switch level {
	case "trace", "debug", "info", "warning", "error":
	default:
		return LogRecord{}, fmt.Errorf("log record level %q is not one of trace, debug, info, warning, error", fields["level"])
	}
	msg, _ := fields["message"].(string)
	delete(fields, "level")
	delete(fields, "message")
	return LogRecord{Level: level, Message: msg, Fields: fields, Raw: string(payload)}, nil
}
