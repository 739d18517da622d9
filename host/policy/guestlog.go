package policy

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/tollgate-dev/tollgate/host/wasm"
)

// Limits of a guest's log lines (Kubewarden's tracing/log host call). The
// guest chooses every byte of them, so they are bounded like any input: a
// policy logging on every request of a burst must not flood the log or
// spend the server's time formatting it, and it must not write fields that
// look like the server's own (policy, uid, error...).
const (
	// guestLogRate lines per second a policy may log in the long run, and
	// guestLogBurst lines at once; the lines above are dropped and counted
	// (HostOptions.GuestLogDropped, tollgate_policy_log_lines_dropped_total).
	guestLogRate  = 50
	guestLogBurst = 100
	// guestLogMessage bytes of the message, guestLogFields fields (by name
	// order), guestLogKey bytes of a field name and guestLogValue bytes of a
	// field's JSON value are kept; a line cut short says truncated=true.
	guestLogMessage = 1024
	guestLogFields  = 16
	guestLogKey     = 64
	guestLogValue   = 256
	// guestLogWarnEvery is the shortest time between two warnings that a
	// policy's lines were dropped.
	guestLogWarnEvery = 10 * time.Second
)

// guestLog is one policy's log budget.
type guestLog struct {
	wasm.LogLimiter
	dropped func(policy string)
}

func newGuestLog(dropped func(policy string)) guestLog {
	return guestLog{LogLimiter: wasm.LogLimiter{Rate: guestLogRate, Burst: guestLogBurst, WarnEvery: guestLogWarnEvery}, dropped: dropped}
}

// logGuest writes a policy's log line (Kubewarden's tracing payload: a JSON
// object with level, message and any fields) to the structured log: the
// level and message as the line's, the other fields in the group "guest"
// (so a field "policy" is guest.policy, never beside the real policy id),
// within the limits above.
func (p *Policy) logGuest(ctx context.Context, payload []byte) {
	if ok, lost := p.guestLog.Allow(time.Now()); !ok {
		if p.guestLog.dropped != nil {
			p.guestLog.dropped(p.id)
		}
		if lost > 0 {
			p.logger.WarnContext(ctx, "policy log lines dropped: the policy logs more than its rate limit", "dropped", lost,
				"limit", guestLogRate, "burst", guestLogBurst)
		}
		return
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		b, truncated := wasm.Cut(string(payload), guestLogValue)
		p.logger.WarnContext(ctx, "policy log line is not JSON", "source", "policy", "payload", b, "truncated", truncated)
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
	msg, truncated := wasm.Cut(msg, guestLogMessage)
	keys := slices.Sorted(maps.Keys(m))
	if len(keys) > guestLogFields {
		keys, truncated = keys[:guestLogFields], true
	}
	fields := make([]any, 0, len(keys))
	for _, k := range keys {
		v := m[k]
		k, kt := wasm.Cut(k, guestLogKey)
		if b, err := json.Marshal(v); err == nil && len(b) > guestLogValue {
			s, _ := wasm.Cut(string(b), guestLogValue)
			v, kt = s, true
		}
		truncated = truncated || kt
		fields = append(fields, slog.Any(k, v))
	}
	attrs := []slog.Attr{slog.String("source", "policy")}
	if truncated {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	if len(fields) > 0 {
		attrs = append(attrs, slog.Group("guest", fields...))
	}
	p.logger.LogAttrs(ctx, level, msg, attrs...)
}
