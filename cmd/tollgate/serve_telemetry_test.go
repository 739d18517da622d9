package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/otlptest"
)

// `tollgate serve` reads the OTEL_* variables: the demo's requests are traced
// to a real OTLP/HTTP receiver, the spans queued at exit are sent before the
// process ends, and with OTEL_METRICS_EXPORTER=otlp the /metrics instruments
// are pushed too (the last values at exit).
func TestServeTracesFromEnv(t *testing.T) {
	rcv := otlptest.StartHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.Endpoint)
	t.Setenv("OTEL_SERVICE_NAME", "tollgate-test")
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", rcv.Base+"/v1/metrics")
	dir := t.TempDir()
	cmd := newServeCmd()
	var out, errOut lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--state-dir=" + dir + "/tls", "--cache-dir=" + dir + "/cache", "--demo", "--demo-exit"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	// the exit flushed the queue (its 5 s schedule delay had not passed)
	spans := rcv.WaitFor(t, 10*time.Second, "the demo's server spans", func(s []otlptest.Span) bool { return countServer(s) > 0 })
	for _, s := range spans {
		if s.Resource["service.name"] != "tollgate-test" || s.Resource["service.version"] != version {
			t.Fatalf("resource %v", s.Resource)
		}
	}
	rcv.WaitForMetric(t, 10*time.Second, "tollgate_server_requests_total", map[string]any{"endpoint": "validate", "code": "200"},
		func(v float64) bool { return v > 0 })
}

func countServer(spans []otlptest.Span) int {
	n := 0
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "POST /validate") {
			n++
		}
	}
	return n
}

// A bad OTEL_* value stops serve at once with the variable and the value.
func TestServeTelemetryEnvError(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	cmd := newServeCmd()
	var out, errOut lockedBuffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	dir := t.TempDir()
	cmd.SetArgs([]string{"--addr=127.0.0.1", "--port=0", "--readiness-probe-port=0", "--state-dir=" + dir + "/tls", "--cache-dir=" + dir + "/cache"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`) {
		t.Fatalf("error %v", err)
	}
}
