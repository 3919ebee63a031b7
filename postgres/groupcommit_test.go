package postgres_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestBatchIsTwoRoundTrips: the writes of one database in one batch cost
// two round trips (the locks and state; the rows and COMMIT) and at most
// four statements per shard and one per batch more, however many writes
// and players: one
// write, or three hundred of every kind over forty players.
func TestBatchIsTwoRoundTrips(t *testing.T) {
	e := newEnv(t)
	players := e.playersOn(0, 1, 40)
	// A connection's first batch sets its lock timeout: one round trip
	// more, once.
	e.mustChange(players[1], "warm", free("gold", 1))
	one := []coffer.ChangeRequest{{Scope: scope(players[0], "one"), Ops: []coffer.OpRequest{free("gold", 5)}}}
	var many []coffer.ChangeRequest
	for i := range 300 {
		p := players[i%len(players)]
		req := coffer.ChangeRequest{Scope: scope(p, fmt.Sprint("k", i)), Ops: []coffer.OpRequest{free("gold", 10)}}
		switch i % 6 {
		case 1:
			req.Ops = []coffer.OpRequest{free("gold", -3), free("silver", 2)}
		case 2:
			req.Ops, req.Hold = []coffer.OpRequest{free("gold", -1), free("credits", 1)}, true
		case 3:
			req.Ops = []coffer.OpRequest{free("gold", -1_000_000)} // insufficient_funds
		case 4:
			// Not paid: a paid grant claims its order first, a round trip
			// of its own.
			req.Ops = []coffer.OpRequest{free("silver", 4), free("credits", 1)}
		case 5:
			req = many[i-5] // a replay
		}
		many = append(many, req)
	}
	for _, c := range []struct {
		name string
		reqs []coffer.ChangeRequest
	}{{"one write", one}, {"300 writes", many}} {
		var got []coffer.ChangeResult
		trips, statements := e.roundTrips(func() {
			var err error
			got, err = e.store.BatchChange(ctx, c.reqs)
			must(t, err)
		})
		// BEGIN, COMMIT, the committer's mark; per shard three reads and
		// one write.
		most := int64(3 + 4*len(e.router.Map().Databases()[0].Shards))
		if trips != 2 || statements > most {
			t.Errorf("%s: %d round trips, %d statements; want 2, at most %d", c.name, trips, statements, most)
		}
		for i, r := range got {
			if r.Err != nil && coffer.ErrorCode(r.Err) != coffer.CodeInsufficientFunds {
				t.Fatalf("%s: change %d: %v", c.name, i, r.Err)
			}
		}
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
		r.Trx, r.Replay, r.Err = s.Commit(ctx, w.change.Scope)
	case "rollback":
		r.Trx, r.Replay, r.Err = s.Rollback(ctx, w.change.Scope)
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
// returns its pid.
func (e *env) waitForBackend(db int, query string, not ...int32) int32 {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := e.router.Database(db).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid() AND pid <> ALL($2) LIMIT 1`,
			query, append(not, 0)).Scan(&pid)
		if err == nil {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no backend waits in %q", query)
	return 0
}

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
	// Retried (once, or again if the retry met the other transaction
	// before its rollback), then committed.
	attempts := o.all()
	if n := len(attempts); n < 2 || attempts[n-1] != postgres.AttemptCommitted || slices.ContainsFunc(attempts[:n-1], func(a string) bool { return a != postgres.AttemptRetried }) {
		t.Fatalf("attempts ended %q, want retried, then committed", attempts)
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

// TestBalanceReadsAreGathered: balance reads from many goroutines are
// answered in fewer round trips than reads, each as a read alone answers.
func TestBalanceReadsAreGathered(t *testing.T) {
	e := newEnv(t)
	var players []coffer.PlayerID
	for p := coffer.PlayerID(1); p <= 50; p++ {
		players = append(players, p)
		e.mustChange(p, "a", free("gold", coffer.Amount(p)), paid("silver", 2*coffer.Amount(p), fmt.Sprint("o", p)))
	}
	want := map[coffer.PlayerID]coffer.Balances{}
	for _, p := range players {
		b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, Lots: true})
		must(t, err)
		want[p] = b
	}
	const reads = 400
	got := make([]coffer.Balances, reads)
	trips, _ := e.roundTrips(func() {
		var wg sync.WaitGroup
		for i := range reads {
			wg.Go(func() {
				var err error
				got[i], err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: players[i%len(players)], Lots: true})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
	for i, b := range got {
		if w := want[players[i%len(players)]]; !reflect.DeepEqual(b, w) {
			t.Fatalf("read %d: %+v, alone %+v", i, b, w)
		}
	}
	if trips >= reads {
		t.Fatalf("%d round trips for %d reads", trips, reads)
	}
	t.Logf("%d round trips for %d reads", trips, reads)
}

// heldReads is an Observer that holds the first batch of reads (before
// its reads are answered) until release is closed.
type heldReads struct {
	observed
	held             atomic.Bool
	entered, release chan struct{}
}

func (o *heldReads) Batch(database, kind string, items int, took time.Duration) {
	o.observed.Batch(database, kind, items, took)
	if kind == "reads" && o.held.CompareAndSwap(false, true) {
		close(o.entered)
		<-o.release
	}
}

// TestReadsOneBatchAtATime: with Readers 1 (the default), a database runs
// one batch of reads at a time, and the reads that queue behind it go
// together in the next. With a second reader they would run at once, in
// batches of their own.
func TestReadsOneBatchAtATime(t *testing.T) {
	e := newEnv(t)
	o := &heldReads{entered: make(chan struct{}), release: make(chan struct{})}
	store := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, Observer: o})
	defer store.Close()
	release := sync.OnceFunc(func() { close(o.release) })
	defer release() // before Close, which waits for the held batch
	ps := e.playersOn(0, 1, 5)
	read := func(p coffer.PlayerID, errs chan<- error) {
		_, err := store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p})
		errs <- err
	}
	first, rest := make(chan error, 1), make(chan error, 4)
	go read(ps[0], first)
	<-o.entered
	for _, p := range ps[1:] {
		go read(p, rest)
	}
	queued := func() (n int) {
		store.Queues(func(database, kind string, jobs int) {
			if kind == "reads" {
				n += jobs
			}
		})
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); queued() < 4; {
		select {
		case err := <-rest:
			t.Fatalf("a read ran beside the held batch (err %v)", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reads queued, want 4", queued())
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	must(t, <-first)
	for range 4 {
		must(t, <-rest)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	db := e.router.Map().Databases()[0].Name()
	if w := []string{db + " reads 1", db + " reads 4"}; !slices.Equal(o.batches, w) {
		t.Fatalf("batches %q, want %q", o.batches, w)
	}
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
			commit, _, err = store.Commit(ctx, scope(ps[1], "h"))
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

// begin starts on pool a transaction of the test's own, which waits for
// locks and stays idle as long as the test keeps it: the pool's
// connections are those the stores' batches run on, and a batch leaves on
// its connection its store's lock_timeout and
// idle_in_transaction_session_timeout, which a busy machine can pass
// while the test polls for what it waits on. It is rolled back at the end
// of the test at the latest.
func begin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	must(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, `SELECT set_config('lock_timeout', '0', true), set_config('idle_in_transaction_session_timeout', '0', true)`)
	must(t, err)
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
		for queued(store, e.router.Map().Databases()[0].Name(), "writes") < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	return tx, out
}

// queued is how many jobs of kind wait for database's committers.
func queued(store *postgres.Store, database, kind string) int {
	n := -1
	store.Queues(func(db, k string, jobs int) {
		if db == database && k == kind {
			n = jobs
		}
	})
	return n
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
// jobs waiting in each queue. A batch whose database is found unusable
// while it waits is not attempted.
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
	o.want(t, dbs[0].Name(), postgres.AttemptCommitted, postgres.AttemptNotRun)
	o.mu.Lock()
	defer o.mu.Unlock()
	if w := []string{dbs[0].Name() + " reads 1", dbs[0].Name() + " writes 1", dbs[0].Name() + " writes 2"}; !slices.Equal(o.batches, w) {
		t.Fatalf("batches %q, want %q", o.batches, w)
	}
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
	ps := e.playersOn(0, 1, 3)
	holder, granted, blocker := ps[0], ps[1], ps[2]
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
			commit.Trx, commit.Replay, commit.Err = store.Commit(ctx, scope(holder, "h"))
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
	another := postgres.New(e.router, e.catalog, postgres.Options{Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer another.Close()
	other := make(chan error, 1)
	go func() {
		_, _, err := another.Commit(ctx, scope(holder, "h"))
		other <- err
	}()
	e.waitForBackend(0, "%locked%", pid)
	var killed bool
	must(t, e.router.Database(0).QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed))
	if !killed {
		t.Fatalf("backend %d not terminated", pid)
	}
	must(t, <-other)
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
			_, _, err := store.Commit(ctx, scope(holder, "h"))
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

// TestSweepMarksRemovesGoneCommitters: batches leave their committer's
// mark; the sweeper removes the marks not set for a day (processes gone),
// at most limit per database, and keeps those of live committers.
func TestSweepMarksRemovesGoneCommitters(t *testing.T) {
	e := newEnv(t)
	e.mustChange(e.playersOn(0, 1, 1)[0], "live", free("gold", 1))
	marks := func() (all, stale int) {
		must(t, e.router.Database(0).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE marked_at < now() - interval '1 day') FROM batch_mark`).Scan(&all, &stale))
		return all, stale
	}
	if all, _ := marks(); all != 1 {
		t.Fatalf("%d marks after one batch, want its committer's", all)
	}
	_, err := e.router.Database(0).Exec(ctx, `INSERT INTO batch_mark (committer, token, marked_at)
		SELECT -g, 1, now() - interval '25 hours' FROM generate_series(1, 3) g`)
	must(t, err)
	n, err := e.store.SweepMarks(ctx, 2)
	must(t, err)
	if all, stale := marks(); n != 2 || all != 2 || stale != 1 {
		t.Fatalf("first pass removed %d: %d marks left, %d stale; want 2 removed, the live one and a stale one left", n, all, stale)
	}
	// A database down fails its part of the pass, not the others'.
	e.router.MarkDown(1)
	defer e.router.MarkUp(1)
	n, err = e.store.SweepMarks(ctx, 2)
	if err == nil || !strings.Contains(err.Error(), "database 1") {
		t.Fatalf("a pass with database 1 down: %v, want its error", err)
	}
	if all, stale := marks(); n != 1 || all != 1 || stale != 0 {
		t.Fatalf("second pass removed %d: %d marks left, %d stale; want the live one only", n, all, stale)
	}
}

