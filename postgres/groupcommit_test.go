package postgres_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestBatchIsTwoRoundTrips: the writes of one database in one batch cost
// two round trips (the locks and state; the rows, the committer's mark
// and COMMIT) and at most three statements per shard and two per batch
// more, however many writes and players: three hundred of every kind
// over forty players, replays within the batch among them. A lone write,
// the batch of every write at low load, sends five: BEGIN, the player's
// row, its lots; the rows with the mark; COMMIT. The writes' own keys
// are not read: trx_N_idempotency refuses a trx under a key that has one.
// A batch with writes refused runs again careful (errRefusedAtSnapshot):
// two round trips more (its ROLLBACK; the locks, the state and the
// keys), three statements per shard and two per batch more; a write
// sent again, TestWriteSentAgain. The batch's settings come with its
// connection (batchSession), not in a statement.
func TestBatchIsTwoRoundTrips(t *testing.T) {
	e := newEnv(t)
	players := e.playersOn(0, 1, 40)
	shards := int64(len(e.router.Map().Databases()[0].Shards))
	for _, p := range players {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "first"), Ops: []coffer.OpRequest{free("gold", 1000)}})
		must(t, err)
	}
	one := []coffer.ChangeRequest{{Scope: scope(players[0], "one"), Ops: []coffer.OpRequest{free("gold", 5)}}}
	batch := func(prefix string, refusals bool) []coffer.ChangeRequest {
		var reqs []coffer.ChangeRequest
		for i := range 300 {
			p := players[i%len(players)]
			req := coffer.ChangeRequest{Scope: scope(p, fmt.Sprint(prefix, i)), Ops: []coffer.OpRequest{free("gold", 10)}}
			switch i % 6 {
			case 1:
				req.Ops = []coffer.OpRequest{free("gold", -3), free("silver", 2)}
			case 2:
				req.Ops, req.Hold = []coffer.OpRequest{free("gold", -1), free("credits", 1)}, true
			case 3:
				if refusals {
					req.Ops = []coffer.OpRequest{free("gold", -1_000_000)} // insufficient_funds
				}
			case 4:
				// Not paid: a paid grant claims its order first, a round
				// trip of its own.
				req.Ops = []coffer.OpRequest{free("silver", 4), free("credits", 1)}
			case 5:
				req = reqs[i-5] // a replay
			}
			reqs = append(reqs, req)
		}
		return reqs
	}
	for _, c := range []struct {
		name  string
		reqs  []coffer.ChangeRequest
		trips int64
		least int64
		most  int64
	}{
		{"one write", one, 2, 5, 5},
		{"300 writes", batch("a", false), 2, 1, 2 + 3*shards},
		{"300 writes, some refused", batch("r", true), 4, 1, 4 + 6*shards},
	} {
		var got []coffer.ChangeResult
		trips, statements := e.roundTrips(func() {
			var err error
			got, err = e.store.BatchChange(ctx, c.reqs)
			must(t, err)
		})
		if trips != c.trips || statements < c.least || statements > c.most {
			t.Errorf("%s: %d round trips, %d statements; want %d, %d to %d", c.name, trips, statements, c.trips, c.least, c.most)
		}
		for i, r := range got {
			if r.Err != nil && coffer.ErrorCode(r.Err) != coffer.CodeInsufficientFunds {
				t.Fatalf("%s: change %d: %v", c.name, i, r.Err)
			}
		}
	}
}

