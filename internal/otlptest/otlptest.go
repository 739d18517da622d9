// Package otlptest is an OTLP receiver for tests: the OpenTelemetry
// collector's trace and metrics services over gRPC, or its OTLP/HTTP protobuf
// endpoints (/v1/traces, /v1/metrics),
// on loopback, built from the protocol's own packages
// (go.opentelemetry.io/proto/otlp). It keeps the spans it receives, can stall
// (accept and never answer, as an overloaded collector does) and can be shut
// down to play a collector that is gone.
//
// It must NOT know about tollgate's packages: it is what a collector sees.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, flattened.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attributes                    map[string]any
	// Resource are the attributes of the span's resource (service.name...).
	Resource map[string]any
	// Scope is the instrumentation scope's name.
	Scope      string
	StatusCode tracepb.Status_StatusCode
	Start, End time.Time
	// Links are the span's links to other spans.
	Links []Link
}

// Link is a received span's link to another span.
type Link struct {
	TraceID, SpanID string // hex
	Attributes      map[string]any
}

// Point is one data point of a received metric: a sum's or gauge's value,
// a histogram's count.
type Point struct {
	Attributes map[string]any
	Value      float64
}

// Metric is a received metric, flattened.
type Metric struct {
	Name     string
	Resource map[string]any
	Points   []Point
}

// Receiver is a running OTLP receiver of traces and metrics.
type Receiver struct {
	// Endpoint is what a trace exporter is given: http://127.0.0.1:PORT
	// for gRPC, http://127.0.0.1:PORT/v1/traces for HTTP (Base for both
	// signals: OTEL_EXPORTER_OTLP_ENDPOINT).
	Endpoint string
	// Base is http://127.0.0.1:PORT.
	Base string

	mu      sync.Mutex
	spans   []Span
	metrics []Metric
	exports int
	changed chan struct{} // closed and replaced on each export
	stalled chan struct{} // non-nil while stalled: closed by Unstall
	closeFn func()
	addr    string
	discard bool
}

func newReceiver() *Receiver { return &Receiver{changed: make(chan struct{})} }

// StartGRPC starts the collector's trace and metrics services over gRPC on
// loopback; the test's end stops it.
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	r, err := ListenGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// ListenGRPC is StartGRPC on addr for a caller that is not a test (a
// TestMain): it stops at Close.
func ListenGRPC(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := newReceiver()
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, &grpcService{r: r})
	collectormetrics.RegisterMetricsServiceServer(gs, &grpcMetrics{r: r})
	go gs.Serve(ln)
	r.addr = ln.Addr().String()
	r.Endpoint = "http://" + r.addr
	r.Base = r.Endpoint
	r.closeFn = func() { r.Unstall(); gs.Stop() }
	return r, nil
}

type grpcService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (g *grpcService) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	if err := g.r.wait(ctx); err != nil {
		return nil, err
	}
	g.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

type grpcMetrics struct {
	collectormetrics.UnimplementedMetricsServiceServer
	r *Receiver
}

func (g *grpcMetrics) Export(ctx context.Context, req *collectormetrics.ExportMetricsServiceRequest) (*collectormetrics.ExportMetricsServiceResponse, error) {
	if err := g.r.wait(ctx); err != nil {
		return nil, err
	}
	g.r.addMetrics(req)
	return &collectormetrics.ExportMetricsServiceResponse{}, nil
}

// StartHTTP starts an OTLP/HTTP endpoint (POST /v1/traces,
// application/x-protobuf) on loopback; the test's end stops it.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := newReceiver()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		if err := r.wait(req.Context()); err != nil {
			return
		}
		r.mu.Lock()
		discard := r.discard
		r.mu.Unlock()
		if discard { // a benchmark's sink: read, count, do not decode
			io.Copy(io.Discard, req.Body)
			r.add(&collectortrace.ExportTraceServiceRequest{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		var m collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&m)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		if err := r.wait(req.Context()); err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m collectormetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.addMetrics(&m)
		out, _ := proto.Marshal(&collectormetrics.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	})
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	r.addr = ln.Addr().String()
	r.Base = "http://" + r.addr
	r.Endpoint = r.Base + "/v1/traces"
	r.closeFn = func() { r.Unstall(); hs.Close() }
	t.Cleanup(r.Close)
	return r
}

// Addr is the receiver's host:port.
func (r *Receiver) Addr() string { return r.addr }

