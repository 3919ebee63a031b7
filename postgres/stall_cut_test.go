package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// lateClock is a store's planning clock (Store.SetPlanClock) that
// ignores the real time: it finds reads every, 2·every, … late (after
// any attempt's deadline) and the others early (before any attempt
// began). An attempt reads it before planning each write but its first,
// so an attempt of more than every writes plans every of them, then
// runs short of time. late, if set, runs at each late read, on the
// committer, while its batch is planning: the test acts in the middle
// of a batch.
type lateClock struct {
	every int
	late  func()
	start time.Time

	mu    sync.Mutex
	reads int
}

func newLateClock(every int) *lateClock { return &lateClock{every: every, start: time.Now()} }

func (c *lateClock) now() time.Time {
	c.mu.Lock()
	c.reads++
	late := c.reads%c.every == 0
	c.mu.Unlock()
	if !late {
		return c.start
	}
	if c.late != nil {
		c.late()
	}
	return c.start.Add(24 * time.Hour)
}

// spends are n changes of player, keyed w0 … w(n-1), each spending one
// gold.
func spends(player coffer.PlayerID, n int) (reqs []coffer.ChangeRequest, keys []string) {
	for i := range n {
		keys = append(keys, fmt.Sprint("w", i))
		reqs = append(reqs, coffer.ChangeRequest{Scope: scope(player, keys[i]), Ops: []coffer.OpRequest{free("gold", -1)}, Reason: "test"})
	}
	return reqs, keys
}

// txOf is the PostgreSQL transaction that inserted player's trx under
// key (its xmin): a batch commits all its writes in one.
func (e *env) txOf(player coffer.PlayerID, key string) string {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	var xmin string
	must(e.t, e.router.Shard(id).QueryRow(ctx, shard.Tables(`SELECT xmin::text FROM trx_N WHERE ns = 1 AND player_id = $1 AND idempotency_key = $2`, id),
		player, key).Scan(&xmin))
	return xmin
}

// together groups player's keys, in order, by the transaction that
// committed them (txOf).
func (e *env) together(player coffer.PlayerID, keys []string) (groups [][]string, txs []string) {
	e.t.Helper()
	for _, k := range keys {
		tx := e.txOf(player, k)
		if len(txs) == 0 || txs[len(txs)-1] != tx {
			groups, txs = append(groups, nil), append(txs, tx)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], k)
	}
	return groups, txs
}

// wantBatches fails t unless o was told batches of writes of these
// sizes, in order, all on database 0.
func (e *env) wantBatches(o *observed, sizes ...int) {
	e.t.Helper()
	prefix := e.router.Map().Databases()[0].Name() + " writes "
	o.mu.Lock()
	defer o.mu.Unlock()
	var got, want []string
	for _, b := range o.batches {
		got = append(got, strings.TrimPrefix(b, prefix))
	}
	for _, n := range sizes {
		want = append(want, fmt.Sprint(n))
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("batches of writes %q, want %q", got, want)
	}
}

// TestBatchShortOfTimeCommitsWhatItPlanned: a batch call of 7 writes
// whose planning runs past half its time after every 3 writes. Each
// batch commits the 3 writes it planned; the call's other writes run in
// the next batches, of the call alone; every write is applied once, and
// none is answered as failed or cut off.
func TestBatchShortOfTimeCommitsWhatItPlanned(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, Observer: o})
	defer store.Close()
	store.SetPlanClock(newLateClock(3).now)
	p := e.playersOn(0, 1, 1)[0]
	e.mustChange(p, "seed", free("gold", 100))

	reqs, keys := spends(p, 7)
	got, err := store.BatchChange(ctx, reqs)
	must(t, err)
	for i, r := range got {
		if r.Err != nil || r.Replay {
			t.Fatalf("change %d: replay %v, %v; want applied", i, r.Replay, r.Err)
		}
	}
	e.wantBatches(o, 7, 4, 1)
	o.want(t, "", postgres.AttemptCommitted, postgres.AttemptCommitted, postgres.AttemptCommitted)
	groups, _ := e.together(p, keys)
	if w := [][]string{{"w0", "w1", "w2"}, {"w3", "w4", "w5"}, {"w6"}}; fmt.Sprint(groups) != fmt.Sprint(w) {
		t.Fatalf("committed together: %q, want %q", groups, w)
	}
	if b := e.balance(p, "gold"); b.Total != 93 {
		t.Fatalf("the player holds %d gold, want 93", b.Total)
	}
}

