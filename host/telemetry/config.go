package telemetry

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Protocols of the OTLP exporters.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is what to export where: [FromEnv] reads it from the OTEL_*
// environment variables of the OpenTelemetry specification. The zero Config
// exports nothing.
type Config struct {
	// Traces exports spans (OTEL_TRACES_EXPORTER=otlp, or unset with an
	// OTLP endpoint given).
	Traces bool
	// TracesExport is where spans go.
	TracesExport Export
	// Sampler is OTEL_TRACES_SAMPLER (default parentbased_always_on) and
	// SamplerArg its OTEL_TRACES_SAMPLER_ARG (the ratio, default 1).
	Sampler    string
	SamplerArg float64
	// Propagators are OTEL_PROPAGATORS: tracecontext, baggage (the
	// default, both) or none.
	Propagators []string
	// QueueSize bounds the spans waiting for export (OTEL_BSP_MAX_QUEUE_SIZE,
	// default 2048); BatchSize is the most spans per export
	// (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512); ScheduleDelay the longest a span
	// waits for a batch to fill (OTEL_BSP_SCHEDULE_DELAY, 5 s).
	QueueSize, BatchSize int
	ScheduleDelay        time.Duration

	// Metrics pushes the metrics over OTLP (OTEL_METRICS_EXPORTER=otlp;
	// "prometheus", the default, and "none" leave them to /metrics alone).
	Metrics bool
	// MetricsExport is where metrics go.
	MetricsExport Export
	// MetricsInterval is OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
	MetricsInterval time.Duration

	// ServiceName is OTEL_SERVICE_NAME, else service.name of
	// OTEL_RESOURCE_ATTRIBUTES, else "tollgate".
	ServiceName string
	// Resource are OTEL_RESOURCE_ATTRIBUTES (service.name excepted), in order.
	Resource []Attribute
}

// Attribute is one key=value of OTEL_RESOURCE_ATTRIBUTES.
type Attribute struct{ Key, Value string }

// Export is one signal's OTLP exporter.
type Export struct {
	// Protocol is ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Endpoint is the URL the exporter sends to: for HTTP the signal's
	// path included (http://localhost:4318/v1/traces), for gRPC the
	// collector's address (http://localhost:4317). An http:// URL sends in
	// clear text, https:// over TLS (OTEL_EXPORTER_OTLP_CERTIFICATE and its
	// kin are read by the exporter itself).
	Endpoint string
	// Headers are sent with each export (authorization, tenant).
	Headers map[string]string
	// Timeout bounds one export, retries included (default 10 s).
	Timeout time.Duration
	// Certificate is a CA file for an https:// endpoint; ClientCertificate
	// and ClientKey a client certificate (OTEL_EXPORTER_OTLP_CERTIFICATE,
	// _CLIENT_CERTIFICATE, _CLIENT_KEY, or the signal's own).
	Certificate, ClientCertificate, ClientKey string
}

// Defaults of the OpenTelemetry specification (the service name excepted).
const (
	DefaultServiceName     = "tollgate"
	defaultQueueSize       = 2048
	defaultBatchSize       = 512
	defaultScheduleDelay   = 5 * time.Second
	defaultTimeout         = 10 * time.Second
	defaultMetricsInterval = 60 * time.Second
)

// FromEnv reads the configuration from the OTEL_* variables that lookup
// (os.LookupEnv) finds. An unsupported or malformed value is an error naming
// the variable and the value. Traces are exported only when asked for:
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint with OTEL_TRACES_EXPORTER
// unset (the specification's default exporter is otlp, which would send to
// localhost:4318 when nothing is configured). OTEL_SDK_DISABLED=true turns
// everything off.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	c := Config{Sampler: "parentbased_always_on", SamplerArg: 1, Propagators: []string{"tracecontext", "baggage"},
		QueueSize: defaultQueueSize, BatchSize: defaultBatchSize, ScheduleDelay: defaultScheduleDelay,
		MetricsInterval: defaultMetricsInterval, ServiceName: DefaultServiceName}
	if disabled := get("OTEL_SDK_DISABLED"); disabled != "" {
		off, err := strconv.ParseBool(disabled)
		if err != nil {
			return Config{}, fmt.Errorf("OTEL_SDK_DISABLED=%q: not a boolean", disabled)
		}
		if off {
			return Config{}, nil
		}
	}
	endpointGiven := get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	switch v := get("OTEL_TRACES_EXPORTER"); v {
	case "":
		c.Traces = endpointGiven
	case "otlp":
		c.Traces = true
	case "none":
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: tollgate exports traces with otlp, or none", v)
	}
	switch v := get("OTEL_METRICS_EXPORTER"); v {
	case "", "prometheus", "none":
	case "otlp":
		c.Metrics = true
	default:
		return Config{}, fmt.Errorf("OTEL_METRICS_EXPORTER=%q: tollgate exports metrics with otlp, prometheus (/metrics, the default) or none", v)
	}
	var err error
	if c.Traces {
		if c.TracesExport, err = exportFromEnv(get, "TRACES", "/v1/traces"); err != nil {
			return Config{}, err
		}
		if err := c.samplerFromEnv(get); err != nil {
			return Config{}, err
		}
		for _, b := range []struct {
			name string
			dst  *int
		}{{"OTEL_BSP_MAX_QUEUE_SIZE", &c.QueueSize}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.BatchSize}} {
			if v := get(b.name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return Config{}, fmt.Errorf("%s=%q: want a positive integer", b.name, v)
				}
				*b.dst = n
			}
		}
		if c.BatchSize > c.QueueSize {
			c.BatchSize = c.QueueSize
		}
		if c.ScheduleDelay, err = millis(get, "OTEL_BSP_SCHEDULE_DELAY", defaultScheduleDelay); err != nil {
			return Config{}, err
		}
	}
	if c.Metrics {
		if c.MetricsExport, err = exportFromEnv(get, "METRICS", "/v1/metrics"); err != nil {
			return Config{}, err
		}
		if c.MetricsInterval, err = millis(get, "OTEL_METRIC_EXPORT_INTERVAL", defaultMetricsInterval); err != nil {
			return Config{}, err
		}
	}
	if v := get("OTEL_PROPAGATORS"); v != "" {
		c.Propagators = nil
		for _, p := range strings.Split(v, ",") {
			switch p = strings.TrimSpace(p); p {
			case "tracecontext", "baggage":
				c.Propagators = append(c.Propagators, p)
			case "none", "":
			default:
				return Config{}, fmt.Errorf("OTEL_PROPAGATORS=%q: tollgate propagates tracecontext and baggage, not %q", v, p)
			}
		}
	}
	if c.Resource, err = resourceFromEnv(get("OTEL_RESOURCE_ATTRIBUTES")); err != nil {
		return Config{}, err
	}
	for i, a := range c.Resource {
		if a.Key == "service.name" {
			c.ServiceName = a.Value
			c.Resource = append(c.Resource[:i], c.Resource[i+1:]...)
			break
		}
	}
	if v := get("OTEL_SERVICE_NAME"); v != "" {
		c.ServiceName = v
	}
	return c, nil
}

