package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the audit's Prometheus metrics: the last full pass's results per policy and
// outcome, and how long passes take. Observe feeds them a pass's Summary; serving them is the
// caller's business (cmd/tollgate serves them on --metrics-addr).
type Metrics struct {
	results     *prometheus.GaugeVec
	duration    prometheus.Histogram
	lastSeconds prometheus.Gauge
	lastEnd     prometheus.Gauge
	passes      *prometheus.CounterVec
}

// NewMetrics registers the audit's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		results: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tollgate_audit_results",
			Help: "Results of the last full audit pass, by policy and result (pass, fail, error).",
		}, []string{"policy", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tollgate_audit_pass_duration_seconds",
			Help:    "Duration of full audit passes.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
		}),
		lastSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_audit_last_pass_duration_seconds",
			Help: "Duration of the last full audit pass.",
		}),
		lastEnd: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tollgate_audit_last_pass_timestamp_seconds",
			Help: "Unix time the last full audit pass ended.",
		}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tollgate_audit_passes_total",
			Help: "Full audit passes, by outcome (ok, failed: one of its own steps failed).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.results, m.duration, m.lastSeconds, m.lastEnd, m.passes)
	return m
}

// Observe records a full pass. A pass that was stopped (err is the context's) is not
// recorded; a pass with failures is, and counted as failed. The results gauge is replaced as a
// whole, so a policy that left the audit leaves the metric.
func (m *Metrics) Observe(s *Summary, err error) {
	if s == nil || s.End.IsZero() {
		return // the pass did not run to its end
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	m.passes.WithLabelValues(outcome).Inc()
	m.duration.Observe(s.Duration.Seconds())
	m.lastSeconds.Set(s.Duration.Seconds())
	m.lastEnd.Set(float64(s.End.UnixNano()) / 1e9)
	m.results.Reset()
	for _, id := range s.Audited {
		c := s.ByPolicy[id]
		if c == nil {
			c = &Counts{}
		}
		m.results.WithLabelValues(id, string(Pass)).Set(float64(c.Pass))
		m.results.WithLabelValues(id, string(Fail)).Set(float64(c.Fail))
		m.results.WithLabelValues(id, string(Error)).Set(float64(c.Error))
	}
}