// TestWriteSentAgain: a lone write sent again fails its first attempt
// on its key (three round trips, with its ROLLBACK), whose second reads
// the key and answers the replay; the committer's next 16 batches read
// their writes' keys (six statements for a lone write, not five), so
// that a client sending its writes again and again fails one attempt in
// 16 at most.
func TestWriteSentAgain(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1})
	t.Cleanup(store.Close)
	p := e.playersOn(0, 1, 1)[0]
	write := func(key string) (statements int64) {
		t.Helper()
		_, statements = e.roundTrips(func() {
			_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, key), Ops: []coffer.OpRequest{free("gold", 5)}})
			must(t, err)
		})
		return statements
	}
	if n := write("a"); n != 5 {
		t.Fatalf("a lone write: %d statements, want 5", n)
	}
	trips, statements := e.roundTrips(func() {
		_, replay, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "a"), Ops: []coffer.OpRequest{free("gold", 5)}})
		must(t, err)
		if !replay {
			t.Fatal("sent again: not answered as a replay")
		}
	})
	if trips != 5 || statements != 11 {
		t.Fatalf("sent again: %d round trips, %d statements; want 5, 11", trips, statements)
	}
	for i := range 16 {
		if n := write(fmt.Sprint("b", i)); n != 6 {
			t.Fatalf("lone write %d after one sent again: %d statements, want 6", i+1, n)
		}
	}
	if n := write("c"); n != 5 {
		t.Fatalf("the 17th lone write after one sent again: %d statements, want 5", n)
	}
}

// TestLoneWriteBindsItsRow: a batch of one write, every write's at low
// load, sends each statement in its one-row form, the row's values as
// its parameters (no arrays to decode and unnest, which cost PostgreSQL
// more than the statements' work); so does a read of one player. A batch
// of several rows of a table sends that table's rows as arrays.
func TestLoneWriteBindsItsRow(t *testing.T) {
	e := newEnv(t)
	p := e.playersOn(0, 1, 1)[0]
	write := func(reqs ...coffer.ChangeRequest) {
		got, err := e.store.BatchChange(ctx, reqs)
		must(t, err)
		for _, r := range got {
			must(t, r.Err)
		}
	}
	if n := e.withArrays(func() { write(coffer.ChangeRequest{Scope: scope(p, "a"), Ops: []coffer.OpRequest{free("gold", 5)}}) }); n != 0 {
		t.Errorf("a lone grant: %d statements bind arrays, want none", n)
	}
	if n := e.withArrays(func() { write(coffer.ChangeRequest{Scope: scope(p, "b"), Ops: []coffer.OpRequest{free("gold", -2)}}) }); n != 0 {
		t.Errorf("a lone consume: %d statements bind arrays, want none", n)
	}
	if n := e.withArrays(func() { e.balance(p, "gold") }); n != 0 {
		t.Errorf("a read of one player: %d statements bind arrays, want none", n)
	}
	// Two writes of one player: its lock and lots are one row each (its
	// writes' keys are not read), its trx and ops two.
	if n := e.withArrays(func() {
		write(coffer.ChangeRequest{Scope: scope(p, "c"), Ops: []coffer.OpRequest{free("gold", 1)}},
			coffer.ChangeRequest{Scope: scope(p, "d"), Ops: []coffer.OpRequest{free("gold", 1)}})
	}); n != 1 {
		t.Errorf("two writes of a player: %d statements bind arrays, want 1 (the write)", n)
	}
	if got := e.balance(p, "gold").Total; got != 5 {
		t.Errorf("balance %d, want 5", got)
	}
}

// workload is a mix of writes on a set of players whose every answer a
// one-at-a-time run can give again: the successful writes' order is their
// version order, and every refused write is refused in any order.
type workload struct {
	players []coffer.PlayerID
	// setup runs first, one at a time: funds, holds to finish, keys to
	// replay and to conflict with.
	setup []write
	// writes run concurrently.
	writes []write
}

// write is one call of a workload and its answer.
type write struct {
	kind   string // change, exchange, commit, rollback
	change coffer.ChangeRequest
	answer coffer.ChangeResult
}

func (w *write) run(s *postgres.Store) {
	r := &w.answer
	switch w.kind {
	case "change":
		r.Trx, r.Replay, r.Err = s.Change(ctx, w.change)
	case "exchange":
		r.Trx, r.Replay, r.Err = s.Exchange(ctx, coffer.ExchangeRequest{Scope: w.change.Scope, From: "gold", To: "silver", Amount: 2})
	case "commit":
		r.Trx, r.Replay, r.Err = s.Commit(ctx, coffer.FinishRequest{Scope: w.change.Scope, By: w.change.Emitter})
	case "rollback":
		r.Trx, r.Replay, r.Err = s.Rollback(ctx, coffer.FinishRequest{Scope: w.change.Scope, By: w.change.Emitter})
	}
}

