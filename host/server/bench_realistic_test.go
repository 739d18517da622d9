package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/host/admission"
	"github.com/tollgate-dev/tollgate/host/config"
	"github.com/tollgate-dev/tollgate/internal/testfixture"
)

// realisticPod is test/testdata/reviews/pod.json compacted, as the apiserver
// sends it (capabilities-drop mutates it).
func realisticPod(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(testfixture.Path("test/testdata/reviews/pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		t.Fatal(err)
	}
	return c.Bytes()
}

// processCPU is the user+system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkServeRealistic is `serve` with capabilities-drop on the 5 KB Pod
// of test/testdata/reviews: "handler" drives the webhook handler without the
// network, "https" sends over real HTTPS (client and server in this
// process). cpu-us/op is the process's CPU time per request (the load of
// the machine does not inflate it the way it does wall time); the guest's
// share shows in a CPU profile (-cpuprofile) under wasm/wazero frames.
func BenchmarkServeRealistic(b *testing.B) {
	body := realisticPod(b)
	h := start(b, harnessOpts{policies: reloadPolicies(b, "owner"), options: func(o *config.Options) { o.Workers = 2 }})
	check := func(resp []byte) {
		if !bytes.Contains(resp, []byte(`"patchType":"JSONPatch"`)) {
			panic(fmt.Sprintf("not a mutation: %.300s", resp))
		}
	}
	b.Run("handler", func(b *testing.B) { benchHandler(b, h, "/validate/caps", body, nil, check) })
	b.Run("policy", func(b *testing.B) { // the policy alone: guest, payload, answer and diff
		req, err := admission.ParseReview(body)
		if err != nil {
			b.Fatal(err)
		}
		set := h.srv.acquire()
		defer set.release()
		eval := set.entries["caps"].unit.eval
		b.ReportAllocs()
		cpu := processCPU()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				res, err := eval.Evaluate(context.Background(), req)
				if err != nil || len(res.Patch) == 0 {
					panic(fmt.Sprintf("not a mutation: %v", err))
				}
			}
		})
		b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
	})
	b.Run("https", func(b *testing.B) { benchHTTPS(b, h, "/validate/caps", body, nil, check) })
}

// benchHandler drives h's webhook handler, without the network, from
// parallel goroutines (header as in benchHTTPS), checking each answer, and
// reports the process's CPU time per request.
func benchHandler(b *testing.B, h *harness, path string, body []byte, header func(http.Header), check func([]byte)) {
	handler := h.srv.webhookHandler()
	b.ReportAllocs()
	cpu := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &bufferWriter{h: http.Header{}}
		for pb.Next() {
			w.reset()
			r, _ := http.NewRequest("POST", path, bytes.NewReader(body))
			if header != nil {
				header(r.Header)
			}
			handler.ServeHTTP(w, r)
			if w.code != 200 {
				panic(fmt.Sprintf("HTTP %d: %s", w.code, w.buf.Bytes()))
			}
			check(w.buf.Bytes())
		}
	})
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}

// benchHTTPS posts body to path over h's HTTPS client from parallel
// goroutines (header, when set, adds to each request), checking each answer,
// and reports the process's CPU time per request.
func benchHTTPS(b *testing.B, h *harness, path string, body []byte, header func(http.Header), check func([]byte)) {
	url := h.base + path
	var errs atomic.Int64
	b.ReportAllocs()
	cpu := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if header != nil {
				header(req.Header)
			}
			resp, err := h.client.Do(req)
			if err != nil {
				errs.Add(1)
				continue
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				panic(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, out))
			}
			check(out)
		}
	})
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d requests failed", n)
	}
}

// bufferWriter is an http.ResponseWriter keeping the body.
type bufferWriter struct {
	h    http.Header
	code int
	buf  bytes.Buffer
}

func (w *bufferWriter) reset() {
	w.code = 0
	w.buf.Reset()
	clear(w.h)
}
func (w *bufferWriter) Header() http.Header { return w.h }
func (w *bufferWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	return w.buf.Write(b)
}
func (w *bufferWriter) WriteHeader(c int) { w.code = c }
