package oci

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

type slowReader struct {
	chunks int
	delay  time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.chunks == 0 {
		return 0, io.EOF
	}
	s.chunks--
	time.Sleep(s.delay)
	n := min(len(p), 1024)
	return n, nil
}

func TestProgressReader(t *testing.T) {
	var out bytes.Buffer
	p := newProgressReader(&slowReader{chunks: 4, delay: 200 * time.Millisecond}, &out, "registry://h/r:t", 4096)
	if _, err := io.Copy(io.Discard, p); err != nil {
		t.Fatal(err)
	}
	p.done()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "registry://h/r:t: ") || !strings.Contains(lines[0], "/ 4.0 KiB (") ||
		!strings.Contains(lines[len(lines)-1], "4.0 KiB in ") {
		t.Fatalf("progress output:\n%s", out.String())
	}
	out.Reset()
	quick := newProgressReader(strings.NewReader("abc"), &out, "x", 3)
	_, _ = io.Copy(io.Discard, quick)
	quick.done()
	if out.Len() != 0 {
		t.Fatalf("quick download printed %q", out.String())
	}
}
