package postgres_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// TestEqualRequestsReplay: a single grant and a change of two ops both
// take a retry that means the same write for a replay, and another write
// for a conflict.
func TestEqualRequestsReplay(t *testing.T) {
	e := newEnv(t)
	exp := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	expParis := exp.In(time.FixedZone("Paris", 3600)).Add(300 * time.Nanosecond)
	for _, ops := range [][]coffer.OpRequest{
		{{Currency: "gold", Amount: 5, Kind: "free", ExpiresAt: &exp}},
		{{Currency: "gold", Amount: 5, Kind: "free", ExpiresAt: &exp}, {Currency: "gold", Amount: -1}},
	} {
		key := fmt.Sprintf("eq-%d", len(ops))
		first, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(50, key), Ops: ops, Meta: []byte(`{"a":1,"b":"x"}`)})
		must(t, err)
		same := append([]coffer.OpRequest(nil), ops...)
		same[0].Kind, same[0].ExpiresAt = "", &expParis
		again, replay, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(50, key), Ops: same, Meta: []byte(` {"b": "x", "a": 1.0} `)})
		if err != nil || !replay || again.ID != first.ID {
			t.Fatalf("%s: retry %+v %v %v", key, again, replay, err)
		}
		same[0].Amount = 6
		if _, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(50, key), Ops: same, Meta: []byte(`{"a":1,"b":"x"}`)}); coffer.ErrorCode(err) != coffer.CodeIdempotencyConflict {
			t.Fatalf("%s: another write: %v", key, err)
		}
	}
}

// TestMetaIsServedAsFirstAnswered: meta is stored as the canonical text
// the first answer carried, so a replay, GetTrx and the finlog serve the
// same bytes (jsonb reordered members and kept 2.50), on both write paths.
func TestMetaIsServedAsFirstAnswered(t *testing.T) {
	e := newEnv(t)
	const p = 60
	meta := []byte(`{"s": "<&>\u00e9\u0000", "b": 1, "aa": 2.50, "n": [1e2, 0.10000000000000001, -0], "o": {"z": null, "y": true}}`)
	const want = "{\"aa\":2.5,\"b\":1,\"n\":[100,0.1,0],\"o\":{\"y\":true,\"z\":null},\"s\":\"<&>\u00e9\\u0000\"}"
	for _, ops := range [][]coffer.OpRequest{
		{{Currency: "gold", Amount: 5}},
		{{Currency: "gold", Amount: 5}, {Currency: "gold", Amount: -1}},
	} {
		key := fmt.Sprintf("meta-%d", len(ops))
		req := coffer.ChangeRequest{Scope: scope(p, key), Ops: ops, Meta: meta}
		first, _, err := e.store.Change(ctx, req)
		must(t, err)
		again, replay, err := e.store.Change(ctx, req)
		must(t, err)
		read, err := e.store.Trx(ctx, scope(p, key))
		must(t, err)
		firstJSON, _ := json.Marshal(first)
		for name, got := range map[string]coffer.Trx{"replay": again, "read": read} {
			if raw, _ := json.Marshal(got); string(got.Meta) != want || !bytes.Equal(raw, firstJSON) {
				t.Errorf("%s: %s's meta %s, want %s\n%s\n%s", key, name, got.Meta, want, raw, firstJSON)
			}
		}
		if !replay || string(first.Meta) != want {
			t.Errorf("%s: first %s, replay %v", key, first.Meta, replay)
		}
	}
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: p})
	must(t, err)
	for _, trx := range page.Items {
		if string(trx.Meta) != want {
			t.Errorf("finlog %s: meta %s", trx.IdempotencyKey, trx.Meta)
		}
	}
}

// TestSpendSentAgainIsAReplay: a consume of the whole balance sent again
// finds its key's trx, though its plan, made without it, refuses it
// (insufficient_funds): a batch does not read the writes' own keys
// unless a write stores no trx under its key. Alone, and in a batch
// beside a grant, each on a store of its own (a store whose committer
// met a key stored reads the keys of its next batches).
func TestSpendSentAgainIsAReplay(t *testing.T) {
	e := newEnv(t)
	const p = 63
	e.mustChange(p, "seed", coffer.OpRequest{Currency: "gold", Amount: 10})
	spend := coffer.ChangeRequest{Scope: scope(p, "spend"), Ops: []coffer.OpRequest{{Currency: "gold", Amount: -10}}}
	first, _, err := e.store.Change(ctx, spend)
	must(t, err)
	fresh := func() *postgres.Store {
		s := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1})
		t.Cleanup(s.Close)
		return s
	}
	again, replay, err := fresh().Change(ctx, spend)
	if err != nil || !replay || again.ID != first.ID {
		t.Fatalf("alone: trx %d, replay %v, %v; want trx %d replayed", again.ID, replay, err, first.ID)
	}
	got, err := fresh().BatchChange(ctx, []coffer.ChangeRequest{
		{Scope: scope(p, "grant"), Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1}}}, spend})
	must(t, err)
	if r := got[1]; r.Err != nil || !r.Replay || r.Trx.ID != first.ID {
		t.Fatalf("in a batch: trx %d, replay %v, %v; want trx %d replayed", r.Trx.ID, r.Replay, r.Err, first.ID)
	}
}

