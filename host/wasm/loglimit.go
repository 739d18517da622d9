package wasm

import (
	"sync"
	"time"
	"unicode/utf8"
)

// LogLimiter bounds how many log lines a guest may write: a token bucket of
// Burst lines refilled at Rate lines per second. Lines above it are
// dropped; Allow says, at most once per WarnEvery, how many were dropped
// since it last said so. The zero value is not usable: set the fields.
type LogLimiter struct {
	Rate      float64
	Burst     float64
	WarnEvery time.Duration

	mu     sync.Mutex
	tokens float64
	last   time.Time
	lost   int
	warned time.Time
}

// Allow takes a token at now; it returns false for a line to drop and, when
// it is time to say so, how many were dropped since the last report.
func (l *LogLimiter) Allow(now time.Time) (ok bool, report int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = l.Burst
	} else {
		l.tokens = min(l.Burst, l.tokens+now.Sub(l.last).Seconds()*l.Rate)
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return true, 0
	}
	l.lost++
	if now.Sub(l.warned) >= l.WarnEvery {
		report, l.lost, l.warned = l.lost, 0, now
	}
	return false, report
}

// Cut is s cut to at most n bytes at a rune boundary, and whether it was cut.
func Cut(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// consoleLog is a waPC module's console logger (__console_log): one line
// per call, at most 1 KiB, at most 50 lines per second per module (a burst
// of 100), the rest dropped with a warning every 10 s.
func consoleLog(logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}) func(msg string) {
	lim := &LogLimiter{Rate: 50, Burst: 100, WarnEvery: 10 * time.Second}
	return func(msg string) {
		ok, lost := lim.Allow(time.Now())
		if !ok {
			if lost > 0 {
				logger.Warn("guest console lines dropped: the module logs more than its rate limit", "dropped", lost)
			}
			return
		}
		msg, truncated := Cut(msg, 1024)
		if truncated {
			logger.Info("guest console", "message", msg, "truncated", true)
			return
		}
		logger.Info("guest console", "message", msg)
	}
}
