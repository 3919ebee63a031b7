package postgres_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
)

func TestChangeReplayAndConflict(t *testing.T) {
	e := newEnv(t)
	trx := e.mustChange(42, "order-1", paid("gold", 500, "o1"), free("gold", 50))
	if trx.Version != 1 || len(trx.Ops) != 2 || trx.Ops[1].BalanceAfter != 550 || trx.Balances[0].Paid != 500 {
		t.Fatalf("trx = %+v", trx)
	}
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(42, "order-1"),
		Ops: []coffer.OpRequest{paid("gold", 500, "o1"), free("gold", 50)}, Reason: "test"})
	if err != nil || !replayed || again.ID != trx.ID || again.Version != 1 {
		t.Fatalf("replay = %+v %v %v", again, replayed, err)
	}
	_, err = e.change(42, "order-1", free("gold", 51))
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	if b := e.balance(42, "gold"); b.Total != 550 || b.Paid != 500 || b.Free != 50 || len(b.Lots) != 2 {
		t.Fatalf("balance = %+v", b)
	}
	// The same key from another emitter is another trx.
	sc := scope(42, "order-1")
	sc.Emitter = 8
	if _, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: sc, Ops: []coffer.OpRequest{free("gold", 1)}}); err != nil || replayed {
		t.Fatalf("other emitter: %v %v", replayed, err)
	}
}

// TestReplayOfSpentConsume retries a consume whose currency has been spent
// since: the retry gets the first answer, not insufficient_funds, and a
// changed payload under the key is still a conflict.
func TestReplayOfSpentConsume(t *testing.T) {
	e := newEnv(t)
	e.mustChange(43, "grant", free("gold", 100))
	buy := e.mustChange(43, "buy", free("gold", -100))
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(43, "buy"),
		Ops: []coffer.OpRequest{free("gold", -100)}, Reason: "test"})
	if err != nil || !replayed || again.ID != buy.ID || again.Version != 2 {
		t.Fatalf("replay = %+v %v %v", again, replayed, err)
	}
	_, err = e.change(43, "buy", free("gold", -5))
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	b, _ := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 43, Currency: "gold"})
	if b.Version != 2 || b.Balances[0].Total != 0 {
		t.Fatalf("after the replays: %+v", b)
	}
}

func TestInsufficientFundsWritesNothing(t *testing.T) {
	e := newEnv(t)
	e.mustChange(1, "a", free("gold", 100), free("silver", 5))
	_, err := e.change(1, "b", free("silver", -1), free("gold", -101))
	wantCode(t, err, coffer.CodeInsufficientFunds)
	b, _ := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 1})
	if b.Version != 1 || b.Balances[0].Total != 100 || b.Balances[1].Total != 5 {
		t.Fatalf("after a rejected trx: %+v", b)
	}
	// The key of the rejected request is free for a corrected retry.
	trx := e.mustChange(1, "b", free("silver", -1), free("gold", -100))
	if trx.Version != 2 {
		t.Fatalf("retry: %+v", trx)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t)
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'k'
	}
	past := time.Now().Add(-time.Hour)
	cases := []struct {
		key string
		ops []coffer.OpRequest
	}{
		{"zero", []coffer.OpRequest{free("gold", 0)}},
		{"too big", []coffer.OpRequest{free("gold", coffer.OpAmountMax+1)}},
		{"too negative", []coffer.OpRequest{free("gold", -coffer.OpAmountMax-1)}},
		{"unknown currency", []coffer.OpRequest{free("rubies", 1)}},
		{"paid free-only", []coffer.OpRequest{paid("credits", 1, "x")}},
		{"paid without purchase", []coffer.OpRequest{{Currency: "gold", Amount: 1, Kind: "paid"}}},
		{"expired grant", []coffer.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &past}}},
		{"no ops", nil},
		{string(long), []coffer.OpRequest{free("gold", 1)}},
		{"", []coffer.OpRequest{free("gold", 1)}},
	}
	for _, c := range cases {
		_, err := e.change(3, c.key, c.ops...)
		wantCode(t, err, coffer.CodeInvalid)
	}
	if trx := e.mustChange(3, "max", free("gold", coffer.OpAmountMax)); trx.Balances[0].Total != coffer.OpAmountMax {
		t.Fatalf("10^15 grant: %+v", trx)
	}
}

