package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is a span processor with a bounded queue: OnEnd never waits (a
// span that does not fit is dropped and counted), and one goroutine sends
// the queue in batches, each export bounded by the exporter's timeout. The
// SDK's BatchSpanProcessor behaves the same way but keeps its drop count
// to itself; this one reports it (see RATIONALE.md).
type batcher struct {
	exp     sdktrace.SpanExporter
	queue   chan sdktrace.ReadOnlySpan
	size    int
	delay   time.Duration
	timeout time.Duration
	stats   *stats
	log     *slog.Logger

	flushes  chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	// lastErr limits the export failures logged to one a minute.
	lastErr time.Time
}

func newBatcher(exp sdktrace.SpanExporter, c Config, timeout time.Duration, st *stats, log *slog.Logger) *batcher {
	b := &batcher{exp: exp, queue: make(chan sdktrace.ReadOnlySpan, c.QueueSize), size: c.BatchSize,
		delay: c.ScheduleDelay, timeout: timeout, stats: st, log: log,
		flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// OnStart does nothing: spans are queued when they end.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or drops it when the queue is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case b.queue <- s:
	default:
		b.stats.dropped(reasonQueueFull, 1)
	}
}

// run sends the queue in batches: when one is full, when the oldest span
// waited the schedule delay, on a flush, and at the end.
func (b *batcher) run() {
	defer close(b.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, b.size)
	timer := time.NewTimer(b.delay)
	defer timer.Stop()
	send := func() {
		if len(batch) > 0 {
			b.export(batch)
			clear(batch)
			batch = batch[:0]
		}
		timer.Reset(b.delay)
	}
	for {
		select {
		case s := <-b.queue:
			batch = append(batch, s)
			if len(batch) >= b.size {
				send()
			}
		case <-timer.C:
			send()
		case ack := <-b.flushes:
			b.drain(&batch, send)
			close(ack)
		case <-b.stop:
			b.drain(&batch, send)
			return
		}
	}
}

// drain sends what is queued now, in batches.
func (b *batcher) drain(batch *[]sdktrace.ReadOnlySpan, send func()) {
	for {
		select {
		case s := <-b.queue:
			*batch = append(*batch, s)
			if len(*batch) >= b.size {
				send()
			}
		default:
			send()
			return
		}
	}
}

// export sends one batch; a failed batch is dropped and counted (the
// exporter has retried within its timeout already).
func (b *batcher) export(batch []sdktrace.ReadOnlySpan) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if err := b.exp.ExportSpans(ctx, batch); err != nil {
		b.stats.dropped(reasonExportFailed, len(batch))
		if now := time.Now(); now.Sub(b.lastErr) >= time.Minute {
			b.lastErr = now
			b.log.Warn("exporting spans failed: they are dropped (tollgate_telemetry_spans_dropped_total; logged once a minute)",
				"spans", len(batch), "error", err)
		}
		return
	}
	b.stats.exported(len(batch))
}

// ForceFlush sends what is queued and waits for it, or for ctx.
func (b *batcher) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case b.flushes <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown sends what is queued (within ctx) and shuts the exporter down.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.stopOnce.Do(func() { close(b.stop) })
	select {
	case <-b.done:
	case <-ctx.Done():
		// the goroutine ends with its export's timeout
	}
	return b.exp.Shutdown(ctx)
}
