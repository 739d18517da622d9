package server

import (
	"log/slog"
	"strings"
)

const (
	// maxLoadErrorLines and maxLoadErrorBytes bound a load error as GET
	// /policies (and so the operator's status conditions) and the server's
	// error-level log show it.
	maxLoadErrorLines = 4
	maxLoadErrorBytes = 1024
	// loadErrorRest ends a load error that was cut.
	loadErrorRest = " (cut: the whole error is in the server's debug log)"
)

// briefError is the first meaningful lines of a load error: at most
// maxLoadErrorLines non-blank lines, none from the first line of a stack
// trace or a goroutine dump on (wazero's "wasm stack trace:", a Go runtime's
// "goroutine 1 [running]:" and the frames after it), at most
// maxLoadErrorBytes, ending with loadErrorRest when anything was left out.
// logLoadError logs the whole error at debug level.
func briefError(s string) string {
	var keep []string
	cut := false
	for _, l := range strings.Split(s, "\n") {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		if dumpStarts(t) || len(keep) == maxLoadErrorLines {
			cut = true
			break
		}
		keep = append(keep, strings.TrimRight(l, " \t\r"))
	}
	out := strings.Join(keep, "\n")
	if !cut && len(out) <= maxLoadErrorBytes {
		return out
	}
	return truncate(out, maxLoadErrorBytes-len(loadErrorRest)) + loadErrorRest
}

// dumpStarts reports whether line t (trimmed) starts a stack trace or a
// goroutine dump: wazero's "wasm stack trace:" or a Go runtime's
// "goroutine N [state]:".
func dumpStarts(t string) bool {
	if strings.HasPrefix(t, "wasm stack trace:") {
		return true
	}
	if rest, ok := strings.CutPrefix(t, "goroutine "); ok {
		n := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		return n > 0 && strings.HasPrefix(rest[n:], " [")
	}
	return false
}

// logLoadError logs a policy's load error at error level as briefError
// shows it, and the whole of it at debug level when that is more.
func logLoadError(log *slog.Logger, msg, id string, err error) {
	full := err.Error()
	brief := briefError(full)
	log.Error(msg, "policy", id, "error", brief)
	if brief != full {
		log.Debug(msg+" (the whole error)", "policy", id, "error", full)
	}
}