func newWorkload(players []coffer.PlayerID, n int, seed uint64) *workload {
	rng := rand.New(rand.NewPCG(seed, 3))
	w := &workload{players: players}
	change := func(p coffer.PlayerID, key string, hold bool, ops ...coffer.OpRequest) write {
		return write{kind: "change", change: coffer.ChangeRequest{Scope: scope(p, key), Ops: ops, Hold: hold, Reason: "load"}}
	}
	for _, p := range players {
		w.setup = append(w.setup, change(p, "funds", false, free("gold", 100_000), paid("gold", 500, fmt.Sprint("o", p)), free("silver", 1000)),
			change(p, "used", false, free("silver", 1)))
		for i := range 4 {
			w.setup = append(w.setup, change(p, fmt.Sprint("hold", i), true, free("gold", -7), free("credits", 3)))
		}
	}
	holds := map[coffer.PlayerID]int{}
	for i := range n {
		p := players[rng.IntN(len(players))]
		key := fmt.Sprint("w", i)
		var wr write
		switch k := rng.IntN(20); {
		case k < 6:
			wr = change(p, key, false, free("gold", coffer.Amount(1+rng.IntN(50))), free("credits", 1))
		case k < 9:
			wr = change(p, key, false, free("gold", -coffer.Amount(1+rng.IntN(20))))
		case k < 10:
			wr = change(p, key, true, free("gold", -2), free("silver", 1))
		case k < 11:
			wr = change(p, key, false, paid("silver", 3, key))
		case k < 12:
			wr = write{kind: "exchange", change: coffer.ChangeRequest{Scope: scope(p, key)}}
		case k < 15:
			// Refused in any order: more than the player ever holds.
			wr = change(p, key, false, free("gold", 1), free("silver", -1_000_000))
		case k < 16:
			wr = change(p, "used", false, free("silver", 1)) // a replay
		case k < 17:
			wr = change(p, "used", false, free("silver", 2)) // idempotency_conflict
		case k < 18:
			wr = write{kind: "commit", change: coffer.ChangeRequest{Scope: scope(p, "used")}} // hold_not_pending
		default:
			// Each hold of the setup is finished once.
			if holds[p] == 4 {
				wr = change(p, key, false, free("credits", 2))
				break
			}
			wr = write{kind: []string{"commit", "rollback"}[rng.IntN(2)], change: coffer.ChangeRequest{Scope: scope(p, fmt.Sprint("hold", holds[p]))}}
			holds[p]++
		}
		w.writes = append(w.writes, wr)
		if rng.IntN(10) == 0 {
			w.writes = append(w.writes, wr) // sent twice: one applies, one replays
		}
	}
	return w
}

// runConcurrently runs the setup one at a time, then the writes from
// goroutines, with the sweepers running too.
func (w *workload) runConcurrently(t *testing.T, s *postgres.Store, goroutines int) {
	for i := range w.setup {
		w.setup[i].run(s)
		must(t, w.setup[i].answer.Err)
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(w.writes)); i = next.Add(1) - 1 {
				w.writes[i].run(s)
			}
		})
	}
	stop := make(chan struct{})
	var sweepers sync.WaitGroup
	sweepers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err1 := s.SweepHolds(ctx, 10)
			_, err2 := s.SweepExpiredLots(ctx, 10)
			if err := errors.Join(err1, err2); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	close(stop)
	sweepers.Wait()
}

// order is the writes in an order one at a time gives their answers:
// each player's applied writes by version, then every other write.
func (w *workload) order() []int {
	var applied, others []int
	for i, wr := range w.writes {
		if wr.answer.Err == nil && !wr.answer.Replay {
			applied = append(applied, i)
		} else {
			others = append(others, i)
		}
	}
	slices.SortStableFunc(applied, func(a, b int) int {
		return int(w.writes[a].answer.Trx.Version - w.writes[b].answer.Trx.Version)
	})
	return append(applied, others...)
}

