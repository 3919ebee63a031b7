package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Queued is a call's wait in a database's queue, from Queue until a batch
// takes it (Batch.Join). Its zero value, for a call not traced, does
// nothing.
type Queued struct {
	call, wait trace.Span
}

// Queue starts the wait of the call of ctx in a database's queue, if the
// call's span records. The wait has no attributes: the batch it ends in,
// which the call links, names the database and the kind, and a wait is
// one per call (attributes are a good part of a span's cost).
func Queue(ctx context.Context) Queued {
	call := trace.SpanFromContext(ctx)
	if !call.IsRecording() {
		return Queued{}
	}
	_, wait := TracerOf(call).Start(ctx, "queue wait")
	return Queued{call: call, wait: wait}
}

// Batch is the span of one group-commit batch. One batch serves many
// calls, of many traces: its span is the root of a trace of its own,
// linked with each call it carries, and each call's span with it. Its
// zero value is a batch with no call traced, which makes no span.
type Batch struct {
	tracer trace.Tracer
	calls  []*Queued
	span   trace.Span
}

// Join adds a call to the batch; the call's wait ends when the batch
// starts.
func (b *Batch) Join(q *Queued) {
	if q.call == nil {
		return
	}
	if b.tracer == nil {
		b.tracer = TracerOf(q.call)
	}
	b.calls = append(b.calls, q)
}

// Start starts the batch's span, of size writes or reads of kind on
// database, if a call of it is traced, and returns a context with it for
// the batch's round trips (context.Background's, with none). It ends
// the calls' waits.
func (b *Batch) Start(database, kind string, size int) context.Context {
	if b.tracer == nil {
		return context.Background()
	}
	// A span with no parent in its context is a root: WithNewRoot would
	// put an empty parent in it, two allocations. Links and attributes
	// go to the span itself: as start options they would be copied into
	// the options, then into the span.
	ctx, span := b.tracer.Start(context.Background(), "batch")
	b.span = span
	b.span.SetAttributes(attribute.String("coffer.database", database), attribute.String("coffer.batch.kind", kind),
		attribute.Int("coffer.batch.size", size), attribute.Int("coffer.batch.calls", len(b.calls)))
	joined := trace.Link{SpanContext: b.span.SpanContext()}
	for _, q := range b.calls {
		b.span.AddLink(trace.Link{SpanContext: q.call.SpanContext()})
		q.call.AddLink(joined)
		if q.wait != nil {
			q.wait.End()
			q.wait = nil
		}
	}
	return ctx
}

// End ends the batch's span.
func (b *Batch) End() {
	if b.span != nil {
		b.span.End()
	}
}

// TracerOf is the tracer of the provider that made span: the store and
// its pgx tracer (postgres.RoundTrips) trace under the calls' spans, and
// so need no Tracing of their own.
func TracerOf(span trace.Span) trace.Tracer {
	p := span.TracerProvider()
	if last := lastTracer.Load(); last != nil && last.provider == p {
		return last.tracer
	}
	t := p.Tracer(scope)
	if sdk, ok := p.(*sdktrace.TracerProvider); ok {
		lastTracer.Store(&providerTracer{sdk, t})
	}
	return t
}

// lastTracer is the provider TracerOf was last asked about, with its
// tracer: TracerProvider.Tracer takes a lock, which every span of every
// batch would wait on, and an instance has one provider.
var lastTracer atomic.Pointer[providerTracer]

type providerTracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}
