package postgres_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
)

// TestBatchKilledMidFlight: the connection of a batch is cut while its
// second round trip (the rows and COMMIT) waits; the batch runs again on
// another connection and applies once. The wait is on a trx key another
// transaction inserted and has not committed (an instance that does not
// lock the player first). When that transaction rolls back, the write is
// new; when it commits, the batch loses the race on the key's unique
// index, runs again, and answers idempotency_conflict, as the write sent
// alone after it would.
func TestBatchKilledMidFlight(t *testing.T) {
	for _, rogueCommits := range []bool{false, true} {
		t.Run(fmt.Sprintf("rogue commits=%v", rogueCommits), func(t *testing.T) {
			e := newEnv(t)
			store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
			defer store.Close()
			ps := e.playersOn(0, 1, 3)
			e.mustChange(ps[0], "seed", free("gold", 10))
			id := e.router.Map().ShardOf(ps[0])
			rogue := begin(t, e.router.Shard(id))
			_, err := rogue.Exec(ctx, fmt.Sprintf(`INSERT INTO trx_%d (ns, player_id, created_at, trx_id, emitter, idempotency_key,
				request_hash, kind, status, reason, version, pos) VALUES (1, $1, now(), -1, 7, 'k', '\x00', 'change', 'committed', 'rogue', 1, 1)`, id), ps[0])
			must(t, err)

			reqs := []coffer.ChangeRequest{{Scope: scope(ps[0], "k"), Ops: []coffer.OpRequest{free("gold", -4)}},
				{Scope: scope(ps[1], "k"), Ops: []coffer.OpRequest{free("gold", 6)}},
				{Scope: scope(ps[2], "k"), Ops: []coffer.OpRequest{free("gold", -1)}}}
			var got []coffer.ChangeResult
			done := make(chan struct{})
			go func() {
				defer close(done)
				got, err = store.BatchChange(ctx, reqs)
			}()
			pid := e.waitForBackend(0, "%INSERT INTO trx_%")
			var killed bool
			must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
			if !killed {
				t.Fatalf("backend %d not terminated", pid)
			}
			e.waitForBackend(0, "%INSERT INTO trx_%", pid) // the batch again, on another connection
			if rogueCommits {
				must(t, rogue.Commit(ctx))
			} else {
				must(t, rogue.Rollback(ctx))
			}
			<-done
			must(t, err)
			if rogueCommits {
				// The rogue row is no write of coffer's: gone before the audit.
				_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`DELETE FROM trx_%d WHERE reason = 'rogue'`, id))
				must(t, err)
			}
			// The same writes one at a time, in namespace 2, after the
			// same rows.
			for i := range reqs {
				reqs[i].Namespace = 2
			}
			e.changeNS2(ps[0], "seed", free("gold", 10))
			for i, req := range reqs {
				var want coffer.ChangeResult
				if i == 0 && rogueCommits {
					want.Err = coffer.Errorf(coffer.CodeIdempotencyConflict, "")
				} else {
					want.Trx, want.Replay, want.Err = e.store.Change(ctx, req)
				}
				if g, w := answer(got[i]), answer(want); !reflect.DeepEqual(g, w) {
					t.Fatalf("change %d: the batch answered %+v, alone %+v", i, g, w)
				}
			}
			if b := e.balance(ps[0], "gold"); rogueCommits && b.Total != 10 || !rogueCommits && b.Total != 6 {
				t.Fatalf("gold of the first player: %+v", b)
			}
		})
	}
}

// changeNS2 writes a change in namespace 2, or fails the test.
func (e *env) changeNS2(player coffer.PlayerID, key string, ops ...coffer.OpRequest) {
	e.t.Helper()
	sc := scope(player, key)
	sc.Namespace = 2
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: sc, Ops: ops, Reason: "test"})
	must(e.t, err)
}