func TestSpendOrder(t *testing.T) {
	e := newEnv(t)
	soon, later := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	e.mustChange(5, "g1", paid("gold", 10, "p1"))
	e.mustChange(5, "g2", free("gold", 10))
	e.mustChange(5, "g3", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &later})
	e.mustChange(5, "g4", coffer.OpRequest{Currency: "gold", Amount: 10, ExpiresAt: &soon})
	trx := e.mustChange(5, "spend", free("gold", -35))
	// soonest-expiring, then later-expiring, then free, then paid.
	var got []coffer.Amount
	for _, op := range trx.Ops {
		got = append(got, op.Amount)
	}
	if fmt.Sprint(got) != "[-10 -10 -10 -5]" || !trx.Ops[3].Paid || trx.Ops[2].Paid {
		t.Fatalf("ops = %+v", trx.Ops)
	}
	if b := e.balance(5, "gold"); b.Total != 5 || b.Paid != 5 {
		t.Fatalf("balance = %+v", b)
	}
}

func TestHoldLifecycle(t *testing.T) {
	e := newEnv(t)
	e.mustChange(7, "seed", paid("gold", 30, "p"), free("gold", 20))
	begin := func(key string, ttl time.Duration) coffer.Trx {
		trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(7, key), Hold: true, HoldTTL: ttl,
			Ops: []coffer.OpRequest{free("gold", -40), free("silver", 5)}})
		must(t, err)
		return trx
	}
	h := begin("h1", 0)
	if h.Status != coffer.StatusPending || e.balance(7, "gold").Total != 10 || e.balance(7, "silver").Total != 0 ||
		len(h.Balances) != 1 || h.Balances[0].Total != 10 || h.Balances[0].Paid != 10 {
		t.Fatalf("begin: %+v", h)
	}
	sameAnswer(t, h, begin("h1", 0))
	c, replayed, err := e.store.Commit(ctx, byItsClient(7, "h1"))
	if err != nil || replayed || c.Status != coffer.StatusCommitted || c.FinishedBy != 7 || e.balance(7, "silver").Total != 5 ||
		len(c.Balances) != 1 || c.Balances[0].Currency != "silver" || c.Balances[0].Total != 5 {
		t.Fatalf("commit: %+v %v %v", c, replayed, err)
	}
	again, replayed, err := e.store.Commit(ctx, byItsClient(7, "h1"))
	if err != nil || !replayed {
		t.Fatalf("second commit: %v %v", replayed, err)
	}
	sameAnswer(t, c, again)
	_, _, err = e.store.Rollback(ctx, byItsClient(7, "h1"))
	wantCode(t, err, coffer.CodeHoldNotPending)

	e.mustChange(7, "refill", free("gold", 30))
	before := e.balance(7, "gold")
	begin("h2", 0)
	// Rolled back by a support agent's client (emitter 9): the trx names
	// it, also when its own client's rollback replays it.
	r, _, err := e.store.Rollback(ctx, coffer.FinishRequest{Scope: scope(7, "h2"), By: 9})
	if err != nil || r.Status != coffer.StatusRolledBack || r.FinishedBy != 9 || r.Balances[0].Total != before.Total {
		t.Fatalf("rollback: %+v %v", r, err)
	}
	again, _, err = e.store.Rollback(ctx, byItsClient(7, "h2"))
	must(t, err)
	sameAnswer(t, r, again)
	if read, err := e.store.Trx(ctx, scope(7, "h2")); err != nil || read.FinishedBy != 9 {
		t.Fatalf("the rolled-back hold read: by %d, %v", read.FinishedBy, err)
	}
	after := e.balance(7, "gold")
	if fmt.Sprint(after.Lots) != fmt.Sprint(before.Lots) {
		t.Fatalf("rollback did not restore the very lots:\n%+v\n%+v", before.Lots, after.Lots)
	}
	_, _, err = e.store.Commit(ctx, byItsClient(7, "h2"))
	wantCode(t, err, coffer.CodeHoldNotPending)

	begin("h3", time.Second)
	time.Sleep(1100 * time.Millisecond)
	n, err := e.store.SweepHolds(ctx, 100)
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	if n, _ := e.store.SweepHolds(ctx, 100); n != 0 {
		t.Fatalf("second sweep rolled back %d", n)
	}
	_, _, err = e.store.Commit(ctx, byItsClient(7, "h3"))
	wantCode(t, err, coffer.CodeHoldExpired)
	if swept, err := e.store.Trx(ctx, scope(7, "h3")); err != nil || swept.Status != coffer.StatusExpired || swept.FinishedBy != 0 {
		t.Fatalf("the swept hold: %s by %d, %v", swept.Status, swept.FinishedBy, err)
	}
	if got := e.balance(7, "gold").Total; got != after.Total {
		t.Fatalf("expired hold kept %d", after.Total-got)
	}
	_, _, err = e.store.Commit(ctx, byItsClient(7, "nope"))
	wantCode(t, err, coffer.CodeNotFound)
	_, _, err = e.store.Commit(ctx, byItsClient(7, "seed"))
	wantCode(t, err, coffer.CodeHoldNotPending)
}

