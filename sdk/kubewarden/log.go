package kubewarden

import (
	"bytes"
	"log/slog"

	"github.com/tollgate-dev/tollgate/sdk/guest"
)

// LogWriter sends what is written to it to the host's log through the host
// call kubewarden/tracing/log, one call per Write, without a trailing
// newline. Each Write must be one JSON object with at least "level" and
// "message" (what onelog and NewLogHandler write). It is the counterpart of
// policy-sdk-go's KubewardenLogWriter.
type LogWriter struct{}

// Write sends p as one log record.
func (LogWriter) Write(p []byte) (int, error) {
	if _, err := guest.HostCall("kubewarden", "tracing", "log", bytes.TrimRight(p, "\n")); err != nil {
		return 0, err
	}
	return len(p), nil
}

// KubewardenLogWriter is LogWriter under policy-sdk-go's name.
type KubewardenLogWriter = LogWriter

// NewLogHandler returns a slog.Handler that sends each record to the host as
// {"level":...,"message":...,attrs...} (no time: the host stamps it). opts
// may be nil; opts.ReplaceAttr runs before the renaming.
func NewLogHandler(opts *slog.HandlerOptions) slog.Handler {
	o := slog.HandlerOptions{}
	if opts != nil {
		o = *opts
	}
	user := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if user != nil {
			a = user(groups, a)
		}
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.TimeKey:
			return slog.Attr{}
		case slog.MessageKey:
			a.Key = "message"
		case slog.LevelKey:
			if l, ok := a.Value.Any().(slog.Level); ok {
				a.Value = slog.StringValue(levelName(l))
			}
		}
		return a
	}
	return slog.NewJSONHandler(LogWriter{}, &o)
}

// NewLogger returns a slog.Logger that logs through the host at level and
// above (nil: info).
func NewLogger(level slog.Leveler) *slog.Logger {
	return slog.New(NewLogHandler(&slog.HandlerOptions{Level: level}))
}

// levelName maps slog levels to the names Kubewarden's hosts accept.
func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warning"
	default:
		return "error"
	}
}
