package telemetry

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// metricExporter is the OTLP metric exporter of e.
func metricExporter(ctx context.Context, e Export) (sdkmetric.Exporter, error) {
	var (
		exp sdkmetric.Exporter
		err error
	)
	if e.Protocol == ProtocolGRPC {
		opts := []otlpmetricgrpc.Option{otlpmetricgrpc.WithEndpointURL(e.Endpoint), otlpmetricgrpc.WithTimeout(e.Timeout)}
		if len(e.Headers) > 0 {
			opts = append(opts, otlpmetricgrpc.WithHeaders(e.Headers))
		}
		exp, err = otlpmetricgrpc.New(ctx, opts...)
	} else {
		opts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpointURL(e.Endpoint), otlpmetrichttp.WithTimeout(e.Timeout)}
		if len(e.Headers) > 0 {
			opts = append(opts, otlpmetrichttp.WithHeaders(e.Headers))
		}
		exp, err = otlpmetrichttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP metric exporter (%s %s): %w", e.Protocol, e.Endpoint, err)
	}
	return exp, nil
}

// PushMetrics pushes what g gathers (the /metrics registry: the same
// instruments, names and labels) over OTLP every OTEL_METRIC_EXPORT_INTERVAL,
// when the configuration asks for it (OTEL_METRICS_EXPORTER=otlp); else it
// does nothing. Call it once. The push runs on a goroutine of its own, and a
// last one is sent at Shutdown.
func (t *Telemetry) PushMetrics(g prometheus.Gatherer) {
	if t == nil || t.metricExp == nil {
		return
	}
	reader := sdkmetric.NewPeriodicReader(t.metricExp, sdkmetric.WithInterval(t.cfg.MetricsInterval),
		sdkmetric.WithTimeout(t.cfg.MetricsExport.Timeout), sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(g))))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(t.res))
	t.metricExp = nil
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.log.Info("pushing metrics over OTLP", "protocol", t.cfg.MetricsExport.Protocol, "endpoint", t.cfg.MetricsExport.Endpoint,
		"interval", t.cfg.MetricsInterval)
}
