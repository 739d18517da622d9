package controller

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// traced wraps r so that each reconcile is a span ("reconcile <kind>": the object's namespace
// and name, the error, whether it asks to run again later), when tracer is set (Options.Tracer); else r.
func traced(r reconcile.Reconciler, tracer trace.Tracer, kind string) reconcile.Reconciler {
	if tracer == nil {
		return r
	}
	return &tracedReconciler{r: r, tracer: tracer, name: "reconcile " + kind, kind: kind}
}

type tracedReconciler struct {
	r          reconcile.Reconciler
	tracer     trace.Tracer
	name, kind string
}

func (t *tracedReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, span := t.tracer.Start(ctx, t.name)
	res, err := t.r.Reconcile(ctx, req)
	a := []attribute.KeyValue{attribute.String("tollgate.reconcile.kind", t.kind), attribute.String("tollgate.reconcile.namespace", req.Namespace),
		attribute.String("tollgate.reconcile.name", req.Name), attribute.Bool("tollgate.reconcile.requeue", res.RequeueAfter > 0)}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		a = append(a, attribute.String("error.type", "reconcile_error"))
	}
	span.SetAttributes(a...)
	span.End()
	return res, err
}
