package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
)

// With OTEL_METRICS_EXPORTER=otlp, a Prometheus registry's counters and
// histograms reach a real OTLP receiver under their own names and labels,
// over gRPC and HTTP/protobuf, with the resource.
func TestPushMetrics(t *testing.T) {
	for _, tt := range []struct {
		protocol string
		start    func(testing.TB) *otlptest.Receiver
	}{{ProtocolGRPC, otlptest.StartGRPC}, {ProtocolHTTP, otlptest.StartHTTP}} {
		t.Run(tt.protocol, func(t *testing.T) {
			rcv := tt.start(t)
			cfg, err := FromEnv(env("OTEL_METRICS_EXPORTER", "otlp", "OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_PROTOCOL", tt.protocol,
				"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Base, "OTEL_METRIC_EXPORT_INTERVAL", "100"))
			if err != nil {
				t.Fatal(err)
			}
			tel, err := New(context.Background(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tel.Tracer() != nil {
				t.Fatal("metrics alone turned traces on")
			}
			reg := prometheus.NewRegistry()
			c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_test_evaluations_total", Help: "h"}, []string{"policy"})
			hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tollgate_test_duration_seconds", Help: "h"})
			reg.MustRegister(c, hist)
			c.WithLabelValues("a").Add(3)
			hist.Observe(0.5)
			tel.PushMetrics(reg)
			m := rcv.WaitForMetric(t, 30*time.Second, "tollgate_test_evaluations_total", map[string]any{"policy": "a"}, func(v float64) bool { return v == 3 })
			if m.Resource["service.name"] != "tollgate" {
				t.Errorf("resource %v", m.Resource)
			}
			rcv.WaitForMetric(t, 30*time.Second, "tollgate_test_duration_seconds", nil, func(v float64) bool { return v == 1 })
			// the last values go at shutdown
			c.WithLabelValues("a").Add(4)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			rcv.WaitForMetric(t, 5*time.Second, "tollgate_test_evaluations_total", map[string]any{"policy": "a"}, func(v float64) bool { return v == 7 })
		})
	}
}