// TestConcurrentWritesAnswerAsOneAtATime: writes of every kind from many
// goroutines, on few players (batches hold several writes of a player)
// and on many, with a write refused by its own checks in most batches;
// every answer equals the one the same writes give one at a time, on
// another ledger, in the order the batches applied them.
func TestConcurrentWritesAnswerAsOneAtATime(t *testing.T) {
	for _, c := range []struct {
		name    string
		players int
	}{{"few players", 3}, {"many players", 200}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			var players []coffer.PlayerID
			for p := range c.players {
				players = append(players, coffer.PlayerID(1000+p))
			}
			w := newWorkload(players, 600, uint64(c.players))
			begins := e.sent.begins.Load()
			w.runConcurrently(t, e.store, 24)
			// Writes were gathered: fewer batches than writes.
			if batches := e.sent.begins.Load() - begins; batches >= int64(len(w.setup)+len(w.writes)) {
				t.Errorf("%d batches for %d writes", batches, len(w.setup)+len(w.writes))
			}
			t.Logf("%d batches for %d writes", e.sent.begins.Load()-begins, len(w.setup)+len(w.writes))
			codes := map[coffer.Code]int{}
			for _, wr := range w.writes {
				codes[coffer.ErrorCode(wr.answer.Err)]++
				if c := coffer.ErrorCode(wr.answer.Err); c == coffer.CodeInternal || c == coffer.CodeUnavailable {
					t.Fatalf("%s %s: %v", wr.kind, wr.change.IdempotencyKey, wr.answer.Err)
				}
			}
			for _, want := range []coffer.Code{"", coffer.CodeInsufficientFunds, coffer.CodeIdempotencyConflict, coffer.CodeHoldNotPending} {
				if codes[want] == 0 {
					t.Errorf("no write answered %q: %v", want, codes)
				}
			}

			alone := newEnv(t)
			one := newWorkload(players, 600, uint64(c.players))
			for i := range one.setup {
				one.setup[i].run(alone.store)
			}
			for _, i := range w.order() {
				one.writes[i].run(alone.store)
			}
			lotsA, lotsB := lotNames{}, lotNames{}
			for _, i := range w.order() {
				p := w.writes[i].change.PlayerID
				got, want := lotsA.answer(p, w.writes[i].answer), lotsB.answer(p, one.writes[i].answer)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("write %d (%s %s, player %d): concurrently %+v, one at a time %+v", i, w.writes[i].kind,
						w.writes[i].change.IdempotencyKey, w.writes[i].change.PlayerID, got, want)
				}
			}
		})
	}
}

// lotNames names each player's lots by the order they first appear in,
// so that two ledgers that drew other ids compare. Ids are a shard's:
// players of two shards may have lots of one id.
type lotNames map[[2]int64]int64

// answer is the result of player's write as compared: answer's, with each
// lot named.
func (n lotNames) answer(player coffer.PlayerID, r coffer.ChangeResult) coffer.ChangeResult {
	ops := r.Trx.Ops
	a := answer(r)
	for i := range a.Trx.Ops {
		k := [2]int64{int64(player), ops[i].LotID}
		if k[1] != 0 && n[k] == 0 {
			n[k] = int64(len(n) + 1)
		}
		a.Trx.Ops[i].LotID = n[k]
	}
	return a
}