func TestExchange(t *testing.T) {
	e := newEnv(t)
	e.mustChange(9, "seed", paid("gold", 3, "p"), free("gold", 2), free("silver", 19))
	ex := func(key, from, to string, amount coffer.Amount) (coffer.Trx, error) {
		trx, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(9, key), From: from, To: to, Amount: amount})
		return trx, err
	}
	// Free is spent first: 2 free + 1 paid gold → 100 paid silver, 200 free.
	if _, err := ex("x1", "gold", "silver", 3); err != nil {
		t.Fatal(err)
	}
	if b := e.balance(9, "silver"); b.Total != 319 || b.Paid != 100 {
		t.Fatalf("silver = %+v", b)
	}
	// Into a free-only currency: 19 silver → 1 credit (rounded down).
	if _, err := ex("x2", "silver", "credits", 19); err != nil {
		t.Fatal(err)
	}
	if b := e.balance(9, "credits"); b.Total != 1 || b.Paid != 0 {
		t.Fatalf("credits = %+v", b)
	}
	_, err := ex("x3", "silver", "credits", 9)
	wantCode(t, err, coffer.CodeInvalid) // yields 0
	_, err = ex("x4", "credits", "gold", 1)
	wantCode(t, err, coffer.CodeInvalid) // no such pair
	_, err = ex("x5", "gold", "silver", 10)
	wantCode(t, err, coffer.CodeInsufficientFunds)
}

