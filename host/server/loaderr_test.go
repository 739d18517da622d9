package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testfixture/hostile"
)

// TestLoadErrorBrief: a reactor whose _initialize traps 100 calls deep fails
// to load with wazero's Wasm stack trace (a frame a line) in its error. GET /policies (and so the operator's status) and the error-level
// log show its first line, bounded; the debug log has the whole error.
func TestLoadErrorBrief(t *testing.T) {
	// (func $f (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
	//   (if (i32.eq (i32.load (i32.const 0)) (i32.const 100)) (then unreachable))
	//   (call $f))
	// (export "_initialize" (func $f))
	body := []byte{
		0x41, 0x00, 0x41, 0x00, 0x28, 0x02, 0x00, 0x41, 0x01, 0x6a, 0x36, 0x02, 0x00,
		0x41, 0x00, 0x28, 0x02, 0x00, 0x41, 0xe4, 0x00, 0x46, 0x04, 0x40, 0x00, 0x0b,
		0x10, 0x01, 0x0b,
	}
	mod := hostile.Module{Body: body, ExportAs: "_initialize"}.Bytes()
	file := filepath.Join(t.TempDir(), "deep.wasm")
	if err := os.WriteFile(file, mod, 0o644); err != nil {
		t.Fatal(err)
	}
	h := start(t, harnessOpts{policies: "deep:\n  module: " + file + "\n", loader: newTestLoader(t)})
	p := h.policy("deep")
	if p.State != "failed" {
		t.Fatalf("deep: state %q error %q, want failed", p.State, p.Error)
	}
	if !strings.Contains(p.Error, "wasm error: unreachable") || strings.Contains(p.Error, "wasm stack trace") || strings.Contains(p.Error, "$1") ||
		len(p.Error) > maxLoadErrorBytes || strings.Count(p.Error, "\n") >= maxLoadErrorLines {
		t.Errorf("GET /policies: error of %d bytes, %d lines, want the first line(s) without the stack trace:\n%s", len(p.Error), strings.Count(p.Error, "\n")+1, p.Error)
	}
	if !strings.Contains(p.Error, "debug log") {
		t.Errorf("GET /policies: error %q does not say where the rest is", p.Error)
	}
	logs := h.logs.String()
	errLines, debugLines := grepLines(grepLines(logs, "policy=deep"), "level=ERROR"), grepLines(grepLines(logs, "policy=deep"), "level=DEBUG")
	if errLines == "" || strings.Contains(errLines, "wasm stack trace") || !strings.Contains(errLines, "wasm error: unreachable") {
		t.Errorf("error-level log lines:\n%s\nwant the error without its stack trace", errLines)
	}
	if strings.Count(debugLines, "$1()") < 20 {
		t.Errorf("debug-level log lines lack the whole error:\n%s", debugLines)
	}
}

func TestBriefError(t *testing.T) {
	dump := "policy p: validate_settings: policy trapped: exit code 2\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:5 +0x1d\nexit status 2"
	for _, tt := range []struct{ in, want string }{
		{"plain error", "plain error"},
		{"line one\n\nline two\n", "line one\nline two"},
		{dump, "policy p: validate_settings: policy trapped: exit code 2\npanic: boom" + loadErrorRest},
		{"trap\nwasm stack trace:\n\t.$1()\n\t.$1()", "trap" + loadErrorRest},
		{"goroutine is a word\nx", "goroutine is a word\nx"},
		{"1\n2\n3\n4\n5\n6", "1\n2\n3\n4" + loadErrorRest},
	} {
		if got := briefError(tt.in); got != tt.want {
			t.Errorf("briefError(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
	long := briefError(strings.Repeat("x", 5000))
	if len(long) > maxLoadErrorBytes || !strings.HasSuffix(long, loadErrorRest) {
		t.Errorf("a 5000-byte line: %d bytes %q", len(long), long[len(long)-80:])
	}
}