// commitCutter forwards connections to a PostgreSQL server. Armed, it
// drops the first answer to a COMMIT and closes that connection: the
// server committed, the client never hears of it, as when the network
// fails between the two. cutClients cuts the connections open so far on
// the client's side only: the server's end stays open, and what it sends
// is dropped, so that the server goes on with what it was sent; cancel
// requests sent after it are dropped too (the client has lost its way to
// the server, as in a partition).
type commitCutter struct {
	ln       net.Listener
	upstream string
	armed    atomic.Bool
	cuts     atomic.Int32
	clients  sync.Map // id → net.Conn
	opened   atomic.Int64
	cutTo    atomic.Int64
	// onCut, if set before arming, runs when the COMMIT's answer is cut.
	onCut func()
}

// cutClients cuts the client side of every connection opened so far.
func (c *commitCutter) cutClients() {
	c.cutTo.Store(c.opened.Load())
	c.clients.Range(func(_, conn any) bool {
		conn.(net.Conn).Close()
		return true
	})
}

func newCommitCutter(t *testing.T, upstream string) *commitCutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	c := &commitCutter{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go c.serve(client)
		}
	}()
	return c
}

// cancelRequestCode opens a CancelRequest packet (PostgreSQL protocol).
const cancelRequestCode = 80877102

// commitDone is the CommandComplete of a COMMIT.
var commitDone = []byte("COMMIT\x00")

