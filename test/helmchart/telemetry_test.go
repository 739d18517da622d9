package helmchart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	v1 "github.com/tollgate-dev/tollgate/crds/api/v1"
)

// TestTelemetry: Kubewarden's telemetry values put the OTEL_* variables (OTLP over gRPC to
// telemetry.custom.endpoint) on the controller, the audit and the PolicyServer, after the env
// they already have; an endpoint without a scheme gets http:// with insecure, https:// without;
// on without an endpoint is refused, and so is a variable of policyServer.env that telemetry.* sets.
func TestTelemetry(t *testing.T) {
	envOf := func(env []corev1.EnvVar) map[string]string {
		m := map[string]string{}
		for _, e := range env {
			m[e.Name] = e.Value
		}
		return m
	}
	want := func(what string, env []corev1.EnvVar, endpoint, traces, metrics string) {
		t.Helper()
		m := envOf(env)
		if m["OTEL_EXPORTER_OTLP_ENDPOINT"] != endpoint || m["OTEL_EXPORTER_OTLP_PROTOCOL"] != "grpc" ||
			m["OTEL_TRACES_EXPORTER"] != traces || m["OTEL_METRICS_EXPORTER"] != metrics {
			t.Errorf("%s env %v: want endpoint %s, traces %s, metrics %s", what, env, endpoint, traces, metrics)
		}
	}
	out, err := render(t, "--set", "telemetry.tracing=true", "--set", "telemetry.custom.endpoint=otel.obs.svc:4317", "--set", "telemetry.custom.insecure=true",
		"--set", "policyServer.env[0].name=TOLLGATE_LOG_LEVEL", "--set", "policyServer.env[0].value=debug")
	if err != nil {
		t.Fatal(err)
	}
	m := byKey(t, decode(t, out))
	var d appsv1.Deployment
	get(t, m, "Deployment/tollgate-controller", &d)
	c := d.Spec.Template.Spec.Containers[0]
	if c.Env[0].Name != "POD_NAMESPACE" {
		t.Errorf("controller env %v: POD_NAMESPACE first", c.Env)
	}
	want("controller", c.Env, "http://otel.obs.svc:4317", "otlp", "prometheus")
	var cj batchv1.CronJob
	get(t, m, "CronJob/tollgate-audit", &cj)
	want("audit", cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env, "http://otel.obs.svc:4317", "otlp", "prometheus")
	var ps v1.PolicyServer
	get(t, m, "PolicyServer/default", &ps)
	if ps.Spec.Env[0].Name != "TOLLGATE_LOG_LEVEL" {
		t.Errorf("PolicyServer env %v: its own env first", ps.Spec.Env)
	}
	want("PolicyServer", ps.Spec.Env, "http://otel.obs.svc:4317", "otlp", "prometheus")

	// metrics alone, TLS
	out, err = render(t, "--set", "telemetry.metrics=true", "--set", "telemetry.custom.endpoint=otel.obs.svc:4317")
	if err != nil {
		t.Fatal(err)
	}
	m = byKey(t, decode(t, out))
	get(t, m, "PolicyServer/default", &ps)
	want("PolicyServer", ps.Spec.Env, "https://otel.obs.svc:4317", "none", "otlp")

	// off (the default): no OTEL_* anywhere
	if out, err = render(t); err != nil || strings.Contains(out, "OTEL_") {
		t.Errorf("default values render OTEL_* (%v)", err)
	}
	// policyServer.env naming a variable telemetry.* sets: refused by the chart, naming it (the
	// CRD would refuse the PolicyServer at install: spec.env names a variable once)
	if _, err := render(t, "--set", "telemetry.tracing=true", "--set", "telemetry.custom.endpoint=otel.obs.svc:4317",
		"--set", "policyServer.env[0].name=OTEL_TRACES_EXPORTER", "--set", "policyServer.env[0].value=none"); err == nil ||
		!strings.Contains(err.Error(), "policyServer.env sets OTEL_TRACES_EXPORTER, which telemetry.tracing/telemetry.metrics set too") {
		t.Errorf("policyServer.env with OTEL_TRACES_EXPORTER and telemetry.tracing: %v", err)
	}
	// on without an endpoint
	if _, err := render(t, "--set", "telemetry.tracing=true"); err == nil || !strings.Contains(err.Error(), "telemetry.custom.endpoint") {
		t.Errorf("tracing without an endpoint: %v", err)
	}
}
