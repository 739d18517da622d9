package telemetry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// httpExporter sends spans over OTLP/HTTP, writing the protobuf of an
// ExportTraceServiceRequest straight from the spans into buffers it keeps: the
// SDK's exporter builds the protobuf objects first (three allocations per
// attribute), which was two thirds of what tracing allocated per request
// (docs/benchmarks/tracing.md). One goroutine (the batcher's) calls it. A
// failed export is not retried: the batch is dropped and counted.
type httpExporter struct {
	encoder
	url     string
	headers map[string]string
	client  *http.Client
	stopped atomic.Bool
}

// encoder writes ExportTraceServiceRequests into buffers it reuses (one
// goroutine at a time).
type encoder struct {
	res              *resource.Resource
	req, scope, span []byte
}

// newHTTPExporter is the OTLP/HTTP exporter of e: for an https:// endpoint,
// e's CA file and client certificate when given, else the system's roots.
func newHTTPExporter(e Export, res *resource.Resource) (*httpExporter, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	var err error
	if tr.TLSClientConfig, err = tlsConfig(e); err != nil {
		return nil, err
	}
	return &httpExporter{encoder: encoder{res: res}, url: e.Endpoint, headers: e.Headers, client: &http.Client{Transport: tr, Timeout: e.Timeout}}, nil
}

// tlsConfig is e's TLS configuration: its CA file and client certificate
// when given (nil: the defaults, the system's roots).
func tlsConfig(e Export) (*tls.Config, error) {
	if e.Certificate == "" && e.ClientCertificate == "" && e.ClientKey == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.Certificate != "" {
		pem, err := os.ReadFile(e.Certificate)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CERTIFICATE=%q: no PEM certificate in it", e.Certificate)
		}
		c.RootCAs = pool
	}
	if e.ClientCertificate != "" || e.ClientKey != "" {
		pair, err := tls.LoadX509KeyPair(e.ClientCertificate, e.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _CLIENT_KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ExportSpans sends spans in one request.
func (e *httpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() {
		return errors.New("the exporter is shut down")
	}
	if len(spans) == 0 {
		return nil
	}
	body := e.encode(spans)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("OTLP collector answered HTTP %d: %.200s", resp.StatusCode, msg)
	}
	return nil
}

// Shutdown stops the exporter.
func (e *httpExporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}

// encode writes the ExportTraceServiceRequest of spans (one resource, the
// spans grouped by instrumentation scope in their order) into e.req.
func (e *encoder) encode(spans []sdktrace.ReadOnlySpan) []byte {
	// ResourceSpans: resource (1), scope_spans (2)...
	rs := e.req[:0]
	var res []byte
	for _, kv := range e.res.Attributes() {
		res = appendKeyValue(res, 1, kv)
	}
	rs = protowire.AppendTag(rs, 1, protowire.BytesType)
	rs = protowire.AppendBytes(rs, res)
	for i := 0; i < len(spans); {
		sc := spans[i].InstrumentationScope()
		j := i
		e.scope = appendScope(e.scope[:0], sc)
		for ; j < len(spans) && spans[j].InstrumentationScope() == sc; j++ {
			e.span = appendSpan(e.span[:0], spans[j])
			e.scope = protowire.AppendTag(e.scope, 2, protowire.BytesType)
			e.scope = protowire.AppendBytes(e.scope, e.span)
		}
		rs = protowire.AppendTag(rs, 2, protowire.BytesType)
		rs = protowire.AppendBytes(rs, e.scope)
		i = j
	}
	if e.res.SchemaURL() != "" {
		rs = protowire.AppendTag(rs, 3, protowire.BytesType)
		rs = protowire.AppendString(rs, e.res.SchemaURL())
	}
	// ExportTraceServiceRequest: resource_spans (1). rs is moved after its
	// header in place: the header is at most 6 bytes.
	n := len(rs)
	head := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), uint64(n))
	rs = append(rs, head...) // room
	copy(rs[len(head):], rs[:n])
	copy(rs, head)
	e.req = rs
	return rs
}

// appendScope writes the InstrumentationScope field (1) of a ScopeSpans.
func appendScope(b []byte, sc instrumentation.Scope) []byte {
	var s []byte
	if sc.Name != "" {
		s = protowire.AppendTag(s, 1, protowire.BytesType)
		s = protowire.AppendString(s, sc.Name)
	}
	if sc.Version != "" {
		s = protowire.AppendTag(s, 2, protowire.BytesType)
		s = protowire.AppendString(s, sc.Version)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, s)
	if sc.SchemaURL != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, sc.SchemaURL)
	}
	return b
}

// appendSpan writes a Span message's fields.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := sc.TraceState().String(); ts != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, ts)
	}
	if p := s.Parent(); p.SpanID().IsValid() {
		psid := p.SpanID()
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendString(b, s.Name())
	if k := s.SpanKind(); k != 0 { // the API's kinds are OTLP's numbers
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(k))
	}
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.StartTime().UnixNano()))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, 9, kv)
	}
	if n := s.DroppedAttributes(); n > 0 {
		b = protowire.AppendTag(b, 10, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	for _, ev := range s.Events() {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.Fixed64Type)
		m = protowire.AppendFixed64(m, uint64(ev.Time.UnixNano()))
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendString(m, ev.Name)
		for _, kv := range ev.Attributes {
			m = appendKeyValue(m, 3, kv)
		}
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendBytes(m, ltid[:])
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendBytes(m, lsid[:])
		for _, kv := range l.Attributes {
			m = appendKeyValue(m, 4, kv)
		}
		b = protowire.AppendTag(b, 13, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	// Status: message (2), code (3); OTLP's codes are unset 0, ok 1, error 2
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		var m []byte
		if st.Description != "" {
			m = protowire.AppendTag(m, 2, protowire.BytesType)
			m = protowire.AppendString(m, st.Description)
		}
		code := uint64(0)
		switch st.Code {
		case codes.Ok:
			code = 1
		case codes.Error:
			code = 2
		}
		if code != 0 {
			m = protowire.AppendTag(m, 3, protowire.VarintType)
			m = protowire.AppendVarint(m, code)
		}
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	// flags (16): the W3C trace flags, and that the parent's remoteness is known (bit 8), remote (bit 9)
	flags := uint32(sc.TraceFlags()) | 1<<8
	if s.Parent().IsRemote() {
		flags |= 1 << 9
	}
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, flags)
	return b
}

// appendKeyValue writes kv as field num (a KeyValue: key 1, AnyValue 2), its
// size computed, not buffered.
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	key := string(kv.Key)
	var any int // the AnyValue's size
	switch kv.Value.Type() {
	case attribute.BOOL:
		any = 2
	case attribute.INT64:
		any = 1 + protowire.SizeVarint(uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		any = 1 + 8
	default: // strings, and the slices as their text
		n := len(kv.Value.Emit())
		any = 1 + protowire.SizeBytes(n)
	}
	size := 1 + protowire.SizeBytes(len(key)) + 1 + protowire.SizeBytes(any)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(any))
	switch kv.Value.Type() {
	case attribute.BOOL:
		v := uint64(0)
		if kv.Value.AsBool() {
			v = 1
		}
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, v)
	case attribute.INT64:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(kv.Value.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(kv.Value.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, kv.Value.AsString())
	default:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, kv.Value.Emit())
	}
	return b
}
