package capabilities

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// metrics are the capability metrics; Host is a prometheus.Collector of them.
type metrics struct {
	calls     *prometheus.CounterVec
	errors    *prometheus.CounterVec
	denials   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	cacheHits *prometheus.CounterVec
	cacheSize *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_capability_calls_total",
			Help: "Host calls by policy, capability (namespace/operation, or unknown) and outcome (success, error, denied, bad_request).",
		}, []string{"policy", "capability", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_capability_errors_total",
			Help: "Host calls answered with an error (denials and bad payloads included), by policy and capability.",
		}, []string{"policy", "capability"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_capability_denials_total",
			Help: "Host calls refused by the policy's allow-lists (hostCapabilities, contextAwareResources).",
		}, []string{"policy", "capability"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tollgate_capability_call_duration_seconds",
			Help:    "Time to answer a host call, by policy and capability.",
			Buckets: []float64{.000005, .00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"policy", "capability"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_capability_cache_requests_total",
			Help: "Cacheable host calls by capability and result: hit (answered from a cache), miss (direct call; the cache is warming up, over its cap, or lacks the object) or bypass (disable_cache, or a field selector a cache cannot answer).",
		}, []string{"capability", "result"}),
		cacheSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_capability_cache_objects",
			Help: "Objects held by the Kubernetes cache of each resource (apiVersion/kind); -1 once the cache gave up at its cap.",
		}, []string{"resource"}),
	}
}

func (m *metrics) observe(policy, capability, outcome string, d time.Duration) {
	m.calls.WithLabelValues(policy, capability, outcome).Inc()
	if outcome != "success" {
		m.errors.WithLabelValues(policy, capability).Inc()
	}
	m.duration.WithLabelValues(policy, capability).Observe(d.Seconds())
}

func (m *metrics) denied(policy, capability string) {
	m.denials.WithLabelValues(policy, capability).Inc()
}

// cache counts a cacheable call's result (hit, miss, bypass) and marks the
// call's span with it when the call is traced.
func (m *metrics) cache(ctx context.Context, capability, result string) {
	m.cacheHits.WithLabelValues(capability, result).Inc()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("tollgate.host_call.cache", result))
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.errors, m.denials, m.duration, m.cacheHits, m.cacheSize}
}

// Describe implements prometheus.Collector.
func (h *Host) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range h.m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	if h.o.Kubernetes != nil {
		h.o.Kubernetes.updateSizes()
	}
	for _, c := range h.m.collectors() {
		c.Collect(ch)
	}
}