// TestCutCallRunsAlone: a batch call is cut after 3 of its 7 writes. Its
// rest goes behind the write A queued after it, and runs in a batch of
// its own: neither A nor B, queued while A's batch runs (waiting for A's
// player, locked elsewhere), is merged with it, and each runs in the
// batch after at most one of the call's.
func TestCutCallRunsAlone(t *testing.T) {
	// Batches of 7 writes at most: A does not join the call's first; the
	// blocker, the call, A, the call's rest, B, its last. Of 8: A joins
	// it, is not reached by the cut, and leads the next batch, which B
	// joins, before the call's rest; the clock's reads in that batch move
	// the next cuts by one.
	for _, c := range []struct {
		size    int
		batches []int
		groups  string
	}{
		{7, []int{1, 7, 1, 4, 1, 1}, "[[w0 w1 w2] [w3 w4 w5] [w6]]"},
		{8, []int{1, 8, 2, 4, 2}, "[[w0 w1 w2] [w3 w4] [w5 w6]]"},
	} {
		size := c.size
		t.Run(fmt.Sprint("batches of ", size), func(t *testing.T) {
			e := newEnv(t)
			o := &observed{}
			store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, BatchSizeMax: size,
				Timeout: 20 * time.Second, LockTimeout: 20 * time.Second, Observer: o})
			defer store.Close()
			store.SetPlanClock(newLateClock(3).now)
			ps := e.playersOn(0, 1, 4)
			blocker, heavy, a, b := ps[0], ps[1], ps[2], ps[3]
			e.mustChange(heavy, "seed", free("gold", 100))
			grant := func(p coffer.PlayerID) func() error {
				return func() error {
					_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "g"), Ops: []coffer.OpRequest{free("gold", 1)}})
					return err
				}
			}
			aLocked := e.lockElsewhere(a)
			reqs, keys := spends(heavy, 7)
			var got []coffer.ChangeResult
			tx, errs := e.queuedBehind(store, blocker,
				func() (err error) {
					got, err = store.BatchChange(ctx, reqs)
					return err
				},
				grant(a))
			must(t, tx.Rollback(ctx))
			must(t, <-errs) // the blocker's
			// The call's first batch is done, A's waits: B queues behind the
			// call's rest.
			e.waitForBackend(0, "%locked%")
			bErr := make(chan error, 1)
			go func() { bErr <- grant(b)() }()
			if !waitQueued(store, 1) {
				t.Fatal("B did not queue")
			}
			must(t, aLocked.Rollback(ctx))
			must(t, <-errs)
			must(t, <-errs)
			must(t, <-bErr)
			for i, r := range got {
				if r.Err != nil || r.Replay {
					t.Fatalf("change %d: replay %v, %v; want applied", i, r.Replay, r.Err)
				}
			}
			e.wantBatches(o, c.batches...)
			groups, txs := e.together(heavy, keys)
			if fmt.Sprint(groups) != c.groups {
				t.Fatalf("committed together: %v, want %s", groups, c.groups)
			}
			for _, p := range []coffer.PlayerID{a, b} {
				if tx := e.txOf(p, "g"); slices.Contains(txs, tx) {
					t.Fatalf("player %d's grant was committed with the cut call's writes", p)
				}
			}
		})
	}
}

// TestCutCallFindsTheQueueFull: a batch call is cut after 3 of its 7
// writes while its database's queue is full: its other writes answer
// overloaded, at once, and none of them is written; the 3 planned are
// committed, and the write that filled the queue runs.
func TestCutCallFindsTheQueueFull(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, QueueMax: 1, Timeout: 20 * time.Second, Observer: o})
	defer store.Close()
	ps := e.playersOn(0, 1, 2)
	heavy, other := ps[0], ps[1]
	e.mustChange(heavy, "seed", free("gold", 100))
	clock := newLateClock(3)
	otherErr := make(chan error, 1)
	var fill sync.Once
	clock.late = func() {
		fill.Do(func() {
			go func() {
				_, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(other, "g"), Ops: []coffer.OpRequest{free("gold", 1)}})
				otherErr <- err
			}()
			if !waitQueued(store, 1) {
				t.Error("the other grant did not queue")
			}
		})
	}
	store.SetPlanClock(clock.now)

	reqs, keys := spends(heavy, 7)
	got, err := store.BatchChange(ctx, reqs)
	must(t, err)
	for i, r := range got {
		if i < 3 {
			if r.Err != nil || r.Replay {
				t.Fatalf("change %d, planned: replay %v, %v; want applied", i, r.Replay, r.Err)
			}
			continue
		}
		wantCode(t, r.Err, coffer.CodeOverloaded)
		_, err := e.store.Trx(ctx, scope(heavy, keys[i]))
		wantCode(t, err, coffer.CodeNotFound)
	}
	must(t, <-otherErr)
	e.wantBatches(o, 7, 1)
	if b := e.balance(heavy, "gold"); b.Total != 97 {
		t.Fatalf("the player holds %d gold, want 97", b.Total)
	}
}

// retryHook is an observed Observer that runs onRetry at the first
// attempt told retried: on the committer, before the batch's next
// attempt.
type retryHook struct {
	observed
	onRetry func()
	once    sync.Once
}

func (h *retryHook) Attempt(database, outcome string) {
	h.observed.Attempt(database, outcome)
	if outcome == postgres.AttemptRetried {
		h.once.Do(h.onRetry)
	}
}

