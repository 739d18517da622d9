package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/tollgate-dev/tollgate/host/wasm"
)

// withHostCalls attaches this policy's host-call handler to ctx. The handler
// value is made once at load, not per request.
func (p *Policy) withHostCalls(ctx context.Context) context.Context {
	if p.inlineHostCalls {
		return wasm.WithInlineHostCallHandler(ctx, p.hostHandler)
	}
	return wasm.WithHostCallHandler(ctx, p.hostHandler)
}

// handleHostCall answers the host calls a policy makes: logging is always
// allowed; everything else goes to Spec.HostCalls or gets a clear error.
func (p *Policy) handleHostCall(ctx context.Context, binding, namespace, operation string, payload []byte) ([]byte, error) {
	if binding == "kubewarden" && namespace == "tracing" && operation == "log" {
		p.logGuest(ctx, payload)
		return nil, nil
	}
	if p.hostCall != nil {
		return p.hostCall(ctx, binding, namespace, operation, payload)
	}
	return nil, fmt.Errorf("host capability %s/%s/%s is not available to policy %s", binding, namespace, operation, p.id)
}

// logGuest writes a policy's log line (Kubewarden's tracing payload: a JSON
// object with level, message and any fields) to the structured log.
func (p *Policy) logGuest(ctx context.Context, payload []byte) {
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		p.logger.WarnContext(ctx, "policy log line is not JSON", "payload", string(payload))
		return
	}
	level := slog.LevelInfo
	switch m["level"] {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warning", "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	msg, _ := m["message"].(string)
	delete(m, "level")
	delete(m, "message")
	attrs := make([]slog.Attr, 0, len(m)+1)
	attrs = append(attrs, slog.String("source", "policy"))
	for k, v := range m {
		attrs = append(attrs, slog.Any(k, v))
	}
	p.logger.LogAttrs(ctx, level, msg, attrs...)
}