// waitForBackend waits until a backend of the database other than
// those in not runs a statement like query while waiting for a lock, and
// returns its pid. It sees the wait twice, a poll apart: an attempt that
// read at its snapshot gives up a lock wait within a millisecond (ADR
// 0026), and runs again careful; the wait the test acts on is the
// careful attempt's, which lasts.
func (e *env) waitForBackend(db int, query string, not ...int32) int32 {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var seen int32
	for time.Now().Before(deadline) {
		var pid int32
		err := e.router.Database(db).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid() AND pid <> ALL($2) ORDER BY pid LIMIT 1`,
			query, append(not, 0)).Scan(&pid)
		if err == nil && pid == seen {
			return pid
		}
		seen = pid
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no backend waits in %q", query)
	return 0
}

// rogueTrx is an uncommitted trx of player under key (an instance that
// does not lock the player first): a batch's write of a trx under that
// key waits for it. It is rolled back at the end of the test at the
// latest.
func (e *env) rogueTrx(player coffer.PlayerID, key string) pgx.Tx {
	id := e.router.Map().ShardOf(player)
	rogue := begin(e.t, e.router.Shard(id))
	_, err := rogue.Exec(ctx, fmt.Sprintf(`INSERT INTO trx_%d (ns, player_id, created_at, trx_id, emitter, idempotency_key,
		request_hash, kind, status, reason, version, pos) VALUES (1, $1, now(), -1, 7, $2, '\x00', 'change', 'committed', 'rogue', 1, 1)`, id), player, key)
	must(e.t, err)
	return rogue
}

// TestDeadlockIsRetried: a transaction holds the second player of a batch
// and then asks for the first, which the batch holds: the batch is chosen
// to fail; it runs again once the other is done, and answers as if
// nothing happened.
//
// PostgreSQL checks a lock wait for a deadlock once, deadlock_timeout
// after the wait began, and the first waiter to check after the cycle
// closed is the one that fails. The batch waits for the other before the
// other can wait for it, so its check would find the cycle only if the
// test's next step came within the server's deadlock_timeout. Instead a
// third transaction shares the second player's lock with the other, and
// the batch waits for it first; it ends once the other waits for the
// batch. The batch's wait for the other then begins with the cycle
// closed, and its check comes a day before the other's.
func TestDeadlockIsRetried(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 20 * time.Second, Observer: o})
	defer store.Close()
	// Two players of one shard: the batch locks the smaller id first.
	id := e.router.Map().ShardOf(1)
	var ps []coffer.PlayerID
	for p := coffer.PlayerID(1); len(ps) < 2; p++ {
		if e.router.Map().ShardOf(p) == id {
			ps = append(ps, p)
		}
	}
	e.mustChange(ps[0], "seed", free("gold", 10))
	e.mustChange(ps[1], "seed", free("gold", 10))
	deadlocks := func() int64 {
		var n int64
		must(t, e.router.Shard(id).QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	before := deadlocks()
	lock := fmt.Sprintf(`SELECT 1 FROM balance_%d WHERE ns = 1 AND player_id = $1 FOR %%s`, id)
	// The third transaction shares ps[1] first: the batch waits for it
	// before it waits for the other (the sharers of a row are waited for
	// in the order of their transaction ids).
	third := begin(t, e.router.Shard(id))
	_, err := third.Exec(ctx, fmt.Sprintf(lock, "SHARE"), ps[1])
	must(t, err)
	other := begin(t, e.router.Shard(id))
	_, err = other.Exec(ctx, `SET LOCAL deadlock_timeout = '1d'`)
	must(t, err)
	_, err = other.Exec(ctx, fmt.Sprintf(lock, "SHARE"), ps[1])
	must(t, err)

	reqs := []coffer.ChangeRequest{{Scope: scope(ps[0], "a"), Ops: []coffer.OpRequest{free("gold", -3)}},
		{Scope: scope(ps[1], "a"), Ops: []coffer.OpRequest{free("gold", 4)}}}
	var got []coffer.ChangeResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, err = store.BatchChange(ctx, reqs)
	}()
	db := e.router.DatabaseIndex(id)
	batch := e.waitForBackend(db, "%locked_%")
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Exec(ctx, fmt.Sprintf(lock, "UPDATE"), ps[0]) // waits for the batch, until the batch gives up
		otherDone <- err
	}()
	e.waitForBackend(db, "%FOR UPDATE", batch)
	must(t, third.Rollback(ctx))
	must(t, <-otherDone)
	must(t, other.Rollback(ctx))
	<-done
	must(t, err)
	if deadlocks() == before {
		t.Fatal("no deadlock happened")
	}
	// Met the lock at once and ran again careful (ADR 0026), deadlocked,
	// retried (once, or again if the retry met the other transaction
	// before its rollback), then committed.
	attempts := o.all()
	if n := len(attempts); n < 3 || attempts[0] != postgres.AttemptCareful || attempts[n-1] != postgres.AttemptCommitted ||
		slices.ContainsFunc(attempts[1:n-1], func(a string) bool { return a != postgres.AttemptRetried }) {
		t.Fatalf("attempts ended %q, want careful, retried, then committed", attempts)
	}
	for i := range reqs {
		reqs[i].Namespace = 2
		e.changeNS2(reqs[i].PlayerID, "seed", free("gold", 10))
		var want coffer.ChangeResult
		want.Trx, want.Replay, want.Err = e.store.Change(ctx, reqs[i])
		if g, w := answer(got[i]), answer(want); !reflect.DeepEqual(g, w) {
			t.Fatalf("change %d: after the deadlock %+v, alone %+v", i, g, w)
		}
	}
}

// TestQueueFullIsOverloaded: a database's writes wait in a bounded queue;
// a write that finds it full is refused at once (overloaded), and the
// writes that waited are answered once the database is free.
func TestQueueFullIsOverloaded(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, QueueMax: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	ps := e.playersOn(0, 1, 3)
	// The committer's batch waits for ps[0]'s lock; ps[1]'s write is the
	// queue's one job.
	tx, errs := e.queuedBehind(store, ps[0], func() error {
		_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(ps[1], "a"), Ops: []coffer.OpRequest{free("gold", 1)}})
		return err
	})
	// At once, not after the batch in flight: that batch waits for the
	// transaction, which ends only after this call, and a write that
	// waited for room in the queue would be applied once the batch's time
	// ran out.
	_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(ps[2], "a"), Ops: []coffer.OpRequest{free("gold", 1)}})
	wantCode(t, err, coffer.CodeOverloaded)
	must(t, tx.Rollback(ctx))
	must(t, <-errs)
	must(t, <-errs)
}

// TestHoldBegunAndFinishedInOneBatch: a hold's begin and its commit in one
// batch (queued behind a batch that waits for a player locked elsewhere)
// write the hold once, committed, with the begin's and the commit's ops.
func TestHoldBegunAndFinishedInOneBatch(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	ps := e.playersOn(0, 1, 2)
	e.mustChange(ps[1], "seed", free("gold", 10))
	var commit coffer.Trx
	tx, errs := e.queuedBehind(store, ps[0],
		func() error {
			_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(ps[1], "h"), Hold: true,
				Ops: []coffer.OpRequest{free("gold", -4), free("silver", 3)}})
			return err
		},
		func() (err error) {
			commit, _, err = store.Commit(ctx, byItsClient(ps[1], "h"))
			return err
		})
	must(t, tx.Rollback(ctx))
	for range 3 {
		must(t, <-errs)
	}
	stored, err := e.store.Trx(ctx, scope(ps[1], "h"))
	must(t, err)
	if stored.Status != coffer.StatusCommitted || len(stored.Ops) != 2 {
		t.Fatalf("the hold as stored: %+v", stored)
	}
	sameAnswer(t, commit, stored)
}

// begin starts on pool, a router's, a transaction of the test's own,
// which waits for locks and stays idle as long as the test keeps it: the
// router's connections have the server's settings, no lock or idle
// timeout (the batches' have theirs on connections of their own:
// TestBatchConnectionsCarryTheirSettings). It is rolled back at the end
// of the test at the latest.
func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	must(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	return tx
}

// lockElsewhere inserts player's row in a transaction left open: a
// batch with the player waits for its lock until the transaction ends.
func (e *env) lockElsewhere(player coffer.PlayerID) pgx.Tx {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	tx := begin(e.t, e.router.Shard(id))
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO balance_%d (ns, player_id, version, updated_at) VALUES (1, $1, 0, now())`, id), player)
	must(e.t, err)
	return tx
}

