package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus metrics, registered on a registry of
// its own (so several servers can live in one process, as in tests).
type metrics struct {
	reg *prometheus.Registry

	evaluations     *prometheus.CounterVec
	evalDuration    *prometheus.HistogramVec
	evalErrors      *prometheus.CounterVec
	requests        *prometheus.CounterVec
	inFlight        prometheus.Gauge
	queued          prometheus.Gauge
	overloaded      prometheus.Counter
	policyLoaded    *prometheus.GaugeVec
	policyStale     *prometheus.GaugeVec
	reloads         *prometheus.CounterVec
	lastReload      prometheus.Gauge
	generation      prometheus.Gauge
	loadDuration    prometheus.Histogram
	policiesLoading prometheus.Gauge
	configRejected  prometheus.Gauge
	idleConnsClosed prometheus.Counter
	certReloads     *prometheus.CounterVec
	certNotAfter    prometheus.Gauge
	unitsLoaded     *prometheus.CounterVec
	acceptedByNsTot prometheus.Counter
	policyQueued    *prometheus.GaugeVec
	policyRunning   *prometheus.GaugeVec
	policyRejected  *prometheus.CounterVec
	policyCooldowns *prometheus.CounterVec
	policyCooldown  *prometheus.GaugeVec
	limits          *prometheus.GaugeVec
	bodyBytes       prometheus.Gauge
	// shadow evaluation (shadow.go)
	shadowEvaluations *prometheus.CounterVec
	shadowDivergences *prometheus.CounterVec
	shadowDropped     *prometheus.CounterVec
	h2Parked          prometheus.Gauge
	// extra are the caller's collectors (Options.Metrics), registered by
	// addCollector; dropPolicy covers their policy series too.
	extra []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }

	m.evaluations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_evaluations_total",
		Help: "Admission evaluations by policy, mode, operation and outcome (after admission semantics).",
	}, []string{"policy", "mode", "operation", "accepted", "mutated"})
	f(m.evaluations)
	m.evalDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tollgate_policy_evaluation_duration_seconds",
		Help:    "Time to evaluate a policy or group, queueing excluded.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"policy", "mode", "operation", "accepted", "mutated"})
	f(m.evalDuration)
	m.evalErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_evaluation_errors_total",
		Help: "Evaluations that failed (timeout, trap, memory, invalid_response, other).",
	}, []string{"policy", "reason"})
	f(m.evalErrors)
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_server_requests_total",
		Help: "Webhook HTTP requests by endpoint and status code.",
	}, []string{"endpoint", "code"})
	f(m.requests)
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_server_requests_in_flight",
		Help: "Webhook requests being evaluated now.",
	})
	f(m.inFlight)
	m.queued = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_server_requests_queued",
		Help: "Webhook requests waiting for a worker.",
	})
	f(m.queued)
	m.overloaded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_server_overload_rejections_total",
		Help: "Requests answered 503 because the queue was full or the wait for a worker expired.",
	})
	f(m.overloaded)
	m.policyLoaded = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_loaded",
		Help: "1 when the policy (or group) of the serving configuration is loaded, 0 when it failed.",
	}, []string{"policy"})
	f(m.policyLoaded)
	m.policyStale = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_stale",
		Help: "1 when the policy's version in the serving configuration failed to load and its previous version keeps serving, else 0.",
	}, []string{"policy"})
	f(m.policyStale)
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_config_reloads_total",
		Help: "Configuration reloads by outcome: success (adopted, every policy loaded), partial (adopted, some policies failed or stale), failure (rejected whole), unchanged.",
	}, []string{"outcome"})
	f(m.reloads)
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last configuration that was adopted and swapped in (success or partial).",
	})
	f(m.lastReload)
	m.generation = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_config_generation",
		Help: "Generation of the serving configuration (1 at start, +1 per adopted reload).",
	})
	f(m.generation)
	m.loadDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tollgate_config_load_duration_seconds",
		Help:    "Time to build a policy set (fetch, compile, validate settings).",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	f(m.loadDuration)
	m.policiesLoading = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_config_policies_loading",
		Help: "Policies (and groups) of the start-up configuration whose load has not ended: the count /readiness reports while it answers 503; 0 once each one loaded or failed.",
	})
	f(m.policiesLoading)
	m.configRejected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_config_last_reload_rejected",
		Help: "1 while the newest read of the configuration was rejected (empty, unparseable, invalid) and the previous configuration keeps serving; 0 once one is adopted or unchanged.",
	})
	f(m.configRejected)
	m.idleConnsClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_server_idle_connections_closed_total",
		Help: "Idle keep-alive webhook connections closed to make room for a new client at --max-connections.",
	})
	f(m.idleConnsClosed)
	m.unitsLoaded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_config_policy_loads_total",
		Help: "Policies (and group members) loaded by outcome: loaded, reused (unchanged across a reload), failed.",
	}, []string{"outcome"})
	f(m.unitsLoaded)
	m.certReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_tls_certificate_reloads_total",
		Help: "Serving certificate reloads by outcome.",
	}, []string{"outcome"})
	f(m.certReloads)
	m.certNotAfter = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_tls_certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the serving certificate expires.",
	})
	f(m.certNotAfter)
	m.acceptedByNsTot = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tollgate_server_always_accepted_total",
		Help: "Requests accepted without evaluation because of --always-accept-admission-reviews-on-namespace.",
	})
	f(m.acceptedByNsTot)
	m.policyQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_requests_queued",
		Help: "Requests to the policy (or group) waiting for a worker; at most tollgate_server_limit{limit=\"policy_queue\"}.",
	}, []string{"policy"})
	f(m.policyQueued)
	m.policyRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_evaluations_running",
		Help: "Evaluations of the policy (or group) running now; at most tollgate_server_limit{limit=\"policy_workers\"}.",
	}, []string{"policy"})
	f(m.policyRunning)
	m.policyRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_overload_rejections_total",
		Help: "Requests to the policy (or group) answered 503 without a worker: queue_full (the server's queue), policy_queue_full (the policy's share of it), wait_expired (no worker within the policy timeout).",
	}, []string{"policy", "reason"})
	f(m.policyRejected)
	m.policyCooldowns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_cooldowns_total",
		Help: "Cool-downs the policy (or group) started: an evaluation ran out of time or memory, so its requests get its failure answer without running until the cool-down ends.",
	}, []string{"policy"})
	f(m.policyCooldowns)
	m.policyCooldown = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_policy_cooldown_seconds",
		Help: "Length of the policy's (or group's) current cool-down (9 times the evaluation that ran out, doubling while they keep running out, up to 2 minutes); 0 once an evaluation ended in time.",
	}, []string{"policy"})
	f(m.policyCooldown)
	m.limits = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tollgate_server_limit",
		Help: "The server's admission limits: workers, policy_workers (one policy's share), queue, policy_queue (one policy's share), request_bytes_in_flight, connections, policy_cooldown_after (timeouts in a row before a cool-down).",
	}, []string{"limit"})
	f(m.limits)
	m.bodyBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_server_request_bytes_in_flight",
		Help: "Request body bytes taken from the budget tollgate_server_limit{limit=\"request_bytes_in_flight\"}: bodies being read, or whose requests are waiting or being evaluated.",
	})
	f(m.bodyBytes)
	m.h2Parked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tollgate_server_http2_bytes_parked",
		Help: "Request body bytes that HTTP/2 requests waiting for tollgate_server_request_bytes_in_flight may have sent ahead (64 KiB each at most); at most the request_bytes_in_flight limit, beyond which such requests are refused at once.",
	})
	f(m.h2Parked)
	m.shadowEvaluations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_shadow_evaluations_total",
		Help: "Evaluations of the policy's shadow (its candidate version, policies.yml shadow:) compared with the serving answer, failed ones included.",
	}, []string{"policy"})
	f(m.shadowEvaluations)
	m.shadowDivergences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_shadow_divergences_total",
		Help: "Shadow evaluations whose answer differed from the serving one, by kind (the first of: error, one of the two failed; verdict, allowed vs denied; patch; message, message, code or causes); one per request.",
	}, []string{"policy", "kind"})
	f(m.shadowDivergences)
	m.shadowDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tollgate_policy_shadow_dropped_total",
		Help: "Requests whose shadow evaluation was skipped: queue_full (--shadow-queue-size, or the policy's half of it, or its request bytes), busy (serving requests were waiting for a worker), cooling_down (the shadow ran out of time or memory recently), shutdown.",
	}, []string{"policy", "reason"})
	f(m.shadowDropped)
	return m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// dropPolicy removes the series of a policy that serving no longer has
// (labels never outlive their policy: a cluster whose policies come and go
// with reloads would otherwise grow its series without bound).
// The caller's collectors lose theirs when they are vectors with a policy
// label (serve's guest log drops, the capabilities' metrics); others are
// left alone.
func (m *metrics) dropPolicy(id string) {
	l := prometheus.Labels{"policy": id}
	own := []prometheus.Collector{m.evaluations, m.evalDuration, m.evalErrors, m.policyQueued, m.policyRunning,
		m.policyRejected, m.policyCooldowns, m.policyCooldown, m.shadowEvaluations, m.shadowDivergences, m.shadowDropped}
	for _, c := range append(own, m.extra...) {
		if v, ok := c.(interface{ DeletePartialMatch(prometheus.Labels) int }); ok {
			v.DeletePartialMatch(l)
		}
	}
}

// addCollector serves c on /metrics beside the server's own.
func (m *metrics) addCollector(c prometheus.Collector) {
	m.reg.MustRegister(c)
	m.extra = append(m.extra, c)
}
