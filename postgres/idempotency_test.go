package postgres_test

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
)

// TestRetryOfATrxStoredBeforeHashesHadAVersion: a trx written by an
// earlier coffer keeps the hash it computed (16 bytes, no version); a
// retry sent unchanged after the upgrade still replays, one spelled
// differently is a conflict, as it was then.
func TestRetryOfATrxStoredBeforeHashesHadAVersion(t *testing.T) {
	e := newEnv(t)
	e.mustChange(42, "seed", coffer.OpRequest{Currency: "silver", Amount: 20})
	exp := time.Date(2031, 2, 3, 4, 5, 6, 789123456, time.FixedZone("x", 3600))
	req := coffer.ChangeRequest{Scope: scope(42, "order-7731"), Reason: "purchase", Meta: []byte(`{"b": 2.50, "a": "<x>", "c": [1e2, null, true]}`),
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 500, Kind: "paid", Purchase: &coffer.Purchase{Store: "steam", OrderID: "7731", Price: 499, Fiat: "USD"}},
			{Currency: "credits", Amount: 20, Kind: "free", ExpiresAt: &exp, Priority: 3}, {Currency: "silver", Amount: -20}}}
	first, _, err := e.store.Change(ctx, req)
	must(t, err)
	// The hash an earlier coffer stored for this request (coffer's
	// TestHashV1 holds the same value).
	v1, _ := hex.DecodeString("456c7748c7277b25e56f848b450af0c0")
	id := e.router.Map().ShardOf(42)
	tag, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE trx_%d SET request_hash = $1 WHERE idempotency_key = 'order-7731'`, id), v1)
	must(t, err)
	if tag.RowsAffected() != 1 {
		t.Fatalf("updated %d trx", tag.RowsAffected())
	}
	again, replay, err := e.store.Change(ctx, req)
	if err != nil || !replay || again.ID != first.ID {
		t.Fatalf("unchanged retry: %+v %v %v", again, replay, err)
	}
	req.Ops[1].Kind = ""
	if _, _, err := e.store.Change(ctx, req); coffer.ErrorCode(err) != coffer.CodeIdempotencyConflict {
		t.Fatalf("a retry spelled otherwise of a trx hashed before: %v", err)
	}
}

// TestEqualRequestsReplayOnBothPaths: a single grant (one statement,
// grant_trx) and a planned change both take a retry that means the same
// write for a replay, and another write for a conflict.
func TestEqualRequestsReplayOnBothPaths(t *testing.T) {
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
