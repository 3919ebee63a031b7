package postgres_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/postgres"
)

// playersOn lists n players whose rows live on database db, from first up.
func (e *env) playersOn(db int, first coffer.PlayerID, n int) []coffer.PlayerID {
	var out []coffer.PlayerID
	for p := first; len(out) < n; p++ {
		if e.router.DatabaseIndex(e.router.Map().ShardOf(p)) == db {
			out = append(out, p)
		}
	}
	return out
}

// orderOn is an order id, from prefix, whose claim lives on database db.
func (e *env) orderOn(db int, prefix string) string {
	for i := 0; ; i++ {
		order := fmt.Sprintf("%s-%d", prefix, i)
		at := e.router.Map().ShardOfPurchase(coffer.PurchaseKey{Namespace: 1, Store: "steam", OrderID: order})
		if e.router.DatabaseIndex(at) == db {
			return order
		}
	}
}

// TestOrderCreditedOnceAcrossDatabases sends each order at once from many
// goroutines, for many players on both databases, two keys each: exactly
// one request credits it, every other is purchase_already_credited and
// names nothing of the winner, and no other player holds any of it.
func TestOrderCreditedOnceAcrossDatabases(t *testing.T) {
	e := newEnv(t)
	players := append(e.playersOn(0, 1000, 8), e.playersOn(1, 1000, 8)...)
	orders := []string{e.orderOn(0, "race"), e.orderOn(0, "rush"), e.orderOn(1, "race"), e.orderOn(1, "rush")}
	type result struct {
		player coffer.PlayerID
		key    string
		err    error
	}
	results := map[string][]result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, order := range orders {
		for _, p := range players {
			for k := range 2 {
				key := fmt.Sprintf("buyer-%d-%s-%d", p, order, k)
				wg.Go(func() {
					<-start
					_, err := e.change(p, key, paid("gold", 100, order))
					mu.Lock()
					results[order] = append(results[order], result{p, key, err})
					mu.Unlock()
				})
			}
		}
	}
	close(start)
	wg.Wait()
	won := map[coffer.PlayerID]coffer.Amount{}
	for _, order := range orders {
		var winners []result
		for _, r := range results[order] {
			if r.err == nil {
				winners = append(winners, r)
			}
		}
		if len(winners) != 1 {
			t.Fatalf("order %s credited %d times: %+v", order, len(winners), winners)
		}
		w := winners[0]
		won[w.player] += 100
		for _, r := range results[order] {
			if r.err == nil {
				continue
			}
			wantCode(t, r.err, coffer.CodePurchaseAlreadyCredited)
			if msg := r.err.Error(); strings.Contains(msg, fmt.Sprint(w.player)) || strings.Contains(msg, w.key) || !strings.Contains(msg, order) {
				t.Fatalf("refusal %q names the winner (player %d, key %s) or misses the order", msg, w.player, w.key)
			}
		}
	}
	for _, p := range players {
		if b := e.balance(p, "gold"); b.Total != won[p] || b.Paid != won[p] {
			t.Fatalf("player %d holds %+v, won %d", p, b, won[p])
		}
	}
}

// TestPurchaseRetryIsAReplay: the claimant's retry of a credited order is
// a replay (a changed payload idempotency_conflict); the order from any
// other scope — another key, player or emitter — is refused and writes
// nothing. A bundle (one order on several paid grants) is one claim.
func TestPurchaseRetryIsAReplay(t *testing.T) {
	e := newEnv(t)
	bundle := []coffer.OpRequest{paid("gold", 100, "o-7731"), paid("silver", 5, "o-7731")}
	first, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(60, "buy"), Ops: bundle, Reason: "test"})
	if err != nil || replayed {
		t.Fatalf("first: %v %v", replayed, err)
	}
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(60, "buy"), Ops: bundle, Reason: "test"})
	if err != nil || !replayed || again.ID != first.ID {
		t.Fatalf("retry: %+v %v %v", again, replayed, err)
	}
	_, err = e.change(60, "buy", paid("gold", 101, "o-7731"))
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	otherEmitter := scope(60, "buy")
	otherEmitter.Emitter = 8
	for _, sc := range []coffer.Scope{scope(60, "buy-again"), scope(61, "buy"), otherEmitter} {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: sc, Ops: bundle[:1], Reason: "test"})
		wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
		_, err = e.store.Trx(ctx, sc)
		wantCode(t, err, coffer.CodeNotFound)
	}
	// A change that credits an order of its own and one credited already
	// is refused whole.
	_, err = e.change(61, "two", paid("gold", 1, "o-new"), paid("gold", 1, "o-7731"))
	wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
	if g, s := e.balance(60, "gold"), e.balance(60, "silver"); g.Paid != 100 || s.Paid != 5 {
		t.Fatalf("claimant holds gold %+v silver %+v", g, s)
	}
	if b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 61}); err != nil || b.Version != 0 {
		t.Fatalf("the refused player: %+v %v", b, err)
	}
}

