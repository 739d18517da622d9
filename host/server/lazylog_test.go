package server

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
)

// TestRequestLogSameAsWith: every line through requestLog is the line
// s.log.With would have written, for text and JSON handlers, with more
// attributes and groups derived from it, and levels still filter.
func TestRequestLogSameAsWith(t *testing.T) {
	for name, mk := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
		"json": func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})
		},
	} {
		t.Run(name, func(t *testing.T) {
			var want, got bytes.Buffer
			ref := slog.New(mk(&want)).With("server", "s1")
			lazy := slog.New(mk(&got)).With("server", "s1")
			lines := func(l *slog.Logger) {
				l.Warn("evaluation failed", "reason", "timeout", "error", `a "quoted" error`)
				l.Debug("filtered out")
				l.With("member", "m1").Info("group member", "n", 2)
				l.WithGroup("g").Info("grouped", "k", "v")
				l.Log(context.Background(), slog.LevelError, "error line")
				if l.Enabled(context.Background(), slog.LevelDebug) {
					t.Error("debug enabled at level info")
				}
			}
			lines(ref.With("policy", "p1", "uid", `u"1`, "endpoint", "validate"))
			lines(requestLog(lazy, "p1", `u"1`, "validate"))
			// the time field differs from line to line: compare without it
			strip := func(b []byte) string {
				lines := bytes.Split(b, []byte("\n"))
				for i, l := range lines {
					if k := bytes.Index(l, []byte("level")); k >= 0 {
						lines[i] = l[k:]
					}
				}
				return string(bytes.Join(lines, []byte("\n")))
			}
			if strip(got.Bytes()) != strip(want.Bytes()) {
				t.Fatalf("requestLog wrote\n%s\nWith writes\n%s", got.String(), want.String())
			}
			if n := bytes.Count(want.Bytes(), []byte("\n")); n != 4 {
				t.Fatalf("%d lines, want 4:\n%s", n, want.String())
			}
		})
	}
}

// TestRequestLogAllocs: a request that logs nothing pays for the logger
// alone, not for formatting its attributes as With does.
func TestRequestLogAllocs(t *testing.T) {
	var b bytes.Buffer
	base := slog.New(slog.NewTextHandler(&b, nil)) // serve's default level, info
	with := testing.AllocsPerRun(100, func() {
		base.With("policy", "p1", "uid", "00000000-0000-0000-0000-000000000001", "endpoint", "validate").Debug("x")
	})
	lazy := testing.AllocsPerRun(100, func() {
		requestLog(base, "p1", "00000000-0000-0000-0000-000000000001", "validate").Debug("x")
	})
	t.Logf("allocations: With %.0f, requestLog %.0f", with, lazy)
	if lazy > 2 || lazy >= with {
		t.Fatalf("requestLog allocates %.0f times (With %.0f), want at most 2", lazy, with)
	}
}
