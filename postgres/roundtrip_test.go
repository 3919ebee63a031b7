package postgres_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// sentCounter counts the statements and batches sent: each is one round
// trip to PostgreSQL.
// statements counts the statements, alone or in a batch; begins the
// transactions begun in a batch: the write batches; arrays the statements
// of a batch that bind an array (bytea apart).
type sentCounter struct{ n, statements, begins, arrays atomic.Int64 }

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
	for _, a := range d.Args {
		if v := reflect.ValueOf(a); v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.Uint8 {
			c.arrays.Add(1)
			return
		}
	}
}

func (c *sentCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// withArrays is how many statements of batches f sent bind an array.
func (e *env) withArrays(f func()) int64 {
	n := e.sent.arrays.Load()
	f()
	return e.sent.arrays.Load() - n
}

// roundTrips is how many statements and batches f sent (round trips),
// and how many statements they held.
func (e *env) roundTrips(f func()) (roundTrips, statements int64) {
	n, st := e.sent.n.Load(), e.sent.statements.Load()
	f()
	return e.sent.n.Load() - n, e.sent.statements.Load() - st
}

// TestCommitOfManyGrantsDrawsTheIDsItLacks: a commit's ids are drawn
// with its lock for a few grants; a hold of OpsMax paid grants, a lot
// each, lacks the rest. Its plan says so (coffer.Plan.IDsShort), the
// batch draws them, one round trip more than a commit of one grant, and
// plans it again: every lot has an id of its own.
func TestCommitOfManyGrantsDrawsTheIDsItLacks(t *testing.T) {
	e := newEnv(t)
	const p = 31
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Ops: paidLots("gold", coffer.OpsMax, "o"), Hold: true})
	must(t, err)
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "one"), Ops: paidLots("silver", 1, "o1"), Hold: true})
	must(t, err)
	one, _ := e.roundTrips(func() {
		_, _, err = e.store.Commit(ctx, byItsClient(p, "one"))
		must(t, err)
	})
	var trx coffer.Trx
	many, _ := e.roundTrips(func() {
		trx, _, err = e.store.Commit(ctx, byItsClient(p, "h"))
		must(t, err)
	})
	if many != one+1 {
		t.Errorf("the commit of %d grants took %d round trips, one of one grant %d; want one more, for the ids", coffer.OpsMax, many, one)
	}
	lots := map[int64]bool{}
	for _, o := range trx.Ops {
		if o.Kind == coffer.OpGrant {
			lots[o.LotID] = true
		}
	}
	if len(lots) != coffer.OpsMax || lots[0] {
		t.Fatalf("%d grants on %d lots of their own (lot 0: %v), want %d", len(trx.Ops), len(lots), lots[0], coffer.OpsMax)
	}
	if b := e.balance(p, "gold"); b.Total != coffer.OpsMax || b.Paid != coffer.OpsMax {
		t.Fatalf("gold after the commit: %+v", b)
	}
	e.auditClean()
}