func (c *commitCutter) serve(client net.Conn) {
	id := c.opened.Add(1)
	c.clients.Store(id, client)
	var head []byte
	if c.cutTo.Load() > 0 {
		head = make([]byte, 8) // a startup packet's length and code
		if _, err := io.ReadFull(client, head); err != nil || binary.BigEndian.Uint32(head[4:]) == cancelRequestCode {
			client.Close()
			return
		}
	}
	server, err := net.Dial("tcp", c.upstream)
	if err != nil {
		client.Close()
		return
	}
	if _, err := server.Write(head); err != nil {
		client.Close()
		server.Close()
		return
	}
	defer client.Close()
	defer server.Close()
	go func() { _, _ = io.Copy(server, client) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && bytes.Contains(buf[:n], commitDone) && c.armed.CompareAndSwap(true, false) {
			c.cuts.Add(1)
			if c.onCut != nil {
				c.onCut()
			}
			return
		}
		if n > 0 && id <= c.cutTo.Load() {
			n = 0
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestLostCommitAnswerIsRecognised: the answer to a batch's COMMIT is
// lost with its connection; the batch runs again, finds its COMMIT
// applied (its committer's mark holds its token), and answers its writes
// as new writes, not as replays, applied once.
func TestLostCommitAnswerIsRecognised(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	cutter, _, store := e.storeThroughCutter(postgres.Options{Observer: o})

	ps := e.playersOn(0, 1, 2)
	e.mustChange(ps[1], "seed", free("gold", 3))
	reqs := []coffer.ChangeRequest{{Scope: scope(ps[0], "a"), Ops: []coffer.OpRequest{free("gold", 5)}},
		{Scope: scope(ps[1], "b"), Ops: []coffer.OpRequest{free("gold", -2)}, Hold: true}}
	cutter.armed.Store(true)
	got, err := store.BatchChange(ctx, reqs)
	must(t, err)
	if cutter.cuts.Load() != 1 {
		t.Fatalf("%d COMMIT answers cut, want 1", cutter.cuts.Load())
	}
	o.want(t, "", postgres.AttemptRetried, postgres.AttemptCommitted)
	for i, r := range got {
		if r.Err != nil || r.Replay {
			t.Fatalf("change %d after its COMMIT's answer was lost: replay %v, %v", i, r.Replay, r.Err)
		}
		stored, err := e.store.Trx(ctx, reqs[i].Scope)
		must(t, err)
		sameAnswer(t, r.Trx, stored)
	}
	if a, b := e.balance(ps[0], "gold"), e.balance(ps[1], "gold"); a.Total != 5 || b.Total != 1 {
		t.Fatalf("applied more than once: %d and %d gold", a.Total, b.Total)
	}
}

// TestCutThenDownIsCut: the answer to a batch's COMMIT is lost, and its
// database is found unusable before another attempt could read whether
// the COMMIT was applied: the write answers that its outcome is unknown,
// the attempt counts as cut (not as a try not made), and the retry with
// the same key tells: applied.
func TestCutThenDownIsCut(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	cutter, router, store := e.storeThroughCutter(postgres.Options{Observer: o})
	cutter.onCut = func() { router.SetVerified(0, false) }
	cutter.armed.Store(true)
	req := coffer.ChangeRequest{Scope: scope(e.playersOn(0, 1, 1)[0], "a"), Ops: []coffer.OpRequest{free("gold", 5)}}
	_, _, err := store.Change(ctx, req)
	wantCode(t, err, coffer.CodeUnavailable)
	if !strings.Contains(err.Error(), "outcome could not be read") {
		t.Fatalf("the write answered %v, want its outcome unknown", err)
	}
	o.want(t, "", postgres.AttemptRetried, postgres.AttemptCut)
	router.SetVerified(0, true)
	_, replay, err := store.Change(ctx, req)
	must(t, err)
	if !replay {
		t.Fatal("the retry applied the write again")
	}
}

// storeThroughCutter is a store whose first database is reached through
// a commitCutter.
func (e *env) storeThroughCutter(opts postgres.Options) (*commitCutter, *shard.Router, *postgres.Store) {
	db := e.cfg.Databases[0]
	cutter := newCommitCutter(e.t, fmt.Sprintf("%s:%d", db.Host, db.Port))
	cfg := e.cfg
	cfg.Databases = slices.Clone(cfg.Databases)
	cfg.Databases[0].Port = cutter.ln.Addr().(*net.TCPAddr).Port
	m, err := shard.NewMap(cfg)
	must(e.t, err)
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	must(e.t, err)
	e.t.Cleanup(router.Close)
	store := postgres.New(router, e.catalog, opts)
	e.t.Cleanup(store.Close)
	return cutter, router, store
}

// TestCutBatchIsNotTakenForAnotherInstancesWrite: a batch commits a hold
// and grants to another player; its connection is cut before its COMMIT
// ran, so nothing of it is applied. Before it runs again, another
// instance commits the same hold, which is then stored with the status
// and version the batch planned for it. The batch must not take that for
// its own write: it runs again, answers the hold's commit as the replay
// it now is, and applies the grant (answering it as applied while it was
// lost would lose the player's currency).
func TestCutBatchIsNotTakenForAnotherInstancesWrite(t *testing.T) {
	cutBatchThenAnotherInstance(t, false)
}

// TestCutBatchIsNotTakenForAnotherInstancesWriteClockBehind: the same,
// on a database whose clock is behind the holder's last write (a standby
// promoted with a slower clock): both commits of the hold then leave the
// holder's row and the hold's finish at the same time as well, the
// player's last write + 1 µs. Only the batch's mark tells them apart.
func TestCutBatchIsNotTakenForAnotherInstancesWriteClockBehind(t *testing.T) {
	cutBatchThenAnotherInstance(t, true)
}

func cutBatchThenAnotherInstance(t *testing.T, clockBehind bool) {
	e := newEnv(t)
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	// A batch locks its players shard after shard: granted on a shard
	// before holder's, so that the gate below, on granted's shard, stops
	// the batch's next attempt before it reaches holder.
	ps := e.playersOn(0, 1, 16)
	sortByLockOrder(e, ps)
	granted, blocker := ps[0], ps[1]
	at := slices.IndexFunc(ps, func(p coffer.PlayerID) bool { return e.router.Map().ShardOf(p) != e.router.Map().ShardOf(granted) })
	holder := ps[at]
	e.mustChange(holder, "seed", free("gold", 10))
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(holder, "h"), Hold: true,
		Ops: []coffer.OpRequest{free("gold", -4), free("silver", 3)}})
	must(t, err)
	if clockBehind {
		id := e.router.Map().ShardOf(holder)
		_, err := e.router.Shard(id).Exec(ctx, fmt.Sprintf(`UPDATE balance_%d SET updated_at = now() + interval '5 minutes' WHERE player_id = $1`, id), holder)
		must(t, err)
	}
	rogue := e.rogueTrx(granted, "k") // the batch's write waits for it

	// The hold's commit and the grant queue behind a batch that waits for
	// a player locked elsewhere: they leave as one batch.
	var commit, grant coffer.ChangeResult
	tx, answered := e.queuedBehind(store, blocker,
		func() error {
			commit.Trx, commit.Replay, commit.Err = store.Commit(ctx, byItsClient(holder, "h"))
			return nil
		},
		func() error {
			grant.Trx, grant.Replay, grant.Err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(granted, "k"), Ops: []coffer.OpRequest{free("gold", 5)}})
			return nil
		})
	must(t, tx.Rollback(ctx))
	must(t, <-answered) // the blocker's write: the queued ones wait for the rogue trx
	pid := e.waitForBackend(0, "%INSERT INTO trx_%")

	// Another instance commits the hold as soon as the batch lets go of
	// its player: it waits for the lock before the batch is cut. Its lock
	// wait spans the test's polling and the kill, so, as store's, it lasts
	// as long as the batch: the kill, not a clock, ends it.
	instance := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer instance.Close()
	other := make(chan error, 1)
	go func() {
		_, _, err := instance.Commit(ctx, byItsClient(holder, "h"))
		other <- err
	}()
	another := e.waitForBackend(0, "%locked%", pid)
	// The gate queues for granted's shard's table behind the batch, as
	// another does for holder's row: when the batch is killed, each is
	// granted its lock by the lock manager before any new request, so
	// the batch's next attempt, which locks granted's shard first, waits
	// at the gate until another has committed the hold. A row's lock
	// would not do: once its locker is gone, a new locker may take the
	// row before the waiters wake, and the next attempt could lock holder
	// first and then wait for the rogue trx, holding holder until
	// another's time runs out.
	gate := begin(t, e.router.Shard(e.router.Map().ShardOf(granted)))
	gated := make(chan error, 1)
	go func() {
		_, err := gate.Exec(ctx, fmt.Sprintf(`LOCK TABLE balance_%d IN EXCLUSIVE MODE`, e.router.Map().ShardOf(granted)))
		gated <- err
	}()
	e.waitForBackend(0, "LOCK TABLE%", pid, another)
	var killed bool
	must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", pid)
	}
	must(t, <-other)
	must(t, <-gated)
	must(t, gate.Rollback(ctx))
	must(t, rogue.Rollback(ctx))
	<-answered
	<-answered

	stored, err := e.store.Trx(ctx, scope(holder, "h"))
	must(t, err)
	if commit.Err != nil || !commit.Replay {
		t.Errorf("the hold's commit, committed by another instance first: replay %v, %v; want a replay", commit.Replay, commit.Err)
	} else {
		sameAnswer(t, commit.Trx, stored)
	}
	must(t, grant.Err)
	if b := e.balance(granted, "gold"); grant.Replay || b.Total != 5 {
		t.Fatalf("the grant answered applied (replay %v), the player holds %d gold", grant.Replay, b.Total)
	}
}

