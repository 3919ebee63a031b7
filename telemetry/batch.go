package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Queued is a call's wait in a database's queue, from Queue until a batch
// takes it (Batch.Join). Its zero value, for a call not traced, does
// nothing.
type Queued struct {
	call, wait *span
}

// Queue starts the wait of the call of ctx in a database's queue, if the
// call is traced. The wait has no attributes: the batch it ends in,
// which the call links, names the database and the kind.
func Queue(ctx context.Context) Queued {
	call := spanOf(ctx)
	if call == nil {
		return Queued{}
	}
	return Queued{call: call, wait: call.child("queue wait", trace.SpanKindInternal)}
}

// Batch is the span of one group-commit batch. One batch serves many
// calls, of many traces: its span is the root of a trace of its own,
// linked with each call it carries, and each call's span with it. Its
// zero value is a batch with no call traced, which makes no span. A
// batch with a call traced is traced, whatever the sample ratio: its
// call's trace would link a span never sent.
type Batch struct {
	calls []*Queued
	span  *span
}

// Join adds a call to the batch; the call's wait ends when the batch
// starts.
func (b *Batch) Join(q *Queued) {
	if q.call != nil {
		b.calls = append(b.calls, q)
	}
}

// Start starts the batch's span, of size writes or reads of kind on
// database, if a call of it is traced, and returns a context with it for
// the batch's round trips (context.Background's, with none). It ends
// the calls' waits.
func (b *Batch) Start(database, kind string, size int) context.Context {
	if len(b.calls) == 0 {
		return context.Background()
	}
	b.span = b.calls[0].call.tracing.root("batch")
	b.span.setAttributes(attribute.String("coffer.database", database), attribute.String("coffer.batch.kind", kind),
		attribute.Int("coffer.batch.size", size), attribute.Int("coffer.batch.calls", len(b.calls)))
	for _, q := range b.calls {
		b.span.addLink(q.call.sc)
		q.call.addLink(b.span.sc)
		if q.wait != nil {
			q.wait.finish()
			q.wait = nil
		}
	}
	return withSpan(context.Background(), b.span)
}

// End ends the batch's span.
func (b *Batch) End() {
	if b.span != nil {
		b.span.finish()
	}
}

// postgresql is a round trip's system, made once.
var postgresql = attribute.String("db.system.name", "postgresql")

// StartRoundTrip starts the span of a round trip to PostgreSQL of
// statements, the child of the span of ctx (a call's or a batch's), and
// returns a context with it; under no span (a sweeper's, a probe's), it
// starts none and returns ctx.
func StartRoundTrip(ctx context.Context, statements int) context.Context {
	parent := spanOf(ctx)
	if parent == nil {
		return ctx
	}
	trip := parent.child("round trip", trace.SpanKindClient)
	trip.setAttributes(postgresql, attribute.Int("coffer.statements", statements))
	return withSpan(ctx, trip)
}

// EndRoundTrip ends the span StartRoundTrip put in ctx, with its error:
// it put one exactly when ctx, before it, had a span.
func EndRoundTrip(ctx context.Context, err error) {
	trip := spanOf(ctx)
	if trip == nil {
		return
	}
	if err != nil {
		trip.fail(err.Error())
	}
	trip.finish()
}

// Commit makes the span of a COMMIT sent in the round trip of ctx, from
// began to now, with its error, if the round trip is traced.
func Commit(ctx context.Context, began time.Time, err error) {
	trip := spanOf(ctx)
	if trip == nil {
		return
	}
	commit := trip.child("commit", trace.SpanKindInternal)
	commit.start = began
	if err != nil {
		commit.fail(err.Error())
	}
	commit.finish()
}
