package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Each reconcile of a traced controller is a span naming the object, with the reconciler's
// context under it (its API calls can be children); an error marks it; untraced, the
// reconciler is used as it is.
func TestTracedReconcile(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	var inner trace.SpanContext
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		inner = trace.SpanFromContext(ctx).SpanContext()
		if req.Name == "bad" {
			return reconcile.Result{}, errors.New("conflict")
		}
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	})
	if traced(r, nil, "PolicyServer") == nil {
		t.Fatal("untraced: nil reconciler")
	}
	tr := traced(r, tp.Tracer("test"), "PolicyServer")
	if _, err := tr.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "bad"}}); err == nil {
		t.Fatal("the error was lost")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]any {
		m := map[string]any{}
		for _, a := range s.Attributes() {
			m[string(a.Key)] = a.Value.AsInterface()
		}
		return m
	}
	ok, bad := spans[0], spans[1]
	if ok.Name() != "reconcile PolicyServer" || attrs(ok)["tollgate.reconcile.name"] != "default" || attrs(ok)["tollgate.reconcile.requeue"] != true ||
		ok.Status().Code.String() == "Error" {
		t.Errorf("span %s %v %v", ok.Name(), attrs(ok), ok.Status())
	}
	if attrs(bad)["tollgate.reconcile.namespace"] != "ns" || bad.Status().Code.String() != "Error" || bad.SpanContext().SpanID() != inner.SpanID() {
		t.Errorf("span %s %v %v; the reconciler's context had span %s", bad.Name(), attrs(bad), bad.Status(), inner.SpanID())
	}
}