// TestMarkIsReadAfterTheLocks: a batch's connection is cut on the
// client's side during its second round trip, while the server still runs
// it (waiting for a trx another transaction holds under the grant's key)
// and commits it later. The
// batch's next attempt waits for the player's lock, which the first
// attempt holds until it commits, and only then reads the mark: it finds
// the first attempt applied and answers the grant as a new write. Read
// before the lock, the mark would still say not applied, and the grant
// would be answered as a replay of itself.
func TestMarkIsReadAfterTheLocks(t *testing.T) {
	e := newEnv(t)
	cutter, _, store := e.storeThroughCutter(postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	p := e.playersOn(0, 1, 1)[0]
	e.mustChange(p, "seed", free("gold", 1))
	rogue := e.rogueTrx(p, "late")

	var grant coffer.ChangeResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		grant.Trx, grant.Replay, grant.Err = store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "late"), Ops: []coffer.OpRequest{free("gold", 5)}})
	}()
	first := e.waitForBackend(0, "%INSERT INTO trx_%")
	cutter.cutClients()
	e.waitForBackend(0, "%INSERT INTO balance_%", first)
	must(t, rogue.Rollback(ctx)) // the first attempt goes on and commits
	<-done
	must(t, grant.Err)
	if grant.Replay {
		t.Fatalf("the grant, applied by its first attempt, answered as a replay of itself")
	}
	stored, err := e.store.Trx(ctx, scope(p, "late"))
	must(t, err)
	sameAnswer(t, grant.Trx, stored)
	if b := e.balance(p, "gold"); b.Total != 6 {
		t.Fatalf("the player holds %d gold, want 6", b.Total)
	}
}

