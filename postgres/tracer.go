package postgres

import (
	"context"

	"github.com/cofferhq/coffer/telemetry"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// RoundTrips is a pgx tracer (shard.PoolConfig.Tracer) that makes a span
// of each round trip to PostgreSQL, a statement or a batch of them, and
// one of a batch's COMMIT, under the span of the context the round trip
// runs with: a call's, or its batch's (telemetry.Batch). A round trip
// under no span that records (a sweeper's, a probe's) makes none. Set it
// only with tracing on: it is then the only cost of round trips.
type RoundTrips struct{}

var (
	_ pgx.QueryTracer = RoundTrips{}
	_ pgx.BatchTracer = RoundTrips{}
)

// TraceQueryStart starts the span of one statement.
func (RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return startRoundTrip(ctx, 1)
}

// TraceQueryEnd ends the span of one statement.
func (RoundTrips) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	endRoundTrip(ctx, data.Err)
}

// TraceBatchStart starts the span of a batch of statements.
func (RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	return startRoundTrip(ctx, data.Batch.Len())
}

// TraceBatchQuery makes the COMMIT's span, from when its result was
// awaited to when it came: the statements before it have answered by
// then, so that is the COMMIT's time on the server (its WAL flush, a
// synchronous standby's answer) and on the wire.
func (RoundTrips) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.SQL != "COMMIT" { // before the context's span: this runs for every statement
		return
	}
	trip := trace.SpanFromContext(ctx)
	if !trip.IsRecording() {
		return
	}
	_, commit := telemetry.TracerOf(trip).Start(ctx, "commit", trace.WithTimestamp(data.ReadStartTime))
	if data.Err != nil {
		commit.SetStatus(codes.Error, data.Err.Error())
	}
	commit.End()
}

// TraceBatchEnd ends the span of a batch of statements.
func (RoundTrips) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	endRoundTrip(ctx, data.Err)
}

// clientKind and postgresql are a round trip's kind and system, made once.
var (
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
	postgresql = attribute.String("db.system.name", "postgresql")
)

func startRoundTrip(ctx context.Context, statements int) context.Context {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx
	}
	// No db.namespace: conn.Config() copies the whole config, at every
	// round trip; the batch's span names the database. The attributes
	// go to the span itself: as a start option they would be copied
	// into the options, then into the span.
	ctx, trip := telemetry.TracerOf(parent).Start(ctx, "round trip", clientKind)
	trip.SetAttributes(postgresql, attribute.Int("coffer.statements", statements))
	return ctx
}

// endRoundTrip ends the span startRoundTrip started: it started one
// exactly when the span of ctx records.
func endRoundTrip(ctx context.Context, err error) {
	trip := trace.SpanFromContext(ctx)
	if !trip.IsRecording() {
		return
	}
	if err != nil {
		trip.SetStatus(codes.Error, err.Error())
	}
	trip.End()
}