// Close stops the receiver: from then on exports fail to connect.
func (r *Receiver) Close() {
	r.mu.Lock()
	f := r.closeFn
	r.closeFn = nil
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// Stall makes every export wait, unanswered, until Unstall or Close (or the
// exporter gives up).
func (r *Receiver) Stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled == nil {
		r.stalled = make(chan struct{})
	}
}

// Unstall answers the stalled exports and the next ones.
func (r *Receiver) Unstall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalled != nil {
		close(r.stalled)
		r.stalled = nil
	}
}

func (r *Receiver) wait(ctx context.Context) error {
	r.mu.Lock()
	st := r.stalled
	r.mu.Unlock()
	if st == nil {
		return nil
	}
	select {
	case <-st:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Attributes: attrs(s.GetAttributes()), Resource: res, Scope: ss.GetScope().GetName(),
					StatusCode: s.GetStatus().GetCode(),
					Start:      time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Links: links(s.GetLinks())})
			}
		}
	}
	r.mu.Lock()
	if !r.discard {
		r.spans = append(r.spans, got...)
	}
	r.exports++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Discard stops keeping the spans received (benchmarks): Exports still
// counts, and the HTTP receiver no longer decodes what it reads.
func (r *Receiver) Discard() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.discard = true
	r.spans = nil
}

func (r *Receiver) addMetrics(req *collectormetrics.ExportMetricsServiceRequest) {
	var got []Metric
	for _, rm := range req.GetResourceMetrics() {
		res := attrs(rm.GetResource().GetAttributes())
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				out := Metric{Name: m.GetName(), Resource: res}
				var nums []*metricspb.NumberDataPoint
				switch {
				case m.GetSum() != nil:
					nums = m.GetSum().GetDataPoints()
				case m.GetGauge() != nil:
					nums = m.GetGauge().GetDataPoints()
				}
				for _, p := range nums {
					v := p.GetAsDouble()
					if _, ok := p.GetValue().(*metricspb.NumberDataPoint_AsInt); ok {
						v = float64(p.GetAsInt())
					}
					out.Points = append(out.Points, Point{Attributes: attrs(p.GetAttributes()), Value: v})
				}
				for _, p := range m.GetHistogram().GetDataPoints() {
					out.Points = append(out.Points, Point{Attributes: attrs(p.GetAttributes()), Value: float64(p.GetCount())})
				}
				got = append(got, out)
			}
		}
	}
	r.mu.Lock()
	r.metrics = append(r.metrics, got...)
	r.exports++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// WaitForMetric waits, up to timeout, for a received point of metric name
// whose attributes include want's and whose value satisfies ok; it fails
// the test at the timeout.
func (r *Receiver) WaitForMetric(t testing.TB, timeout time.Duration, name string, want map[string]any, ok func(float64) bool) Metric {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		ms, changed := append([]Metric(nil), r.metrics...), r.changed
		r.mu.Unlock()
		for _, m := range ms {
			if m.Name != name {
				continue
			}
		points:
			for _, p := range m.Points {
				for k, v := range want {
					if p.Attributes[k] != v {
						continue points
					}
				}
				if ok(p.Value) {
					return m
				}
			}
		}
		select {
		case <-changed:
		case <-deadline:
			names := map[string]bool{}
			for _, m := range ms {
				names[m.Name] = true
			}
			t.Fatalf("after %v, the receiver has no point of %s with %v that fits (%d metrics received: %v)", timeout, name, want, len(ms), names)
		}
	}
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Exports is the number of export requests answered.
func (r *Receiver) Exports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports
}

// WaitFor waits until ok holds for the spans received, up to timeout, and
// returns them; it fails the test at the timeout.
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, what string, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		spans, changed := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-changed:
		case <-deadline:
			for _, s := range spans {
				t.Logf("received: %s trace=%s span=%s parent=%s %v", s.Name, s.TraceID, s.SpanID, s.ParentSpanID, s.Attributes)
			}
			t.Fatalf("after %v, the receiver has not got %s (%d spans)", timeout, what, len(spans))
		}
	}
}

// attrs flattens OTLP attributes (strings, booleans, integers, doubles).
func links(ls []*tracepb.Span_Link) []Link {
	var out []Link
	for _, l := range ls {
		out = append(out, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId()),
			Attributes: attrs(l.GetAttributes())})
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = x.BoolValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = x.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = x.DoubleValue
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