// TestFailedPurchaseKeepsItsClaim: a request that claimed its order and
// then failed (insufficient_funds in another op) keeps the claim for its
// scope: another request is refused, and the same key, sent again once
// the player can pay, credits the order.
func TestFailedPurchaseKeepsItsClaim(t *testing.T) {
	e := newEnv(t)
	buy := []coffer.OpRequest{paid("gold", 100, "o-poor"), free("silver", -5)}
	_, err := e.change(62, "buy", buy...)
	wantCode(t, err, coffer.CodeInsufficientFunds)
	_, err = e.change(63, "buy", paid("gold", 100, "o-poor"))
	wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
	e.mustChange(62, "earn", free("silver", 5))
	e.mustChange(62, "buy", buy...)
	if g := e.balance(62, "gold"); g.Paid != 100 {
		t.Fatalf("gold %+v", g)
	}
}

// TestCrashBetweenClaimAndCredit: a request that claimed its order (on the
// other database than its player's) and stopped before the credit, as a
// crash there leaves it, keeps the order from everyone else; its retry
// with the same key credits it once, and then replays.
func TestCrashBetweenClaimAndCredit(t *testing.T) {
	e := newEnv(t)
	p := e.playersOn(0, 70, 1)[0]
	req := coffer.ChangeRequest{Scope: scope(p, "buy"), Ops: []coffer.OpRequest{paid("gold", 100, e.orderOn(1, "crash"))}, Reason: "test"}
	must(t, e.store.ClaimOnly(ctx, req))
	if b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p}); err != nil || b.Version != 0 {
		t.Fatalf("credited before the write: %+v %v", b, err)
	}
	other := req
	other.Scope = scope(e.playersOn(1, 70, 1)[0], "buy")
	_, _, err := e.store.Change(ctx, other)
	wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
	first, replayed, err := e.store.Change(ctx, req)
	if err != nil || replayed {
		t.Fatalf("retry after the crash: %v %v", replayed, err)
	}
	again, replayed, err := e.store.Change(ctx, req)
	if err != nil || !replayed || again.ID != first.ID {
		t.Fatalf("replay: %+v %v %v", again, replayed, err)
	}
	if g := e.balance(p, "gold"); g.Total != 100 {
		t.Fatalf("gold %+v", g)
	}
}

// TestHoldClaimsItsOrderAtBegin: a hold's paid grant claims its order when
// the hold begins, so a commit cannot meet a claim; a rolled back hold
// keeps its claim (the order stays with its key).
func TestHoldClaimsItsOrderAtBegin(t *testing.T) {
	e := newEnv(t)
	for _, key := range []string{"commit", "rollback"} {
		req := coffer.ChangeRequest{Scope: scope(64, key), Ops: []coffer.OpRequest{paid("gold", 10, "o-"+key)}, Hold: true}
		_, _, err := e.store.Change(ctx, req)
		must(t, err)
		_, err = e.change(65, key, paid("gold", 10, "o-"+key))
		wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
	}
	_, _, err := e.store.Commit(ctx, byItsClient(64, "commit"))
	must(t, err)
	_, _, err = e.store.Rollback(ctx, byItsClient(64, "rollback"))
	must(t, err)
	_, err = e.change(65, "later", paid("gold", 10, "o-rollback"))
	wantCode(t, err, coffer.CodePurchaseAlreadyCredited)
	if g := e.balance(64, "gold"); g.Paid != 10 {
		t.Fatalf("gold %+v", g)
	}
}

