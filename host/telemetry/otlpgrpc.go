package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// grpcExporter sends spans to the collector's TraceService over gRPC, the
// request's protobuf written by encoder (see httpExporter) and passed to gRPC
// as it is. A failed export is not retried: the batch is dropped and counted.
type grpcExporter struct {
	encoder
	conn    *grpc.ClientConn
	md      metadata.MD
	stopped atomic.Bool
}

// traceExportMethod is the OTLP trace service's Export.
const traceExportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// newGRPCExporter connects (lazily, as gRPC does) to e's endpoint: an http://
// URL in clear text, https:// over TLS.
func newGRPCExporter(e Export, enc encoder) (*grpcExporter, error) {
	u, err := url.Parse(e.Endpoint)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		c, err := tlsConfig(e)
		if err != nil {
			return nil, err
		}
		if c == nil {
			c = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(c)
	}
	conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, fmt.Errorf("OTLP gRPC endpoint %s: %w", e.Endpoint, err)
	}
	return &grpcExporter{encoder: enc, conn: conn, md: metadata.New(e.Headers)}, nil
}

// ExportSpans sends spans in one call.
func (e *grpcExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() {
		return errors.New("the exporter is shut down")
	}
	if len(spans) == 0 {
		return nil
	}
	if len(e.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, e.md)
	}
	req := rawMessage(e.encode(spans))
	var resp rawMessage
	return e.conn.Invoke(ctx, traceExportMethod, &req, &resp)
}

// Shutdown closes the connection.
func (e *grpcExporter) Shutdown(context.Context) error {
	if e.stopped.Swap(true) {
		return nil
	}
	return e.conn.Close()
}

// rawMessage is a message already in its wire form.
type rawMessage []byte

// rawCodec passes rawMessages through; its name is proto's, the content
// subtype collectors expect.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not a raw message", v)
	}
	return *m, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not a raw message", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
