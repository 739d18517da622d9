package telemetry

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Nothing is exported unless asked for: no variable, an exporter of none,
// OTEL_SDK_DISABLED, or metrics left to /metrics.
func TestFromEnvOffUnlessConfigured(t *testing.T) {
	for _, e := range [][]string{
		nil,
		{"OTEL_SERVICE_NAME", "x", "OTEL_TRACES_SAMPLER", "always_on"},
		{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
		{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"},
		{"OTEL_METRICS_EXPORTER", "prometheus"},
	} {
		c, err := FromEnv(env(e...))
		if err != nil || c.Traces || c.Metrics {
			t.Errorf("%v: traces %v, metrics %v, error %v; want both off", e, c.Traces, c.Metrics, err)
		}
	}
}

func TestFromEnvEndpoints(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want Export
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "otlp"}, Export{Protocol: ProtocolHTTP, Endpoint: "http://localhost:4318/v1/traces", Timeout: 10 * time.Second}},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, Export{Protocol: ProtocolGRPC, Endpoint: "http://localhost:4317", Timeout: 10 * time.Second}},
		// an endpoint alone turns traces on; the general endpoint is a base URL for HTTP
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.obs:4318/"}, Export{Protocol: ProtocolHTTP, Endpoint: "https://collector.obs:4318/v1/traces", Timeout: 10 * time.Second}},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, Export{Protocol: ProtocolGRPC, Endpoint: "http://c:4317", Timeout: 10 * time.Second}},
		// the signal's own variables win, and its endpoint is used as it is
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9999/custom",
			"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf",
			"OTEL_EXPORTER_OTLP_HEADERS", "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t0k,x-tenant=acme",
			"OTEL_EXPORTER_OTLP_TIMEOUT", "3000", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500"},
			Export{Protocol: ProtocolHTTP, Endpoint: "http://t:9999/custom", Headers: map[string]string{"authorization": "Bearer t0k", "x-tenant": "acme"},
				Timeout: 1500 * time.Millisecond}},
	} {
		c, err := FromEnv(env(tt.env...))
		if err != nil {
			t.Fatalf("%v: %v", tt.env, err)
		}
		if !c.Traces || !reflect.DeepEqual(c.TracesExport, tt.want) {
			t.Errorf("%v:\n got traces=%v %+v\nwant %+v", tt.env, c.Traces, c.TracesExport, tt.want)
		}
	}
}

func TestFromEnvDefaultsAndResource(t *testing.T) {
	c, err := FromEnv(env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,k8s.namespace.name=kubewarden,team=a%2Cb"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sampler != "parentbased_always_on" || c.SamplerArg != 1 || c.QueueSize != 2048 || c.BatchSize != 512 || c.ScheduleDelay != 5*time.Second ||
		!reflect.DeepEqual(c.Propagators, []string{"tracecontext", "baggage"}) {
		t.Errorf("defaults: %+v", c)
	}
	if c.ServiceName != "from-attrs" || !reflect.DeepEqual(c.Resource, []Attribute{{"k8s.namespace.name", "kubewarden"}, {"team", "a,b"}}) {
		t.Errorf("service %q, resource %v", c.ServiceName, c.Resource)
	}
	c, _ = FromEnv(env("OTEL_TRACES_EXPORTER", "otlp", "OTEL_SERVICE_NAME", "svc", "OTEL_RESOURCE_ATTRIBUTES", "service.name=other",
		"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25", "OTEL_BSP_MAX_QUEUE_SIZE", "100",
		"OTEL_BSP_SCHEDULE_DELAY", "200", "OTEL_PROPAGATORS", "tracecontext"))
	if c.ServiceName != "svc" || c.Sampler != "parentbased_traceidratio" || c.SamplerArg != 0.25 || c.QueueSize != 100 || c.BatchSize != 100 ||
		c.ScheduleDelay != 200*time.Millisecond || !reflect.DeepEqual(c.Propagators, []string{"tracecontext"}) {
		t.Errorf("explicit: %+v", c)
	}
	c, err = FromEnv(env("OTEL_METRICS_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4318/v1/metrics", "OTEL_METRIC_EXPORT_INTERVAL", "1000"))
	if err != nil || c.Traces || !c.Metrics || c.MetricsExport.Endpoint != "http://m:4318/v1/metrics" || c.MetricsInterval != time.Second {
		t.Errorf("metrics: %+v, %v", c, err)
	}
}

// A bad value is an error naming the variable and the value, except a
// header's value, which may be a token.
func TestFromEnvErrors(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"OTEL_TRACES_EXPORTER", "zipkin"}, `OTEL_TRACES_EXPORTER="zipkin": tollgate exports traces with otlp, or none`},
		{[]string{"OTEL_METRICS_EXPORTER", "console"}, `OTEL_METRICS_EXPORTER="console"`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": tollgate speaks OTLP over grpc or http/protobuf`},
		{[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4317"}, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="collector:4317": want an http:// or https:// URL`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_TRACES_SAMPLER", "sometimes"}, `OTEL_TRACES_SAMPLER="sometimes"`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"}, `OTEL_TRACES_SAMPLER_ARG="2": want a ratio between 0 and 1`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_BSP_MAX_QUEUE_SIZE", "-1"}, `OTEL_BSP_MAX_QUEUE_SIZE="-1": want a positive integer`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT", "10s"}, `OTEL_EXPORTER_OTLP_TIMEOUT="10s": want a positive number of milliseconds`},
		{[]string{"OTEL_PROPAGATORS", "b3"}, `OTEL_PROPAGATORS="b3": tollgate propagates tracecontext and baggage, not "b3"`},
		{[]string{"OTEL_SDK_DISABLED", "maybe"}, `OTEL_SDK_DISABLED="maybe": not a boolean`},
		{[]string{"OTEL_RESOURCE_ATTRIBUTES", "team"}, `OTEL_RESOURCE_ATTRIBUTES: "team" is not key=value`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer abc,s3cret"}, `OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value`},
		{[]string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_HEADERS", "authorization=s3cret%zz"}, `OTEL_EXPORTER_OTLP_HEADERS: the value of authorization is not percent-encoded`},
	} {
		_, err := FromEnv(env(tt.env...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows a header's value: %v", tt.env, err)
		}
	}
}