// queuedBehind starts on store (one committer, on database 0) a write of
// blocker, whose row the returned transaction locks, then each of calls,
// each queued before the next starts: they leave as one batch, in order,
// once the transaction ends. errs receives the blocker's error, then, as
// they return, the calls'. The blocker's batch waits for the lock while
// the test polls and goes on: give store a LockTimeout as long as its
// Timeout, so that the transaction's end, not a clock, ends the wait.
func (e *env) queuedBehind(store *postgres.Store, blocker coffer.PlayerID, calls ...func() error) (tx pgx.Tx, errs <-chan error) {
	e.t.Helper()
	tx = e.lockElsewhere(blocker)
	out := make(chan error, 1+len(calls))
	go func() {
		_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(blocker, "blocker"), Ops: []coffer.OpRequest{free("gold", 1)}})
		out <- err
	}()
	e.waitForBackend(0, "%locked%")
	for i, call := range calls {
		go func() { out <- call() }()
		if !waitQueued(store, i+1) {
			e.t.Fatalf("call %d did not queue", i)
		}
	}
	return tx, out
}

// writesQueued is how many jobs of writes wait in store's queues.
func writesQueued(store *postgres.Store) int {
	n := 0
	store.Queues(func(_, kind string, jobs int) {
		if kind == "writes" {
			n += jobs
		}
	})
	return n
}