// TestMarkSweptOnlyIfStillStale: a stale mark that its committer sets
// again while the sweeper waits to delete it is kept: the sweeper checks
// the row it deletes, not the row it listed.
func TestMarkSweptOnlyIfStillStale(t *testing.T) {
	e := newEnv(t)
	db := e.router.Database(0)
	_, err := db.Exec(ctx, `INSERT INTO batch_mark (committer, token, marked_at) VALUES (42, 7, now() - interval '25 hours')`)
	must(t, err)
	tx := begin(t, db)
	_, err = tx.Exec(ctx, postgres.SetMark, int64(42), int64(8))
	must(t, err)
	swept := make(chan int, 1)
	go func() {
		n, err := e.store.SweepMarks(ctx, 10)
		if err != nil {
			t.Error(err)
		}
		swept <- n
	}()
	e.waitForBackend(0, "%DELETE FROM batch_mark%")
	must(t, tx.Commit(ctx))
	n := <-swept
	var token int64
	if err := db.QueryRow(ctx, `SELECT token FROM batch_mark WHERE committer = 42`).Scan(&token); err != nil || n != 0 || token != 8 {
		t.Fatalf("a mark set while the sweeper waited: swept %d, token %d (%v); want kept with token 8", n, token, err)
	}
}

// TestMarkOnlyGrows: a committer's transaction that commits after a later
// one of its committer (given up on, its outcome unread) leaves the later
// token: a lower one does not replace it.
func TestMarkOnlyGrows(t *testing.T) {
	e := newEnv(t)
	db := e.router.Database(0)
	for _, token := range []int64{7, 5} {
		_, err := db.Exec(ctx, postgres.SetMark, int64(42), token)
		must(t, err)
	}
	var token int64
	must(t, db.QueryRow(ctx, `SELECT token FROM batch_mark WHERE committer = 42`).Scan(&token))
	if token != 7 {
		t.Fatalf("mark %d after tokens 7 then 5, want 7", token)
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
	// Cut, then split; the waiting player's part fails, the other's
	// commits.
	o.want(t, "", postgres.AttemptRetried, postgres.AttemptSplit, postgres.AttemptFailed, postgres.AttemptCommitted)
}
