package postgres_test

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// sentCounter counts the statements and batches sent: each is one round
// trip to PostgreSQL.
// statements counts the statements, alone or in a batch; begins the
// transactions begun in a batch: the write batches.
type sentCounter struct{ n, statements, begins atomic.Int64 }

func (c *sentCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	c.statements.Add(1)
	return ctx
}

func (c *sentCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sentCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *sentCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.statements.Add(1)
	if d.SQL == "BEGIN" {
		c.begins.Add(1)
	}
}

func (c *sentCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// roundTrips is how many statements and batches f sent (round trips),
// and how many statements they held.
func (e *env) roundTrips(f func()) (roundTrips, statements int64) {
	n, st := e.sent.n.Load(), e.sent.statements.Load()
	f()
	return e.sent.n.Load() - n, e.sent.statements.Load() - st
}
