package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// sentCounter counts the statements and batches sent: each is one round
// trip to PostgreSQL.
type sentCounter struct{ n atomic.Int64 }

func (c *sentCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *sentCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *sentCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *sentCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *sentCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// roundTrips is how many statements and batches f sent.
func (e *env) roundTrips(f func()) int64 {
	before := e.sent.n.Load()
	f()
	return e.sent.n.Load() - before
}

// TestOneGrantIsOneRoundTrip: a one-phase change of one grant, the
// commonest write, is one statement (grant_trx_N); everything else, and a
// grant the database leaves to the service, is planned by the service.
func TestOneGrantIsOneRoundTrip(t *testing.T) {
	e := newEnv(t)
	soon := time.Now().Add(800 * time.Millisecond)
	for _, c := range []struct {
		name string
		key  string
		ops  []coffer.OpRequest
		want int64
	}{
		{"a grant into a new lot", "a", []coffer.OpRequest{free("gold", 100)}, 1},
		{"a grant joining the free lot", "b", []coffer.OpRequest{free("gold", 50)}, 1},
		{"a paid grant: its order's claim, then the statement", "c", []coffer.OpRequest{paid("gold", 30, "o-1")}, 2},
		{"a replay: the key fails the statement, then the stored trx answers", "a", []coffer.OpRequest{free("gold", 100)}, 2},
		{"a consume", "d", []coffer.OpRequest{free("gold", -20)}, 2},
		{"two grants", "e", []coffer.OpRequest{free("gold", 1), free("silver", 1)}, 2},
		{"a grant expiring soon", "f", []coffer.OpRequest{{Currency: "gold", Amount: 40, ExpiresAt: &soon}}, 1},
	} {
		if got := e.roundTrips(func() { e.mustChange(40, c.key, c.ops...) }); got != c.want {
			t.Errorf("%s: %d round trips, want %d", c.name, got, c.want)
		}
	}
	if b := e.balance(40, "gold"); b.Total != 201 || b.Paid != 30 {
		t.Fatalf("gold = %+v, want 201 with 30 paid", b)
	}
	// The answer built from the function's row is the one a replay
	// rebuilds from the stored rows.
	first := e.mustChange(40, "h", paid("gold", 7, "o-2"))
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(40, "h"),
		Ops: []coffer.OpRequest{paid("gold", 7, "o-2")}, Reason: "test"})
	if err != nil || !replayed || !reflect.DeepEqual(again, first) {
		t.Fatalf("replay of a grant:\n%+v %v %v\nfirst answer:\n%+v", again, replayed, err, first)
	}

	time.Sleep(time.Second)
	var trx coffer.Trx
	if got := e.roundTrips(func() { trx = e.mustChange(40, "g", free("gold", 1)) }); got != 3 {
		t.Errorf("a grant behind a due expiry: %d round trips, want 3 (the statement refuses, the service plans)", got)
	}
	if got := e.expiries(40); len(got) != 1 || got[0].Amount != -40 || got[0].BalanceAfter != 168 {
		t.Fatalf("expiries = %+v; want the 40 recorded before the grant", got)
	}
	if trx.Ops[0].BalanceAfter != 169 {
		t.Fatalf("grant after the expiry: %+v", trx.Ops)
	}
}

// TestGrantTrxWritesWhatThePlanWrites: the same changes, written by
// grant_trx_N for a player and by the service's plan for the same player
// in another ledger (an order is credited once per ledger), leave the
// same rows, ids and times compared by their order and their links.
func TestGrantTrxWritesWhatThePlanWrites(t *testing.T) {
	e, planned := newEnv(t), newEnv(t)
	later := time.Now().Add(time.Hour)
	meta := []byte(`{"quest":7}`)
	changes := []coffer.ChangeRequest{
		{Ops: []coffer.OpRequest{free("gold", 100)}},
		{Ops: []coffer.OpRequest{free("gold", 50)}, Reason: "daily"},
		{Ops: []coffer.OpRequest{paid("gold", 30, "o-1")}, Meta: meta},
		{Ops: []coffer.OpRequest{{Currency: "gold", Amount: 20, ExpiresAt: &later}}},
		{Ops: []coffer.OpRequest{{Currency: "gold", Amount: 5, ExpiresAt: &later}}},
		{Ops: []coffer.OpRequest{{Currency: "gold", Amount: 5, ExpiresAt: &later, Priority: 2}}},
		{Ops: []coffer.OpRequest{free("silver", 7)}},
		{Ops: []coffer.OpRequest{free("gold", -160)}},
		{Ops: []coffer.OpRequest{free("gold", 10)}},
		{Ops: []coffer.OpRequest{paid("silver", 3, "o-2")}},
	}
	for i, req := range changes {
		req.Scope = scope(42, fmt.Sprint("k", i))
		for _, change := range []func(context.Context, coffer.ChangeRequest) (coffer.Trx, bool, error){e.store.Change, planned.store.PlanChange} {
			if _, _, err := change(ctx, req); err != nil {
				t.Fatalf("change %d: %v", i, err)
			}
		}
	}
	if got, want := e.ledgerRows(42), planned.ledgerRows(42); got != want {
		t.Fatalf("grant_trx wrote\n%s\nthe plan wrote\n%s", got, want)
	}
}

