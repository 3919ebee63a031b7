package postgres_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// mixedBatch is a batch over few players: grants, consumes (some lacking
// funds), holds, bad changes, and keys used twice, with the same payload
// (a replay) or another (a conflict), in namespace ns.
func mixedBatch(ns coffer.Namespace, n int) []coffer.ChangeRequest {
	rng := rand.New(rand.NewPCG(7, 11))
	currencies := []string{"gold", "silver"}
	var reqs []coffer.ChangeRequest
	for i := range n {
		player := coffer.PlayerID(1 + rng.IntN(24))
		req := coffer.ChangeRequest{Scope: coffer.Scope{Namespace: ns, PlayerID: player, Emitter: 7, IdempotencyKey: fmt.Sprintf("b-%d", i)},
			Reason: "season", Ops: []coffer.OpRequest{free(currencies[rng.IntN(2)], coffer.Amount(1+rng.IntN(100)))}}
		switch k := rng.IntN(10); {
		case k < 3:
			req.Ops[0].Amount = -coffer.Amount(1 + rng.IntN(150))
		case k == 3:
			req.Hold = true
			req.Ops = append(req.Ops, free("gold", -coffer.Amount(1+rng.IntN(20))))
		case k == 4:
			req.Ops[0].Amount = 0 // invalid_argument
		case k == 5 && i > 0:
			// Again an earlier change: as it was (a replay, or its
			// error again) or with another amount (a conflict).
			req = reqs[rng.IntN(len(reqs))]
			req.Ops = append([]coffer.OpRequest(nil), req.Ops...)
			if rng.IntN(2) == 0 {
				req.Ops[0].Amount += 1
			}
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// answer is what a test compares of a result: everything but the ids and
// times a second ledger gives otherwise.
func answer(r coffer.ChangeResult) coffer.ChangeResult {
	if r.Err != nil {
		return coffer.ChangeResult{Err: coffer.Errorf(coffer.ErrorCode(r.Err), "")}
	}
	t := r.Trx
	t.ID, t.CreatedAt, t.HoldExpiresAt = 0, time.Time{}, nil
	t.Ops = append([]coffer.Op(nil), t.Ops...)
	for i := range t.Ops {
		t.Ops[i].LotID = 0
	}
	return coffer.ChangeResult{Trx: t, Replay: r.Replay}
}

// TestBatchAnswersAsOneAtATime: every answer of a batch equals what the
// same changes sent one at a time, in request order, answer; the batch
// runs in namespace 1, the one-at-a-time reference in namespace 2.
func TestBatchAnswersAsOneAtATime(t *testing.T) {
	e := newEnv(t)
	const n = 400
	got, err := e.store.BatchChange(ctx, mixedBatch(1, n))
	must(t, err)
	if len(got) != n {
		t.Fatalf("%d results for %d changes", len(got), n)
	}
	codes := map[coffer.Code]int{}
	replays := 0
	for i, req := range mixedBatch(2, n) {
		var want coffer.ChangeResult
		want.Trx, want.Replay, want.Err = e.store.Change(ctx, req)
		if g, w := answer(got[i]), answer(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("change %d (%s, player %d): batch answered %+v, one at a time %+v", i, req.IdempotencyKey, req.PlayerID, g, w)
		}
		codes[coffer.ErrorCode(want.Err)]++
		if want.Replay {
			replays++
		}
	}
	// The batch covers what it means to.
	for _, c := range []coffer.Code{"", coffer.CodeInvalid, coffer.CodeInsufficientFunds, coffer.CodeIdempotencyConflict} {
		if codes[c] == 0 {
			t.Errorf("no change answered %q: %v", c, codes)
		}
	}
	if replays == 0 {
		t.Errorf("no replay in the batch")
	}
	// Sent again, the batch replays what was applied; a change that
	// failed is tried again (a consume may find funds now).
	again, err := e.store.BatchChange(ctx, mixedBatch(1, n))
	must(t, err)
	for i := range again {
		if got[i].Err == nil && (!again[i].Replay || again[i].Trx.ID != got[i].Trx.ID) {
			t.Fatalf("change %d sent again: %+v, first %+v", i, again[i], got[i])
		}
		if c := coffer.ErrorCode(got[i].Err); c == coffer.CodeInvalid && coffer.ErrorCode(again[i].Err) != c {
			t.Fatalf("change %d sent again: %v, first %v", i, again[i].Err, got[i].Err)
		}
	}
}

func TestBatchEnvelope(t *testing.T) {
	e := newEnv(t)
	for _, n := range []int{0, coffer.BatchChangesMax + 1} {
		reqs := make([]coffer.ChangeRequest, n)
		for i := range reqs {
			reqs[i] = coffer.ChangeRequest{Scope: scope(coffer.PlayerID(i+1), "k"), Ops: []coffer.OpRequest{free("gold", 1)}}
		}
		_, err := e.store.BatchChange(ctx, reqs)
		wantCode(t, err, coffer.CodeInvalid)
	}
	if b := e.balance(1, "gold"); b.Total != 0 {
		t.Fatalf("a refused batch wrote: %+v", b)
	}
}

// TestBatchTimeoutBoundsTheWholeBatch: the store's bounds hold for a
// batch as for a call: changes of a player locked elsewhere answer
// shard_unavailable after one wait for the lock, all of them, in one
// attempt, not one wait each; another player's change applies.
func TestBatchTimeoutBoundsTheWholeBatch(t *testing.T) {
	e := newEnv(t)
	e.mustChange(19, "a", free("gold", 5))
	id := e.router.Map().ShardOf(19)
	tx := begin(t, e.router.Shard(id))
	_, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = 19 FOR UPDATE`, id))
	must(t, err)
	// The lock is held until the test ends, so a short wait for it ends
	// the same on a busy machine; the other player's change has a call's
	// time.
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 100 * time.Millisecond, Observer: o})
	var reqs []coffer.ChangeRequest
	for i := range 4 {
		reqs = append(reqs, coffer.ChangeRequest{Scope: scope(19, fmt.Sprint("b", i)), Ops: []coffer.OpRequest{free("gold", 1)}})
	}
	reqs = append(reqs, coffer.ChangeRequest{Scope: scope(20, "c"), Ops: []coffer.OpRequest{free("gold", 1)}})
	got, err := store.BatchChange(ctx, reqs)
	must(t, err)
	for i := range 4 {
		wantCode(t, got[i].Err, coffer.CodeUnavailable)
	}
	must(t, got[4].Err)
	// The locked player's writes all wait for its lock: a lock timeout
	// is not split, and one attempt failed for all four (the careful one:
	// the first met the lock and ran again careful, ADR 0026).
	o.want(t, e.router.Map().Databases()[e.router.DatabaseIndex(id)].Name(), postgres.AttemptCareful, postgres.AttemptFailed)
}

// TestTimeoutBeforeTheCommitIsNotRetried: a batch whose time runs out in
// its first round trip (waiting for a player locked elsewhere, its lock
// timeout longer than its time) wrote nothing: it is not tried again,
// its write answers shard_unavailable, the database is not marked down,
// and once the lock is released nothing of it is found. (Its first
// attempt waits for no lock: it meets this one and runs again careful,
// ADR 0026; that careful attempt is the one whose time runs out.)
func TestTimeoutBeforeTheCommitIsNotRetried(t *testing.T) {
	e := newEnv(t)
	p := e.playersOn(0, 1, 1)[0]
	tx := e.lockElsewhere(p)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 300 * time.Millisecond, LockTimeout: 10 * time.Second, Observer: o})
	defer store.Close()
	req := coffer.ChangeRequest{Scope: scope(p, "a"), Ops: []coffer.OpRequest{free("gold", 1)}}
	_, _, err := store.Change(ctx, req)
	wantCode(t, err, coffer.CodeUnavailable)
	// The call and its batch's attempt have the same time: the attempt
	// ends just after the call.
	for deadline := time.Now().Add(5 * time.Second); len(o.all()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	o.want(t, "", postgres.AttemptCareful, postgres.AttemptFailed)
	if err := e.router.Writable(0); err != nil {
		t.Fatalf("the database was marked down: %v", err)
	}
	must(t, tx.Rollback(ctx))
	if _, err := e.store.Trx(ctx, req.Scope); coffer.ErrorCode(err) != coffer.CodeNotFound {
		t.Fatalf("the timed-out write: %v, want not found", err)
	}
}

// TestBatchSessionsEndAbandonedTransactions: a batch's transaction whose
// coffer is gone without a word after its first round trip (a partition:
// no FIN reaches the server) is ended by the server within the store's
// Timeout, which frees its players' locks instead of holding them until
// TCP gives up.
func TestBatchSessionsEndAbandonedTransactions(t *testing.T) {
	e := newEnv(t)
	p := e.playersOn(0, 1, 1)[0]
	cutter, _, cut := e.storeThroughCutter(postgres.Options{Timeout: 2 * time.Second, LockTimeout: 2 * time.Second})
	// A write sent again makes the committer's next batches careful
	// (ADR 0025): the one below takes the player's lock in its first
	// round trip (ADR 0026).
	for range 2 {
		_, _, err := cut.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "seed"), Ops: []coffer.OpRequest{free("gold", 1)}})
		must(t, err)
	}
	// The clock is read before the batch's second write is planned, once
	// its first round trip holds the player's lock: the client's side is
	// cut there, and the server's transaction is left idle.
	clock := newLateClock(1)
	var once sync.Once
	var wasCut atomic.Bool
	clock.late = func() {
		once.Do(func() {
			cutter.cutClients()
			wasCut.Store(true)
		})
	}
	cut.SetPlanClock(clock.now)
	_, err := cut.BatchChange(ctx, []coffer.ChangeRequest{{Scope: scope(p, "a"), Ops: []coffer.OpRequest{free("gold", 1)}},
		{Scope: scope(p, "b"), Ops: []coffer.OpRequest{free("gold", 2)}}})
	must(t, err)
	if !wasCut.Load() {
		t.Fatal("the batch was not cut after its first round trip")
	}
	// Another instance's write waits for the player's lock as long as it
	// takes: it passes once the server has ended the abandoned
	// transaction, and fails after a minute if it never does.
	other := postgres.New(e.router, e.catalog, postgres.Options{Timeout: time.Minute, LockTimeout: time.Minute})
	defer other.Close()
	if _, _, err := other.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "c"), Ops: []coffer.OpRequest{free("gold", 4)}}); err != nil {
		t.Fatalf("a write after the abandoned batch: %v", err)
	}
}

// TestBatchConnectionsCarryTheirSettings: the connections a store's
// batches run on start with the batches' settings (a statement per
// batch saved), and so does one made anew after the pool dropped its
// connections; the router's connections, on which claims, reports and
// the sweepers' listings run, keep the server's.
func TestBatchConnectionsCarryTheirSettings(t *testing.T) {
	e := newEnv(t)
	p := e.playersOn(0, 1, 1)[0]
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 3 * time.Second, LockTimeout: 700 * time.Millisecond})
	defer store.Close()
	batch := map[string]string{"enable_hashjoin": "off", "enable_mergejoin": "off", "plan_cache_mode": "force_generic_plan",
		"lock_timeout": "700ms", "idle_in_transaction_session_timeout": "3s"}
	server := map[string]string{"enable_hashjoin": "on", "enable_mergejoin": "on", "plan_cache_mode": "auto",
		"lock_timeout": "0", "idle_in_transaction_session_timeout": "0"}
	for i, name := range []string{"first", "made anew"} {
		if i > 0 {
			store.BatchPool(0).Reset()
		}
		if _, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, name), Ops: []coffer.OpRequest{free("gold", 1)}}); err != nil {
			t.Fatal(err)
		}
		wantSettings(t, name+": a connection of the batches", store.BatchPool(0), batch)
		wantSettings(t, name+": a connection of the router", e.router.Database(0), server)
	}
}

// wantSettings checks the settings of every idle connection of pool, or
// of one it makes if it has none.
func wantSettings(t *testing.T, what string, pool *pgxpool.Pool, want map[string]string) {
	t.Helper()
	conns := pool.AcquireAllIdle(ctx)
	if len(conns) == 0 {
		c, err := pool.Acquire(ctx)
		must(t, err)
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		for name, value := range want {
			var got string
			must(t, c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got))
			if got != value {
				t.Errorf("%s: %s = %s, want %s", what, name, got, value)
			}
		}
	}
}

// TestDamagedTrxFailsItsPlayerOnly: a stored trx whose JSON does not
// decode fails the writes of its player that read it, not the others of
// their batch (ADR 0012: a damaged player answers its own writes).
func TestDamagedTrxFailsItsPlayerOnly(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 2)
	damaged, other := ps[0], ps[1]
	e.mustChange(damaged, "a", free("gold", 5))
	e.exec(damaged, `UPDATE trx_N SET pending_grants = '{"not": "a list"}' WHERE player_id = $1 AND idempotency_key = 'a'`, int64(damaged))
	got, err := e.store.BatchChange(ctx, []coffer.ChangeRequest{
		{Scope: scope(damaged, "a"), Ops: []coffer.OpRequest{free("gold", 5)}, Reason: "test"},
		{Scope: scope(other, "b"), Ops: []coffer.OpRequest{free("gold", 7)}},
	})
	must(t, err)
	if coffer.ErrorCode(got[0].Err) != coffer.CodeInternal || !strings.Contains(got[0].Err.Error(), "does not decode") {
		t.Errorf("the damaged player's replay: %v", got[0].Err)
	}
	if got[1].Err != nil || got[1].Trx.Version != 1 {
		t.Fatalf("the other player's write: %+v", got[1])
	}
}

// TestPanickingPlanFailsItsWriteOnly: a write whose plan panics (a bug:
// here an exchange at a rate no catalog makes) is answered internal,
// alone; the other writes of its batch, its own player's too, get the
// answers they would have got without it, and it writes nothing.
func TestPanickingPlanFailsItsWriteOnly(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 2)
	buggy, other := ps[0], ps[1]
	e.mustChange(buggy, "grant", free("gold", 5))
	errs, err := e.store.BatchWithBug(ctx, []coffer.ChangeRequest{
		{Scope: scope(buggy, "a"), Ops: []coffer.OpRequest{free("gold", 1)}},
		{Scope: scope(other, "b"), Ops: []coffer.OpRequest{free("silver", 7)}},
		{Scope: scope(buggy, "c"), Ops: []coffer.OpRequest{free("gold", -2)}},
	}, coffer.ExchangeRequest{Scope: scope(buggy, "bug"), From: "gold", To: "silver", Amount: 1}, 1)
	must(t, err)
	for i, err := range errs {
		if i == 1 && coffer.ErrorCode(err) != coffer.CodeInternal || i != 1 && err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if !strings.Contains(errs[1].Error(), "panic") {
		t.Errorf("the buggy write's error does not tell the panic: %v", errs[1])
	}
	if g, s := e.balance(buggy, "gold").Total, e.balance(buggy, "silver").Total; g != 4 || s != 0 {
		t.Errorf("the buggy write's player holds %d gold, %d silver; want 4, 0", g, s)
	}
	if s := e.balance(other, "silver").Total; s != 7 {
		t.Errorf("the other player holds %d silver; want 7", s)
	}
}

// TestDamagedLotFailsOnlyTheWritesThatReadIt: a player's damaged lot
// fails the writes of the player that read it, not another write of the
// player in the same batch that would not read it alone (a hold's commit
// reads all the player's lots, a change those of its currencies).
func TestDamagedLotFailsOnlyTheWritesThatReadIt(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 2)
	blocker, p := ps[0], ps[1]
	e.mustChange(p, "gold", free("gold", 5))
	e.mustChange(p, "silver", free("silver", 5))
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "hold"), Hold: true, Ops: []coffer.OpRequest{free("gold", -1)}})
	must(t, err)
	e.damaged = true
	e.exec(p, `UPDATE lot_N l SET reserved = -1 FROM trx_N t
		WHERE t.player_id = $1 AND t.idempotency_key = 'silver' AND l.player_id = t.player_id AND l.trx_id = t.trx_id`, int64(p))
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	var commitErr, changeErr error
	tx, errs := e.queuedBehind(store, blocker,
		func() error { _, _, commitErr = store.Commit(ctx, byItsClient(p, "hold")); return nil },
		func() error {
			_, _, changeErr = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "more"), Ops: []coffer.OpRequest{free("gold", 1)}})
			return nil
		})
	must(t, tx.Rollback(ctx))
	for range 3 {
		must(t, <-errs)
	}
	if coffer.ErrorCode(commitErr) != coffer.CodeInternal {
		t.Errorf("the commit, which reads the damaged lot: %v", commitErr)
	}
	if changeErr != nil {
		t.Errorf("the change of gold, which does not: %v", changeErr)
	}
}

// TestBatchStatementsFitTheCache: the statements the batches prepare
// stay in their connections' cache, however many shards a database
// holds: a workload of every kind of write and read prepares at most
// BatchStatementsPerShard per shard, and a store over a database of 256
// shards caches that many for each (pgx's default, 512, holds those of
// 32 shards: past it the batches, cycling through the shards, prepare
// and plan every statement again).
func TestBatchStatementsFitTheCache(t *testing.T) {
	e := newEnv(t)
	reqs := mixedBatch(1, 200)
	_, err := e.store.BatchChange(ctx, reqs)
	must(t, err)
	for _, r := range reqs {
		if r.Hold {
			_, _, _ = e.store.Commit(ctx, coffer.FinishRequest{Scope: r.Scope, By: r.Emitter})
		}
		_, _, _ = e.store.Change(ctx, r)
		e.balance(r.PlayerID, "gold")
	}
	tables := regexp.MustCompile(`\b(balance|lot|trx|op)_(\d+)\b`)
	conns := e.store.BatchPool(0).AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		rows, err := c.Query(ctx, "SELECT statement FROM pg_prepared_statements")
		must(t, err)
		statements, err := pgx.CollectRows(rows, pgx.RowTo[string])
		must(t, err)
		perShard := map[string]int{}
		for _, s := range statements {
			if m := tables.FindStringSubmatch(s); m != nil {
				perShard[m[2]]++
			}
		}
		if len(perShard) != 4 {
			t.Errorf("statements of %d shards prepared, want the database's 4", len(perShard))
		}
		for id, n := range perShard {
			if n > postgres.BatchStatementsPerShard {
				t.Errorf("shard %s: %d statements prepared, more than %d", id, n, postgres.BatchStatementsPerShard)
			}
		}
	}
	m, err := shard.NewMap(shard.Config{ShardCount: 256, DistributionMode: "auto", ShardOnDB: 256,
		Databases: []shard.DatabaseConfig{{Name: "unused", Host: "127.0.0.1", Port: 1, User: "nobody"}}})
	must(t, err)
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	must(t, err)
	defer router.Close()
	store := postgres.New(router, e.catalog, postgres.Options{})
	defer store.Close()
	if got := store.BatchPool(0).Config().ConnConfig.StatementCacheCapacity; got < 256*postgres.BatchStatementsPerShard {
		t.Errorf("a database of 256 shards: the batches cache %d statements, want at least %d", got, 256*postgres.BatchStatementsPerShard)
	}
}