// TestTimeoutBoundsTheLockWait: a write on a player whose lock another
// transaction holds gives up at the store's Timeout with shard_unavailable
// (retry with the same key), instead of waiting as long as the lock is
// held; the timeout bounds every statement of the write.
func TestTimeoutBoundsTheLockWait(t *testing.T) {
	e := newEnv(t)
	e.mustChange(19, "a", free("gold", 5))
	id := e.router.Map().ShardOf(19)
	tx := begin(t, e.router.Shard(id))
	_, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = 19 FOR UPDATE`, id))
	must(t, err)
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 300 * time.Millisecond})
	_, _, err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(19, "b"), Ops: []coffer.OpRequest{free("gold", 1)}})
	wantCode(t, err, coffer.CodeUnavailable)
}

// TestConcurrentWrites runs grants, consumes and holds on one player and on
// others in parallel, with two sweepers; the totals must equal the sum of
// what succeeded.
func TestConcurrentWrites(t *testing.T) {
	e := newEnv(t)
	const workers, rounds = 12, 25
	var mu sync.Mutex
	sum := map[coffer.PlayerID]coffer.Amount{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				player := coffer.PlayerID(100 + (w+i)%3)
				key := fmt.Sprintf("w%d-%d", w, i)
				amount := coffer.Amount(1 + (w*7+i)%13)
				if i%4 == 3 {
					amount = -amount
				}
				hold := i%5 == 4
				trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Hold: hold, Ops: []coffer.OpRequest{free("gold", amount)}})
				if err != nil {
					if coffer.ErrorCode(err) != coffer.CodeInsufficientFunds {
						t.Error(err)
					}
					continue
				}
				if hold {
					if i%2 == 0 {
						_, _, err = e.store.Commit(ctx, byItsClient(player, key))
					} else {
						_, _, err = e.store.Rollback(ctx, byItsClient(player, key))
						amount = 0
					}
					if err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				sum[player] += amount
				mu.Unlock()
				_ = trx
			}
		}(w)
	}
	stop := make(chan struct{})
	var sweepers sync.WaitGroup
	for i := 0; i < 2; i++ {
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.store.SweepHolds(ctx, 10); err != nil {
					t.Error(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(stop)
	sweepers.Wait()
	for player, want := range sum {
		if got := e.balance(player, "gold").Total; got != want {
			t.Errorf("player %d: balance %d, sum of accepted ops %d", player, got, want)
		}
	}
}

func TestSameKeyInParallelAppliesOnce(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := make([]int64, 10)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			trx, err := e.change(21, "once", free("gold", 5))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = trx.ID
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("different trx ids for one key: %v", ids)
		}
	}
	if b := e.balance(21, "gold"); b.Total != 5 {
		t.Fatalf("applied more than once: %+v", b)
	}
}

// TestShardDownIsUnavailableAndRecovers stops the server of one database:
// its players get shard_unavailable, the other database's players keep
// working, and the same key succeeds once the server is back.
func TestShardDownIsUnavailableAndRecovers(t *testing.T) {
	own, err := pgserver.Start(ctx, pgserver.Options{})
	must(t, err)
	t.Cleanup(own.Remove) // after the env's closing audit, which needs it up
	e := newEnvOn(t, pgtest.Server(t, 0), own)
	var up, down coffer.PlayerID
	for p := coffer.PlayerID(1); up == 0 || down == 0; p++ {
		if e.router.Map().DatabaseOf(e.router.Map().ShardOf(p)).Index == 0 {
			up = p
		} else {
			down = p
		}
	}
	e.mustChange(up, "a", free("gold", 5))
	e.mustChange(down, "a", free("gold", 5))
	must(t, own.Stop())
	_, err = e.change(down, "b", free("gold", 1))
	wantCode(t, err, coffer.CodeUnavailable)
	// The failure marked the database down: the next request is refused
	// without trying to connect.
	_, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: down})
	wantCode(t, err, coffer.CodeUnavailable)
	if !strings.Contains(err.Error(), "down (a connection failed") {
		t.Fatalf("not refused fast: %v", err)
	}
	e.mustChange(up, "b", free("gold", 1))
	// The audit checks every shard it reaches and reports each check it
	// could not run, without stopping at the first.
	r, err := (&audit.Checker{Router: e.router}).Check(ctx)
	if err == nil || len(r.Violations) > 0 || len(r.Failures) == 0 || r.Totals["1/1"] == nil || r.Totals["1/1"].Int64() != 6 {
		t.Fatalf("audit with a database down: %v\n%+v", err, r)
	}
	for _, f := range r.Failures {
		if e.router.Map().DatabaseOf(f.Shard).Index != 1 {
			t.Fatalf("a check failed on a shard that is up: %+v", f)
		}
	}
	must(t, own.Start(ctx))
	// Once the cooldown is over, the same key goes through.
	deadline := time.Now().Add(shard.DownCooldown + 5*time.Second)
	for {
		_, err = e.change(down, "b", free("gold", 1))
		if coffer.ErrorCode(err) != coffer.CodeUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	must(t, err)
	if b := e.balance(down, "gold"); b.Total != 6 {
		t.Fatalf("after recovery: %+v", b)
	}
}