// waitQueued waits until n jobs of writes wait in store's queues, and
// tells whether they did within 10 s (a queue that never fills is a
// defect, not a slow machine).
func waitQueued(store *postgres.Store, n int) bool {
	for deadline := time.Now().Add(10 * time.Second); writesQueued(store) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// observed records what a store's committers tell its Observer: each
// batch as "database kind items", each attempt's outcome by database.
type observed struct {
	mu       sync.Mutex
	batches  []string
	attempts map[string][]string
}

func (o *observed) Batch(database, kind string, items int, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if took <= 0 {
		kind += " (no time)"
	}
	o.batches = append(o.batches, fmt.Sprint(database, " ", kind, " ", items))
}

func (o *observed) Attempt(database, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.attempts == nil {
		o.attempts = map[string][]string{}
	}
	o.attempts[database] = append(o.attempts[database], outcome)
}

func (o *observed) Fenced(string, string, int) {}

// all is the outcomes told so far, database after database.
func (o *observed) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Concat(slices.Collect(maps.Values(o.attempts))...)
}

// want fails t unless the attempts told so far on database ("": the one
// database told of) ended with outcomes, in order.
func (o *observed) want(t *testing.T, database string, outcomes ...string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if database == "" && len(o.attempts) == 1 {
		for database = range o.attempts {
		}
	}
	if got := o.attempts[database]; !slices.Equal(got, outcomes) {
		t.Fatalf("attempts on %q ended %q (all: %q), want %q", database, got, o.attempts, outcomes)
	}
}