// TestCutAttemptReadUnappliedLetsTheBatchSplit: a batch's first attempt
// is cut while its write waits for a trx another transaction holds under
// one player's key, before its COMMIT ran. The next attempt reads the mark
// (not applied) and then times out on the same wait: a failure of its own,
// which splits the batch by player as for any batch, so that the other
// player's grant is applied; it is not answered as an outcome that could
// not be read.
func TestCutAttemptReadUnappliedLetsTheBatchSplit(t *testing.T) {
	e := newEnv(t)
	o := &observed{}
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: time.Second, Observer: o})
	defer store.Close()
	ps := e.playersOn(0, 1, 2)
	e.rogueTrx(ps[0], "held") // never ends: every write of it under that key waits
	var got []coffer.ChangeResult
	done := make(chan error, 1)
	go func() {
		var err error
		got, err = store.BatchChange(ctx, []coffer.ChangeRequest{
			{Scope: scope(ps[0], "held"), Ops: []coffer.OpRequest{free("gold", 5)}},
			{Scope: scope(ps[1], "free"), Ops: []coffer.OpRequest{free("gold", 3)}}})
		done <- err
	}()
	pid := e.waitForBackend(0, "%INSERT INTO trx_%")
	var killed bool
	must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", pid)
	}
	must(t, <-done)
	if code := coffer.ErrorCode(got[0].Err); code != coffer.CodeUnavailable || !strings.Contains(got[0].Err.Error(), "locked by another transaction") {
		t.Errorf("the write waiting for the key: %v, want shard_unavailable for the lock", got[0].Err)
	}
	if got[1].Err != nil || got[1].Replay {
		t.Fatalf("the other player's grant: replay %v, %v; want applied", got[1].Replay, got[1].Err)
	}
	if b := e.balance(ps[1], "gold"); b.Total != 3 {
		t.Fatalf("the other player holds %d gold, want 3", b.Total)
	}
	// Met the key's lock (the first attempt waits for none, ADR 0026),
	// cut, then split; the waiting player's part fails, the other's
	// commits.
	o.want(t, "", postgres.AttemptCareful, postgres.AttemptRetried, postgres.AttemptSplit, postgres.AttemptFailed, postgres.AttemptCommitted)
}

// sortByLockOrder sorts players as a batch locks them: by shard, then id.
func sortByLockOrder(e *env, players []coffer.PlayerID) {
	slices.SortFunc(players, func(a, b coffer.PlayerID) int {
		return cmp.Or(cmp.Compare(e.router.Map().ShardOf(a), e.router.Map().ShardOf(b)), cmp.Compare(a, b))
	})
}