// exportFromEnv reads the OTLP exporter of one signal: the signal's own
// variable (OTEL_EXPORTER_OTLP_TRACES_*) wins over the general one.
func exportFromEnv(get func(string) string, signal, path string) (Export, error) {
	either := func(name string) (string, string) {
		specific := "OTEL_EXPORTER_OTLP_" + signal + "_" + name
		if v := get(specific); v != "" {
			return specific, v
		}
		general := "OTEL_EXPORTER_OTLP_" + name
		return general, get(general)
	}
	e := Export{Protocol: ProtocolHTTP, Timeout: defaultTimeout}
	switch name, v := either("PROTOCOL"); v {
	case "":
	case ProtocolGRPC, ProtocolHTTP:
		e.Protocol = v
	default:
		return Export{}, fmt.Errorf("%s=%q: tollgate speaks OTLP over grpc or http/protobuf", name, v)
	}
	name, v := either("ENDPOINT")
	switch {
	case v == "" && e.Protocol == ProtocolGRPC:
		e.Endpoint = "http://localhost:4317"
	case v == "":
		e.Endpoint = "http://localhost:4318" + path
	default:
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Export{}, fmt.Errorf("%s=%q: want an http:// or https:// URL (http://collector:4318)", name, v)
		}
		e.Endpoint = v
		// the general endpoint is a base URL to which HTTP adds the signal's path
		if e.Protocol == ProtocolHTTP && !strings.Contains(name, signal) {
			e.Endpoint = strings.TrimSuffix(v, "/") + path
		}
	}
	if name, v := either("HEADERS"); v != "" {
		h, err := keyValues(v, true)
		if err != nil {
			return Export{}, fmt.Errorf("%s: %w", name, err)
		}
		e.Headers = map[string]string{}
		for _, kv := range h {
			e.Headers[kv.Key] = kv.Value
		}
	}
	_, e.Certificate = either("CERTIFICATE")
	_, e.ClientCertificate = either("CLIENT_CERTIFICATE")
	_, e.ClientKey = either("CLIENT_KEY")
	name, _ = either("TIMEOUT")
	var err error
	if e.Timeout, err = millis(get, name, defaultTimeout); err != nil {
		return Export{}, err
	}
	return e, nil
}

func (c *Config) samplerFromEnv(get func(string) string) error {
	if v := get("OTEL_TRACES_SAMPLER"); v != "" {
		switch v {
		case "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio":
			c.Sampler = v
		default:
			return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", v)
		}
	}
	if v := get("OTEL_TRACES_SAMPLER_ARG"); v != "" && strings.HasSuffix(c.Sampler, "traceidratio") {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", v)
		}
		c.SamplerArg = r
	}
	return nil
}

// millis reads a duration in milliseconds (the specification's unit).
func millis(get func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of milliseconds", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// resourceFromEnv parses OTEL_RESOURCE_ATTRIBUTES.
func resourceFromEnv(v string) ([]Attribute, error) {
	if v == "" {
		return nil, nil
	}
	kvs, err := keyValues(v, false)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return kvs, nil
}

// keyValues parses the specification's "k1=v1,k2=v2" lists, values
// percent-decoded. With secret (headers: tokens), an error names the entry
// by its position or key, never its value.
func keyValues(v string, secret bool) ([]Attribute, error) {
	var out []Attribute
	for i, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, val, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			if secret {
				return nil, fmt.Errorf("entry %d is not key=value", i+1)
			}
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			if secret {
				return nil, fmt.Errorf("the value of %s is not percent-encoded", k)
			}
			return nil, fmt.Errorf("the value of %s (%q) is not percent-encoded: %v", k, val, err)
		}
		out = append(out, Attribute{Key: k, Value: dec})
	}
	return out, nil
}