// ledgerRows are a player's rows in namespace 1 as sorted JSON: ids as
// their rank among the player's ids, times as whether they match their
// trx's, the request hash (which covers the player) left out.
func (e *env) ledgerRows(player coffer.PlayerID) string {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	var out string
	err := e.router.Shard(id).QueryRow(ctx, fmt.Sprintf(`
		WITH t AS (SELECT * FROM trx_%[1]d WHERE ns = 1 AND player_id = $1),
		ids AS (SELECT id, rank() OVER (ORDER BY id) AS r FROM (
			SELECT trx_id AS id FROM t UNION SELECT lot_id FROM lot_%[1]d WHERE ns = 1 AND player_id = $1) x),
		rows AS (
			SELECT to_jsonb(t) - '{player_id,trx_id,created_at,request_hash}'::text[]
				|| jsonb_build_object('table', 'trx', 'id', (SELECT r FROM ids WHERE id = t.trx_id)) AS row
			FROM t
			UNION ALL
			SELECT to_jsonb(o) - '{player_id,trx_id,lot_id,created_at}'::text[]
				|| jsonb_build_object('table', 'op', 'trx', (SELECT r FROM ids WHERE id = o.trx_id),
					'lot', (SELECT r FROM ids WHERE id = o.lot_id),
					'at_trx', o.created_at = (SELECT t.created_at FROM t WHERE t.trx_id = o.trx_id))
			FROM op_%[1]d o WHERE ns = 1 AND player_id = $1
			UNION ALL
			SELECT to_jsonb(l) - '{player_id,trx_id,lot_id,created_at}'::text[]
				|| jsonb_build_object('table', 'lot', 'id', (SELECT r FROM ids WHERE id = l.lot_id),
					'trx', (SELECT r FROM ids WHERE id = l.trx_id),
					'at_trx', l.created_at = (SELECT t.created_at FROM t WHERE t.trx_id = l.trx_id))
			FROM lot_%[1]d l WHERE ns = 1 AND player_id = $1
			UNION ALL
			SELECT jsonb_build_object('table', 'balance', 'version', b.version,
				'at_last_trx', b.updated_at = (SELECT max(t.created_at) FROM t))
			FROM balance_%[1]d b WHERE ns = 1 AND player_id = $1)
		SELECT string_agg(row::text, E'\n' ORDER BY row::text) FROM rows`, id), player).Scan(&out)
	must(e.t, err)
	return out
}

// TestGrantTrxLeavesAnOverflowToThePlan: a grant that would take the
// balance past int64 is refused by the service's plan, with its message,
// and nothing is written.
func TestGrantTrxLeavesAnOverflowToThePlan(t *testing.T) {
	e := newEnv(t)
	e.mustChange(44, "a", free("gold", 10))
	id := e.router.Map().ShardOf(44)
	_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE lot_%d SET amount = $1 WHERE player_id = 44`, id), int64(math.MaxInt64-5))
	must(t, err)
	e.damaged = true
	_, err = e.change(44, "b", free("gold", 10))
	wantCode(t, err, coffer.CodeInvalid)
	if ce := (*coffer.Error)(nil); !errors.As(err, &ce) || !strings.HasPrefix(ce.Message, "gold: the balance would overflow") {
		t.Fatalf("err = %v; want the plan's overflow error", err)
	}
	if b := e.balance(44, "gold"); b.Total != math.MaxInt64-5 {
		t.Fatalf("gold = %+v; want nothing written", b)
	}
}
