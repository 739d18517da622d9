package wasm

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestConsoleLogLimited: a module's console log lines are cut at 1 KiB and
// limited to a burst of 100 then 50 per second; the dropped lines are
// reported in one warning.
func TestConsoleLogLimited(t *testing.T) {
	var b bytes.Buffer
	log := consoleLog(slog.New(slog.NewTextHandler(&b, nil)))
	log(strings.Repeat("x", 5000))
	for i := 0; i < 999; i++ {
		log("line")
	}
	out := b.String()
	lines := strings.Count(out, `msg="guest console"`)
	if lines < 100 || lines > 110 {
		t.Errorf("%d of 1000 lines logged, want the burst of 100 (and what refills meanwhile)", lines)
	}
	if strings.Contains(out, strings.Repeat("x", 1025)) || !strings.Contains(out, strings.Repeat("x", 1024)+" truncated=true") {
		t.Error("a 5000-byte line is not cut at 1 KiB")
	}
	if n := strings.Count(out, "guest console lines dropped"); n != 1 {
		t.Errorf("%d drop warnings, want 1 within 10 s", n)
	}
}

func TestLogLimiterRefills(t *testing.T) {
	l := &LogLimiter{Rate: 10, Burst: 2, WarnEvery: time.Second}
	t0 := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false, false} {
		if ok, _ := l.Allow(t0); ok != want {
			t.Fatalf("call %d: %v", i, ok)
		}
	}
	if ok, _ := l.Allow(t0.Add(100 * time.Millisecond)); !ok {
		t.Error("no token after 100 ms at 10/s")
	}
	if ok, lost := l.Allow(t0.Add(2 * time.Second)); !ok || lost != 0 {
		t.Errorf("after 2 s: %v %d", ok, lost)
	}
	l.Allow(t0.Add(2 * time.Second))
	// the 4th call at t0 was dropped after the first report: reported now with this one
	if ok, lost := l.Allow(t0.Add(2 * time.Second)); ok || lost != 2 {
		t.Errorf("dropped after the warning interval: %v, reported %d, want 2", ok, lost)
	}
}

// TestGuestOutputLinesCut: a guest's stdout line is logged at most 4 KiB
// long, however much it writes without a newline.
func TestGuestOutputLinesCut(t *testing.T) {
	var b bytes.Buffer
	w := &lineLogger{logger: slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), stream: "stdout"}
	w.Write([]byte(strings.Repeat("y", 1<<20)))
	w.Write([]byte("short\n"))
	if strings.Contains(b.String(), strings.Repeat("y", 4097)) || !strings.Contains(b.String(), "line=short") {
		t.Errorf("logged %d bytes:\n%.200s", b.Len(), b.String())
	}
}
