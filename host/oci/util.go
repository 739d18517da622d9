package oci

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// progressReader writes "URI: 12.0 MiB / 40.0 MiB (30%)" lines at most
// every progressEvery, and a final line when done (only for downloads that
// lasted that long: quick pulls stay silent).
type progressReader struct {
	r       io.Reader
	w       io.Writer
	name    string
	total   int64
	n       int64
	last    time.Time
	start   time.Time
	printed bool
}

const progressEvery = 500 * time.Millisecond

func newProgressReader(r io.Reader, w io.Writer, name string, total int64) *progressReader {
	now := time.Now()
	return &progressReader{r: r, w: w, name: name, total: total, last: now, start: now}
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last, p.printed = now, true
		fmt.Fprintf(p.w, "%s: %s / %s (%d%%)\n", p.name, humanBytes(p.n), humanBytes(p.total), percent(p.n, p.total))
	}
	return n, err
}

// done prints a summary, only if the download was long enough to show progress.
func (p *progressReader) done() {
	if !p.printed {
		return
	}
	fmt.Fprintf(p.w, "%s: %s in %s\n", p.name, humanBytes(p.n), time.Since(p.start).Round(time.Millisecond))
}

func percent(n, total int64) int64 {
	if total <= 0 {
		return 100
	}
	return n * 100 / total
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