// leftAndStayed queues on store, behind a write of blocker
// (queuedBehind), a grant of left, whose caller leaves at the batch's
// first retry (h), and one of stayed: they leave as one batch, which
// waits for stayed, locked elsewhere (the returned transaction). Once its
// COMMIT runs, answered receives the answers of left and stayed, in order.
func (e *env) leftAndStayed(store *postgres.Store, h *retryHook, blocker, left, stayed coffer.PlayerID) (stayedLocked pgx.Tx, answered <-chan [2]coffer.ChangeResult) {
	e.t.Helper()
	stayedLocked = e.lockElsewhere(stayed)
	leftCtx, leave := context.WithCancel(ctx)
	e.t.Cleanup(leave)
	h.onRetry = leave
	var got [2]coffer.ChangeResult
	change := func(c context.Context, p coffer.PlayerID, r *coffer.ChangeResult) func() error {
		return func() error {
			r.Trx, r.Replay, r.Err = store.Change(c, coffer.ChangeRequest{Scope: scope(p, "g"), Ops: []coffer.OpRequest{free("gold", 1)}})
			return nil
		}
	}
	blockerLocked, errs := e.queuedBehind(store, blocker, change(leftCtx, left, &got[0]), change(ctx, stayed, &got[1]))
	must(e.t, blockerLocked.Rollback(ctx))
	must(e.t, <-errs) // the blocker's
	out := make(chan [2]coffer.ChangeResult, 1)
	go func() {
		<-errs
		<-errs
		out <- got
	}()
	return stayedLocked, out
}

// TestRetryDropsWritesWhoseCallerLeft: a batch of two callers' grants
// loses its connection while it waits for a player's lock; one caller
// leaves before the batch runs again. The retry runs without that
// caller's write: it is not applied (nobody waits for its answer), and
// the other is.
func TestRetryDropsWritesWhoseCallerLeft(t *testing.T) {
	e := newEnv(t)
	h := &retryHook{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second, Observer: h})
	defer store.Close()
	ps := e.playersOn(0, 1, 3)
	blocker, left, stayed := ps[0], ps[1], ps[2]
	stayedLocked, answered := e.leftAndStayed(store, h, blocker, left, stayed)
	pid := e.waitForBackend(0, "%locked%")
	var killed bool
	must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", pid)
	}
	e.waitForBackend(0, "%locked%", pid) // the retry
	must(t, stayedLocked.Rollback(ctx))
	got := <-answered
	wantCode(t, got[0].Err, coffer.CodeUnavailable)
	must(t, got[1].Err)
	// The blocker's first attempt met its lock and ran again careful
	// (ADR 0026), as does the next batch, from its first attempt.
	h.want(t, "", postgres.AttemptCareful, postgres.AttemptCommitted, postgres.AttemptRetried, postgres.AttemptCommitted)
	if _, err := e.store.Trx(ctx, scope(left, "g")); coffer.ErrorCode(err) != coffer.CodeNotFound {
		t.Fatalf("the write whose caller left before the retry: %v, want not applied", err)
	}
	if b := e.balance(stayed, "gold"); b.Total != 1 {
		t.Fatalf("the caller that stayed: %d gold, want 1", b.Total)
	}
}

// TestCutCommitKeepsTheWritesOfCallersThatLeft: the answer to a batch's
// COMMIT is lost, and one of its two callers leaves before the batch
// runs again. The retry reads that the COMMIT was applied and answers
// from its plans, write for write: the write whose caller left was
// applied with the rest, and the other caller gets its own answer.
func TestCutCommitKeepsTheWritesOfCallersThatLeft(t *testing.T) {
	e := newEnv(t)
	h := &retryHook{}
	cutter, _, store := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second, Observer: h})
	ps := e.playersOn(0, 1, 3)
	blocker, left, stayed := ps[0], ps[1], ps[2]
	stayedLocked, answered := e.leftAndStayed(store, h, blocker, left, stayed)
	e.waitForBackend(0, "%locked%")
	cutter.armed.Store(true)
	must(t, stayedLocked.Rollback(ctx))
	got := <-answered
	if cutter.cuts.Load() != 1 {
		t.Fatalf("%d COMMIT answers cut, want 1", cutter.cuts.Load())
	}
	wantCode(t, got[0].Err, coffer.CodeUnavailable)
	// The blocker's first attempt met its lock and ran again careful
	// (ADR 0026), as does the next batch, from its first attempt.
	h.want(t, "", postgres.AttemptCareful, postgres.AttemptCommitted, postgres.AttemptRetried, postgres.AttemptCommitted)
	if _, err := e.store.Trx(ctx, scope(left, "g")); err != nil {
		t.Fatalf("the write whose caller left after its COMMIT: %v, want applied", err)
	}
	must(t, got[1].Err)
	if got[1].Replay {
		t.Fatal("the caller that stayed: answered a replay")
	}
	stored, err := e.store.Trx(ctx, scope(stayed, "g"))
	must(t, err)
	sameAnswer(t, got[1].Trx, stored)
}
