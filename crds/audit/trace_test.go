package audit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A traced run sends its trace context with each /audit request, so that the policy
// server's spans sit under the run's; an untraced run sends none.
func TestServerEvaluatorTraceContext(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
		w.Write([]byte(`{"response":{"uid":"x","allowed":true}}`))
	}))
	srv.StartTLS()
	defer srv.Close()
	caPEM := certPEM(srv.Certificate().Raw)
	e := &serverEvaluator{namespace: "ns", o: ServerOptions{Timeout: 2 * time.Second, MaxConns: 4, ExtraCAs: [][]byte{caPEM}}, servers: map[string]*serverState{}}
	e.pool = mustPool(t, caPEM)
	e.servers["default"] = &serverState{base: srv.URL, http: e.newHTTPClient("example.com")}
	p := cap("pass", nil, nil)

	if v := e.Evaluate(context.Background(), p, []byte(`{}`)); v.Outcome != Pass {
		t.Fatalf("untraced: %+v", v)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "audit")
	if v := e.Evaluate(ctx, p, []byte(`{}`)); v.Outcome != Pass {
		t.Fatalf("traced: %+v", v)
	}
	span.End()
	mu.Lock()
	defer mu.Unlock()
	want := span.SpanContext().TraceID().String()
	if len(got) != 2 || got[0] != "" || !strings.Contains(got[1], want) || !strings.HasSuffix(got[1], "-01") {
		t.Fatalf("traceparent headers %q, want none then one of trace %s, sampled", got, want)
	}
}
