package postgres

import (
	"context"

	"github.com/cofferhq/coffer/telemetry"
	"github.com/jackc/pgx/v5"
)

// RoundTrips is a pgx tracer (shard.PoolConfig.Tracer) that makes a span
// of each round trip to PostgreSQL, a statement or a batch of them, and
// one of a batch's COMMIT, under the span of the context the round trip
// runs with: a call's, or its batch's (telemetry.Batch). A round trip
// under no span (a sweeper's, a probe's) makes none. Set it only with
// tracing on: it is then the only cost of round trips.
type RoundTrips struct{}

var (
	_ pgx.QueryTracer = RoundTrips{}
	_ pgx.BatchTracer = RoundTrips{}
)

// TraceQueryStart starts the span of one statement.
func (RoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return telemetry.StartRoundTrip(ctx, 1)
}

// TraceQueryEnd ends the span of one statement.
func (RoundTrips) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	telemetry.EndRoundTrip(ctx, data.Err)
}

// TraceBatchStart starts the span of a batch of statements.
func (RoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	return telemetry.StartRoundTrip(ctx, data.Batch.Len())
}

// TraceBatchQuery makes the COMMIT's span, from when its result was
// awaited to when it came: the statements before it have answered by
// then, so that is the COMMIT's time on the server (its WAL flush, a
// synchronous standby's answer) and on the wire.
func (RoundTrips) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.SQL == "COMMIT" { // before the context's span: this runs for every statement
		telemetry.Commit(ctx, data.ReadStartTime, data.Err)
	}
}

// TraceBatchEnd ends the span of a batch of statements.
func (RoundTrips) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	telemetry.EndRoundTrip(ctx, data.Err)
}