// TestObserverSeesBatches: a store tells its observer each batch (its
// database, kind and size) and how each attempt ended, and shows the
// jobs waiting in each queue and the batches' connections in use. A
// batch whose database is found unusable while it waits is not
// attempted.
func TestObserverSeesBatches(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second, Observer: o})
	defer store.Close()
	dbs := e.router.Map().Databases()
	ps := e.playersOn(0, 1, 3)
	grant := func(p coffer.PlayerID) func() error {
		return func() error {
			_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "a"), Ops: []coffer.OpRequest{free("gold", 1)}})
			return err
		}
	}
	_, err := store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: ps[0]})
	must(t, err)
	tx, errs := e.queuedBehind(store, ps[0], grant(ps[1]), grant(ps[2]))
	queues := map[string]int{}
	store.Queues(func(database, kind string, jobs int) { queues[database+" "+kind] = jobs })
	want := map[string]int{dbs[0].Name() + " writes": 2, dbs[0].Name() + " reads": 0, dbs[1].Name() + " writes": 0, dbs[1].Name() + " reads": 0}
	if !reflect.DeepEqual(queues, want) {
		t.Fatalf("queues %v, want %v", queues, want)
	}
	// The blocker's batch holds one of database 0's two batch
	// connections (a committer's and a reader's).
	conns := map[string][2]int32{}
	store.BatchPools(func(database string, st *pgxpool.Stat) { conns[database] = [2]int32{st.AcquiredConns(), st.MaxConns()} })
	if w := map[string][2]int32{dbs[0].Name(): {1, 2}, dbs[1].Name(): {0, 2}}; !reflect.DeepEqual(conns, w) {
		t.Fatalf("batch pools (acquired, max) %v, want %v", conns, w)
	}
	e.router.SetVerified(0, false)
	must(t, tx.Rollback(ctx))
	// The blocker's batch was under way; the two queued were not run.
	var codes []coffer.Code
	for range 3 {
		codes = append(codes, coffer.ErrorCode(<-errs))
	}
	slices.Sort(codes)
	if w := []coffer.Code{"", coffer.CodeUnavailable, coffer.CodeUnavailable}; !slices.Equal(codes, w) {
		t.Fatalf("answers %q, want %q", codes, w)
	}
	e.router.SetVerified(0, true)
	// The blocker's first attempt met the lock and ran again careful.
	o.want(t, dbs[0].Name(), postgres.AttemptCareful, postgres.AttemptCommitted, postgres.AttemptNotRun)
	o.mu.Lock()
	defer o.mu.Unlock()
	if w := []string{dbs[0].Name() + " reads 1", dbs[0].Name() + " writes 1", dbs[0].Name() + " writes 2"}; !slices.Equal(o.batches, w) {
		t.Fatalf("batches %q, want %q", o.batches, w)
	}
}

// TestTrxIDsOfTwoShardsInOneBatch: trx ids come from each shard's
// sequence, so one batch may insert a trx on one shard with the id of a
// hold it finishes on another. Each keeps its own row: the new trx is not
// taken for the hold (inserted finished, the hold left pending with its
// reservation released), and the hold's commit grants what it should.
func TestTrxIDsOfTwoShardsInOneBatch(t *testing.T) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	var holder, granted, blocker coffer.PlayerID
	for _, p := range e.playersOn(0, 1, 40) {
		switch s := e.router.Map().ShardOf(p); {
		case holder == 0:
			holder = p
		case granted == 0 && s != e.router.Map().ShardOf(holder):
			granted = p
		case blocker == 0 && s != e.router.Map().ShardOf(holder) && s != e.router.Map().ShardOf(granted):
			blocker = p
		}
	}
	// Both shards hand out the same ids next: the granted player's trx
	// gets the hold's id.
	for _, p := range []coffer.PlayerID{holder, granted} {
		s := e.router.Map().ShardOf(p)
		_, err := e.router.Shard(s).Exec(ctx, fmt.Sprintf(`SELECT setval('id_seq_%d', 1000)`, s))
		must(t, err)
	}
	hold, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(holder, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", 12)}})
	must(t, err)

	tx, errs := e.queuedBehind(store, blocker,
		func() error {
			_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(granted, "g"), Ops: []coffer.OpRequest{free("gold", 5)}})
			return err
		},
		func() error {
			_, _, err := store.Commit(ctx, byItsClient(holder, "h"))
			return err
		})
	must(t, tx.Rollback(ctx))
	for range 3 {
		must(t, <-errs)
	}
	g, err := e.store.Trx(ctx, scope(granted, "g"))
	must(t, err)
	if g.ID != hold.ID {
		t.Fatalf("the grant's id %d, the hold's %d: the ids did not meet", g.ID, hold.ID)
	}
	stored, err := e.store.Trx(ctx, scope(holder, "h"))
	must(t, err)
	if stored.Status != coffer.StatusCommitted || len(stored.Ops) != 1 || g.Status != coffer.StatusCommitted || g.Kind != coffer.TrxChange {
		t.Errorf("the hold as stored: %+v; the grant: %+v", stored, g)
	}
	if got := e.balance(holder, "gold").Total; got != 12 {
		t.Errorf("the holder's gold %d, want 12", got)
	}
}