// TestAuditChecksClaims: the audit finds a credit whose order has no
// claim, one whose claim names another request, and (on one shard) an
// order credited by two trx.
func TestAuditChecksClaims(t *testing.T) {
	e := newEnv(t)
	e.damaged = true
	p := []coffer.PlayerID{80, 81}
	for e.router.Map().ShardOf(p[1]) != e.router.Map().ShardOf(p[0]) {
		p[1]++
	}
	e.mustChange(p[0], "a", paid("gold", 1, "o-lost"))
	first := e.mustChange(p[0], "b", paid("gold", 1, "o-twice"))
	for _, order := range []string{"o-lost", "o-twice"} {
		at := e.router.Map().ShardOfPurchase(coffer.PurchaseKey{Namespace: 1, Store: "steam", OrderID: order})
		_, err := e.router.Shard(at).Exec(ctx, fmt.Sprintf(`DELETE FROM purchase_claim_%d WHERE order_id = $1`, at), order)
		must(t, err)
	}
	// The claim is gone, so a second player gets the order: two credits.
	e.mustChange(p[1], "c", paid("gold", 1, "o-twice"))
	r, err := (&audit.Checker{Router: e.router, HoldGrace: time.Minute}).Check(ctx)
	must(t, err)
	var got []string
	for _, v := range r.Violations {
		got = append(got, v.Check+": "+v.Detail)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`purchase without its claim: ns 1 store "steam" order "o-lost" credited by trx`,
		fmt.Sprintf(`order "o-twice" credited by trx %d of player %d: the claim on shard`, first.ID, p[0]),
		"order credited twice: 1 steam o-twice",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("audit misses %q in:\n%s", want, all)
		}
	}
	if len(got) != 3 {
		t.Fatalf("audit found %d violations, want 3:\n%s", len(got), all)
	}
}

// TestClaimWaitsForAClaimInFlight: a claim that meets another request's
// claim not yet committed waits for it, and then, though its statement
// could not see that claim, reads it and is refused. The claim waits
// while the test sees it wait, so it has a call's time, not a default.
func TestClaimWaitsForAClaimInFlight(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second})
	defer store.Close()
	at := e.router.Map().ShardOfPurchase(coffer.PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o-flight"})
	tx := begin(t, e.router.Shard(at))
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO purchase_claim_%d VALUES (1, 'steam', 'o-flight', 91, 7, 'first', now())`, at))
	must(t, err)
	done := make(chan error)
	go func() {
		_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(90, "buy"), Ops: []coffer.OpRequest{paid("gold", 1, "o-flight")}})
		done <- err
	}()
	e.waitForBackend(e.router.DatabaseIndex(at), "%purchase_claim_%")
	must(t, tx.Commit(ctx))
	wantCode(t, <-done, coffer.CodePurchaseAlreadyCredited)
}

// TestBatchClaimThatStallsFailsItsChangeOnly: in a batch, a change whose
// order's claim waits (on a claim in flight that never ends) fails
// shard_unavailable after half the batch's time, and the change beside
// it, which claims nothing, is applied, as it would be alone.
func TestBatchClaimThatStallsFailsItsChangeOnly(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 2 * time.Second})
	defer store.Close()
	at := e.router.Map().ShardOfPurchase(coffer.PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o-stall"})
	tx := begin(t, e.router.Shard(at))
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO purchase_claim_%d VALUES (1, 'steam', 'o-stall', 91, 7, 'first', now())`, at))
	must(t, err)
	got, err := store.BatchChange(ctx, []coffer.ChangeRequest{
		{Scope: scope(92, "buy"), Ops: []coffer.OpRequest{paid("gold", 1, "o-stall")}},
		{Scope: scope(93, "gift"), Ops: []coffer.OpRequest{free("gold", 2)}},
	})
	must(t, err)
	wantCode(t, got[0].Err, coffer.CodeUnavailable)
	if got[1].Err != nil || got[1].Trx.Balances[0].Total != 2 {
		t.Fatalf("the change that claims nothing: %+v", got[1])
	}
}