// TestEveryReplayIsTheFirstAnswer: a replay of each kind of write answers
// the bytes the write first answered.
func TestEveryReplayIsTheFirstAnswer(t *testing.T) {
	e := newEnv(t)
	const p = 62
	meta := []byte(`{"b":2.50,"a":"x"}`)
	e.mustChange(p, "seed", coffer.OpRequest{Currency: "gold", Amount: 50})
	later := time.Now().Add(time.Hour)
	hold := coffer.ChangeRequest{Scope: scope(p, "hold"), Hold: true, Meta: meta, Reason: "h",
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: -7}, {Currency: "silver", Amount: 3, Kind: "paid", ExpiresAt: &later, Priority: 2,
			Purchase: &coffer.Purchase{Store: "s", OrderID: "o-1", Price: 99, Fiat: "EUR"}}}}
	exchange := coffer.ExchangeRequest{Scope: scope(p, "ex"), From: "gold", To: "silver", Amount: 2, Meta: meta}
	same := func(name string, write func() (coffer.Trx, bool, error)) {
		t.Helper()
		first, _, err := write()
		must(t, err)
		again, replay, err := write()
		must(t, err)
		a, _ := json.Marshal(first)
		b, _ := json.Marshal(again)
		if !replay || !bytes.Equal(a, b) {
			t.Errorf("%s: replay %v\n%s\n%s", name, replay, a, b)
		}
	}
	same("hold", func() (coffer.Trx, bool, error) { return e.store.Change(ctx, hold) })
	same("commit", func() (coffer.Trx, bool, error) { return e.store.Commit(ctx, byItsClient(p, "hold")) })
	same("exchange", func() (coffer.Trx, bool, error) { return e.store.Exchange(ctx, exchange) })
	// Another hold, and another store order: an order is credited once.
	hold.IdempotencyKey = "hold-2"
	hold.Ops[1].Purchase = &coffer.Purchase{Store: "s", OrderID: "o-2", Price: 99, Fiat: "EUR"}
	same("hold 2", func() (coffer.Trx, bool, error) { return e.store.Change(ctx, hold) })
	same("rollback", func() (coffer.Trx, bool, error) { return e.store.Rollback(ctx, byItsClient(p, "hold-2")) })
}

// TestHoldBeginReplayedAfterItsEnd: a hold's begin sent again after the
// hold's commit, rollback or expiry answers what the begin first
// answered, byte for byte: pending, its reservations, the balances and
// version it left. A read of the trx answers the hold as it is now.
func TestHoldBeginReplayedAfterItsEnd(t *testing.T) {
	e := newEnv(t)
	for i, end := range []struct {
		name   string
		status coffer.TrxStatus
		ttl    time.Duration
		finish func(sc coffer.Scope) error
	}{
		{"commit", coffer.StatusCommitted, 0, func(sc coffer.Scope) error {
			_, _, err := e.store.Commit(ctx, coffer.FinishRequest{Scope: sc, By: sc.Emitter})
			return err
		}},
		{"rollback", coffer.StatusRolledBack, 0, func(sc coffer.Scope) error {
			_, _, err := e.store.Rollback(ctx, coffer.FinishRequest{Scope: sc, By: sc.Emitter})
			return err
		}},
		{"expiry", coffer.StatusExpired, time.Second, func(sc coffer.Scope) error {
			// Swept once its TTL has passed on the database's clock.
			for range 300 {
				if n, err := e.store.SweepHolds(ctx, 10); err != nil || n == 1 {
					return err
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("the hold was not swept")
		}},
	} {
		p := coffer.PlayerID(70 + i)
		e.mustChange(p, "seed", paid("gold", 5, fmt.Sprint("begin-", i)), free("gold", 10))
		req := coffer.ChangeRequest{Scope: scope(p, "match"), Hold: true, HoldTTL: end.ttl, Reason: "match", Meta: []byte(`{"b":1,"a":2}`),
			Ops: []coffer.OpRequest{free("gold", -12), free("silver", 3)}}
		first, _, err := e.store.Change(ctx, req)
		must(t, err)
		must(t, end.finish(req.Scope))
		again, replay, err := e.store.Change(ctx, req)
		if err != nil || !replay {
			t.Fatalf("%s: begin sent again: %v %v", end.name, replay, err)
		}
		sameAnswer(t, first, again)
		if now, err := e.store.Trx(ctx, req.Scope); err != nil || now.Status != end.status || now.Version != first.Version+1 {
			t.Fatalf("%s: the hold read back: %+v %v", end.name, now, err)
		}
	}
}
