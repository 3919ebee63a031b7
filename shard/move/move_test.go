package move_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
	"github.com/jackc/pgx/v5"
)

// load writes grants of 1 gold, each under a key of its own, from
// several goroutines to players on every shard until stop is closed, and
// keeps each key's outcome: acknowledged, or unknown (an error: a retry
// with the same key tells).
type load struct {
	players []coffer.PlayerID
	mu      sync.Mutex
	acked   map[string]coffer.PlayerID
	unknown map[string]coffer.PlayerID
	written atomic.Int64
}

func (e *env) startLoad(stop <-chan struct{}) (*load, *sync.WaitGroup) {
	l := &load{acked: map[string]coffer.PlayerID{}, unknown: map[string]coffer.PlayerID{}}
	for s := coffer.ShardID(0); s < 4; s++ {
		for p := coffer.PlayerID(1); len(l.players) < int(s+1)*6; p++ {
			p = e.playerOn(s, p)
			l.players = append(l.players, p)
		}
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if g == 0 {
					// A batch call of a player on each shard: one job
					// per database, which the move of one shard splits.
					l.batch(e, n)
					continue
				}
				p := l.players[(g*7+n)%len(l.players)]
				key := fmt.Sprintf("g%d-%d", g, n)
				l.record(key, p, e.grant(p, key))
			}
		})
	}
	return l, &wg
}

func (l *load) record(key string, p coffer.PlayerID, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.acked[key] = p
		l.written.Add(1)
	} else {
		l.unknown[key] = p
	}
}

// batch sends the n-th batch call: a grant to a player of each shard.
func (l *load) batch(e *env, n int) {
	var reqs []coffer.ChangeRequest
	for s := range 4 {
		p := l.players[s*6+n%6]
		reqs = append(reqs, coffer.ChangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: p, Emitter: 1, IdempotencyKey: fmt.Sprintf("b%d-%d", n, s)},
			Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1, Kind: "free"}}, Reason: "test"})
	}
	res, err := e.store.BatchChange(ctx, reqs)
	for i, r := range reqs {
		if err != nil {
			l.record(r.IdempotencyKey, r.PlayerID, err)
			continue
		}
		l.record(r.IdempotencyKey, r.PlayerID, res[i].Err)
	}
}

// settle retries every write of unknown outcome with its key until it
// answers, and returns each player's acknowledged gold.
func (e *env) settle(l *load) map[coffer.PlayerID]coffer.Amount {
	e.t.Helper()
	for key, p := range l.unknown {
		if err := e.grant(p, key); err != nil {
			e.t.Fatalf("retry of %s: %v", key, err)
		}
		l.acked[key] = p
	}
	want := map[coffer.PlayerID]coffer.Amount{}
	for _, p := range l.acked {
		want[p]++
	}
	return want
}

// TestMoveUnderLoad moves shard 0 to the database that held none while
// six goroutines write to players on every shard: no acknowledged write
// is lost or applied twice, the other shards never fail, the copy is
// verified, ids on the target go on past the source's, the old copy is
// kept until --cleanup, and the audit is clean by the new map.
func TestMoveUnderLoad(t *testing.T) {
	e := newEnv(t)
	stop := make(chan struct{})
	l, wg := e.startLoad(stop)
	waitFor(t, "200 writes before the move", func() bool { return l.written.Load() >= 200 })
	rep, err := e.mover.Move(ctx, 0, e.name(2))
	w := l.written.Load()
	waitFor(t, "200 writes after the move", func() bool { return l.written.Load() >= w+200 })
	close(stop)
	wg.Wait()
	must(t, err)
	if rep.Move.State != shard.MoveVerified || rep.Unverified || len(rep.Tables) < 6 || rep.Move.Pause <= 0 {
		t.Fatalf("report = %+v", rep)
	}
	for key, p := range l.unknown {
		if e.router.Map().ShardOf(p) != 0 {
			t.Errorf("write %s to player %d of shard %d, which did not move, failed", key, p, e.router.Map().ShardOf(p))
		}
	}
	want := e.settle(l)
	for _, p := range l.players {
		if got := e.gold(p); got != want[p] {
			t.Errorf("player %d (shard %d) has %d gold, acknowledged %d", p, e.router.Map().ShardOf(p), got, want[p])
		}
	}
	if got := e.router.DatabaseIndex(0); got != 2 {
		t.Fatalf("shard 0 is served by database %d, want 2", got)
	}
	// The target's own trx have ids past every id the source gave.
	srcMax := e.count(0, "SELECT max(trx_id) FROM trx_0_moved")
	copied := e.count(0, "SELECT count(*) FROM trx_0_moved")
	if n := e.count(2, "SELECT count(*) FROM trx_0 WHERE trx_id <= $1", srcMax); n != copied {
		t.Errorf("the target has %d trx with ids up to the source's greatest, %d, the copy %d", n, srcMax, copied)
	}
	if n := e.count(2, "SELECT count(*) FROM trx_0 WHERE trx_id > $1", srcMax); n == 0 {
		t.Errorf("no trx written on the target after the cut-over")
	}
	if !strings.Contains(e.out.String(), "writes paused") {
		t.Errorf("the mover did not print the pause:\n%s", e.out)
	}
	e.auditClean()
	must(t, e.mover.Cleanup(ctx, 0, false))
	if n := e.count(0, "SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_0\\_moved'"); n != 0 {
		t.Errorf("cleanup left %d relations of the old copy", n)
	}
	for i := range e.dbs {
		if got := e.leftovers(i); got != "publications 0, subscriptions 0, slots 0" {
			t.Errorf("database %d: %s", i, got)
		}
	}
	e.auditClean()
}

// TestMoveCarriesOnAfterStops stops the mover after the subscription,
// then after the cut-over (the shard then waits: nobody serves it), and
// a third run finishes and verifies the move; a mover stopped after the
// target took writes leaves the move unverified, and --cleanup then
// needs --unverified.
func TestMoveCarriesOnAfterStops(t *testing.T) {
	e := newEnv(t)
	p := e.playerOn(1, 1)
	must(t, e.grant(p, "before"))
	stopAt := func(step string) func(string) error {
		return func(s string) error {
			if s == step {
				return errors.New("stopped after " + s)
			}
			return nil
		}
	}
	for _, step := range []string{move.StepSubscribed, move.StepCut} {
		e.mover.After = stopAt(step)
		if _, err := e.mover.Move(ctx, 1, e.name(2)); err == nil || !strings.Contains(err.Error(), "stopped after "+step) {
			t.Fatalf("stopped after %s: %v", step, err)
		}
	}
	must(t, e.router.Refresh(ctx))
	if err := e.router.Map().Unplaced(1); !errors.Is(err, shard.ErrMoving) {
		t.Fatalf("after the cut-over, the shard is placed: %v", err)
	}
	e.mover.After = nil
	rep, err := e.mover.Move(ctx, 1, e.name(2))
	must(t, err)
	if rep.Move.State != shard.MoveVerified || rep.Move.Pause <= 0 {
		t.Fatalf("report = %+v", rep)
	}
	must(t, e.grant(p, "after"))
	if got := e.gold(p); got != 2 {
		t.Fatalf("gold = %d, want 2", got)
	}

	// The change feed's publication on the target gains the next
	// shard's tables of the kinds it publishes, as the target opens.
	e.dbs[2].Exec(t, "CREATE PUBLICATION coffer_feed FOR TABLE trx_1, op_1")
	q := e.playerOn(2, 1)
	must(t, e.grant(q, "before"))
	e.mover.After = stopAt(move.StepDone)
	if _, err := e.mover.Move(ctx, 2, e.name(2)); err == nil {
		t.Fatal("the mover did not stop")
	}
	e.mover.After = nil
	rep, err = e.mover.Move(ctx, 2, e.name(2))
	must(t, err)
	if !rep.Unverified || rep.Move.State != shard.MoveDone {
		t.Fatalf("report = %+v", rep)
	}
	if n := e.count(2, "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'coffer_feed' AND tablename IN ('trx_2', 'op_2')"); n != 2 {
		t.Errorf("the feed's publication on the target holds %d of trx_2 and op_2", n)
	}
	e.dbs[2].Exec(t, "DROP PUBLICATION coffer_feed")
	if err := e.mover.Cleanup(ctx, 2, false); err == nil || !strings.Contains(err.Error(), "not verified") {
		t.Fatalf("cleanup of an unverified move: %v", err)
	}
	must(t, e.mover.Cleanup(ctx, 2, true))
	must(t, e.grant(q, "after"))
	if got := e.gold(q); got != 2 {
		t.Fatalf("gold = %d, want 2", got)
	}
	e.auditClean()

	// A later migration goes to each shard where it is now.
	must(t, e.schema(t, later).Apply(ctx, migrate.Options{TargetVersion: -1}))
	for _, c := range []struct {
		db    int
		table string
	}{{0, "trx_0"}, {2, "trx_1"}, {2, "trx_2"}, {1, "trx_3"}} {
		if n := e.count(c.db, "SELECT count(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = 'note'", c.table); n != 1 {
			t.Errorf("database %d: %s has no column note", c.db, c.table)
		}
	}
	if n := e.count(0, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'trx_1_moved' AND column_name = 'note'"); n != 0 {
		t.Error("the migration went to the old copy of shard 1")
	}
	must(t, e.grant(p, "noted"))
}

// later is a migration after coffer's schema, for every shard.
var later = fstest.MapFS{"V9000__TRX_SHARD__note.sql": {Data: []byte("ALTER TABLE trx_<shard_id> ADD COLUMN note text;")}}

// TestAbortLeavesNothing aborts a move once copied: no publication,
// subscription or replication slot is left on either server, the target
// holds no table of the shard, the shard stays where it was, and it can
// be moved again.
func TestAbortLeavesNothing(t *testing.T) {
	e := newEnv(t)
	p := e.playerOn(3, 1)
	must(t, e.grant(p, "before"))
	e.mover.After = func(step string) error {
		if step == move.StepSynced {
			return errors.New("stopped")
		}
		return nil
	}
	if _, err := e.mover.Move(ctx, 3, e.name(2)); err == nil {
		t.Fatal("the mover did not stop")
	}
	e.mover.After = nil
	must(t, e.mover.Abort(ctx, 3))
	for i := range e.dbs {
		if got := e.leftovers(i); got != "publications 0, subscriptions 0, slots 0" {
			t.Errorf("database %d: %s", i, got)
		}
	}
	if n := e.count(2, "SELECT count(*) FROM pg_class WHERE relname ~ '_3$'"); n != 0 {
		t.Errorf("the target keeps %d relations of shard 3", n)
	}
	must(t, e.grant(p, "after"))
	if got := e.router.DatabaseIndex(3); got != 1 {
		t.Fatalf("shard 3 on database %d, want 1", got)
	}
	if _, err := e.mover.Move(ctx, 3, e.name(2)); err != nil {
		t.Fatalf("a move after the abort: %v", err)
	}
	if got := e.gold(p); got != 2 {
		t.Fatalf("gold = %d, want 2", got)
	}
}

// TestMoveWhoseSlotIsLost: the source loses the move's replication slot
// while the target copies from it, as a failover of the source's server
// does (slots do not follow it), and takes a write. The mover, waiting
// for the copy, stops and says to abort; run again it refuses too,
// making no slot (one made now would stream without that write); the
// abort leaves nothing behind, and the shard serves where it was, the
// write included.
func TestMoveWhoseSlotIsLost(t *testing.T) {
	e := newEnv(t)
	p := e.playerOn(3, 1)
	must(t, e.grant(p, "before"))
	var held pgx.Tx
	e.mover.After = func(step string) error {
		switch step {
		case move.StepPrepared: // trx_3's copy waits: the copy is not done when the slot goes
			var err error
			held, err = e.dbs[1].Conn(t).Begin(ctx)
			if err == nil {
				_, err = held.Exec(ctx, "LOCK TABLE trx_3 IN ACCESS EXCLUSIVE MODE")
			}
			return err
		case move.StepSubscribed:
			e.dbs[2].Exec(t, "ALTER SUBSCRIPTION coffer_move_3 DISABLE")
			waitFor(t, "the slot to be let go", func() bool {
				_, err := e.dbs[1].Conn(t).Exec(ctx, "SELECT pg_drop_replication_slot('coffer_move_3')")
				return err == nil
			})
			e.dbs[2].Exec(t, "ALTER SUBSCRIPTION coffer_move_3 ENABLE")
			return held.Rollback(ctx)
		}
		return nil
	}
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := e.mover.Move(bounded, 3, e.name(2)); err == nil || !strings.Contains(err.Error(), "synced: the replication slot coffer_move_3 is gone") {
		t.Fatalf("copy without the slot: %v", err)
	}
	e.mover.After = nil
	must(t, e.grant(p, "lost"))
	if _, err := e.mover.Move(ctx, 3, e.name(2)); err == nil || !strings.Contains(err.Error(), "published: the replication slot coffer_move_3 is gone") {
		t.Fatalf("carry on without the slot: %v", err)
	}
	if n := e.count(1, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'coffer_move_3'"); n != 0 {
		t.Fatal("the run made a new slot")
	}
	must(t, e.mover.Abort(ctx, 3))
	for i := range e.dbs {
		if got := e.leftovers(i); got != "publications 0, subscriptions 0, slots 0" {
			t.Errorf("database %d: %s", i, got)
		}
	}
	must(t, e.grant(p, "after"))
	if got := e.gold(p); got != 3 {
		t.Fatalf("gold = %d, want 3", got)
	}
	e.auditClean()
}

// TestMoveWhoseSlotIsLostAfterTheCut: the source loses the move's
// replication slot after the cut-over, before the target applied all it
// wrote (a failover of the source's server then: slots do not follow
// it). The mover copies the fenced old copy anew and opens the target
// with every write the source took, verified; nothing is left behind.
func TestMoveWhoseSlotIsLostAfterTheCut(t *testing.T) {
	e := newEnv(t)
	p := e.playerOn(3, 1)
	must(t, e.grant(p, "before"))
	// What the target commits on its own, without a replication origin,
	// is what its change feed would publish (test_decoding's only-local).
	e.dbs[2].Exec(t, "SELECT pg_create_logical_replication_slot('local_writes', 'test_decoding')")
	e.mover.After = func(step string) error {
		switch step {
		case move.StepSynced: // the target applies nothing more: it lacks the next write
			e.dbs[2].Exec(t, "ALTER SUBSCRIPTION coffer_move_3 DISABLE")
			return e.grant(p, "unapplied")
		case move.StepCut:
			waitFor(t, "the slot to be let go", func() bool {
				_, err := e.dbs[1].Conn(t).Exec(ctx, "SELECT pg_drop_replication_slot('coffer_move_3')")
				return err == nil
			})
		}
		return nil
	}
	report, err := e.mover.Move(ctx, 3, e.name(2))
	must(t, err)
	if report.Unverified || len(report.Tables) == 0 {
		t.Fatalf("the move was not verified: %+v", report)
	}
	if n := e.count(2, `SELECT count(*) FROM pg_logical_slot_peek_changes('local_writes', NULL, NULL, 'only-local', '1')
		WHERE data LIKE 'table public.trx_3: INSERT%'`); n != 0 {
		t.Fatalf("the target wrote %d trx rows of its own: the copy's rows would be events again", n)
	}
	e.dbs[2].Exec(t, "SELECT pg_drop_replication_slot('local_writes')")
	e.mover.After = nil
	must(t, e.grant(p, "after"))
	if got := e.router.DatabaseIndex(3); got != 2 {
		t.Fatalf("shard 3 on database %d, want 2", got)
	}
	if got := e.gold(p); got != 3 {
		t.Fatalf("gold = %d, want 3", got)
	}
	must(t, e.mover.Cleanup(ctx, 3, false))
	for i := range e.dbs {
		if got := e.leftovers(i); got != "publications 0, subscriptions 0, slots 0" {
			t.Errorf("database %d: %s", i, got)
		}
	}
	e.auditClean()
}

// TestMoveCopyWaitsForTheTargetsStandby: the subscription's commits on
// the target wait for the target's synchronous standby. The source's slot
// confirms what the target flushed, and the cut-over trusts it: were the
// commits on the target's primary alone, a failover of the target would
// lose rows the slot no longer holds, and the shard would open without
// them.
func TestMoveCopyWaitsForTheTargetsStandby(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, nil)
	e := newEnvOn(t, pgtest.Server(t, 0), pgtest.Server(t, 1), primary)
	p := e.playerOn(3, 1)
	must(t, e.grant(p, "before"))
	e.mover.After = func(step string) error {
		if step != move.StepSynced {
			return nil
		}
		must(t, standby.Pause())
		defer func() { must(t, standby.Resume()) }()
		must(t, e.grant(p, "copied"))
		waitFor(t, "the subscription's commit to wait for the target's standby", func() bool {
			return e.count(2, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'logical replication worker' AND wait_event = 'SyncRep'") > 0
		})
		return nil
	}
	_, err := e.mover.Move(ctx, 3, e.name(2))
	must(t, err)
	if got := e.gold(p); got != 2 {
		t.Fatalf("gold = %d, want 2", got)
	}
}

// TestMoveCutOverWaitsForTheSourcesStandby: under
// synchronous_standby_names '*' with the source's physical standby
// stopped, the move's own subscription is the synchronous standby, and
// releases the cut-over's COMMIT, which only the source's primary then
// has: a failover would undo the fence on the source while the target
// serves the shard. The mover does not open the target until a physical
// standby has the cut-over; run again once it has, it finishes.
func TestMoveCutOverWaitsForTheSourcesStandby(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, nil)
	e := newEnvOn(t, pgtest.Server(t, 0), primary, pgtest.Server(t, 0))
	p := e.playerOn(3, 1)
	must(t, e.grant(p, "before"))
	e.mover.CatchUpTimeout = 2 * time.Second
	e.mover.After = func(step string) error {
		if step == move.StepSynced {
			must(t, standby.Stop())
		}
		return nil
	}
	t.Cleanup(func() { _ = standby.Start(ctx) })             // the database's drop waits for it
	bounded, cancel := context.WithTimeout(ctx, time.Minute) // a mover that went on would wait for ever
	defer cancel()
	if _, err := e.mover.Move(bounded, 3, e.name(2)); err == nil || !strings.Contains(err.Error(), "no physical standby") {
		t.Fatalf("a cut-over only the subscription confirmed: %v", err)
	}
	if n := e.count(2, "SELECT count(*) FROM shard_move WHERE shard_id = 3 AND state = 'done'"); n != 0 {
		t.Fatal("the target opened")
	}
	e.mover.After = nil
	must(t, standby.Start(ctx))
	if _, err := e.mover.Move(ctx, 3, e.name(2)); err != nil {
		t.Fatalf("run again with the standby back: %v", err)
	}
	must(t, e.grant(p, "after"))
	if got := e.gold(p); got != 2 {
		t.Fatalf("gold = %d, want 2", got)
	}
}

// TestMoveRefusals: each refusal changes nothing.
func TestMoveRefusals(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name  string
		shard coffer.ShardID
		to    string
		want  string
	}{
		{"not in the config", 0, "nowhere", `no database "nowhere" in the config`},
		{"where it is", 0, e.name(0), "is on"},
		{"shard out of range", 9, e.name(2), "the shards are 0 … 3"},
	}
	for _, c := range cases {
		if _, err := e.mover.Move(ctx, c.shard, c.to); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if err := e.mover.Cleanup(ctx, 0, false); err == nil {
		t.Error("cleanup of a shard never moved")
	}
	if err := e.mover.Abort(ctx, 0); err == nil {
		t.Error("abort of a shard not moving")
	}
	e.mover.After = func(step string) error {
		if step == move.StepBegun {
			return errors.New("stopped")
		}
		return nil
	}
	if _, err := e.mover.Move(ctx, 0, e.name(2)); err == nil {
		t.Fatal("the mover did not stop")
	}
	e.mover.After = nil
	if _, err := e.mover.Move(ctx, 0, e.name(1)); err == nil || !strings.Contains(err.Error(), "is being moved to") {
		t.Errorf("a move of a shard moving elsewhere: %v", err)
	}
	if err := e.mover.Cleanup(ctx, 0, false); err == nil || !strings.Contains(err.Error(), "is not done") {
		t.Errorf("cleanup of a move in progress: %v", err)
	}
	if err := e.schema(t, later).Apply(ctx, migrate.Options{TargetVersion: -1}); err == nil || !strings.Contains(err.Error(), "is being moved") {
		t.Errorf("migrate during a move: %v", err)
	}
	// A move stopped before the target records its shard leaves every
	// database's schema compatible: instances still start.
	schema, err := migrate.SchemaEngine(e.router.Map(), nil)
	must(t, err)
	for _, d := range e.router.Map().Databases() {
		if err := schema.Verify(ctx, d); err != nil {
			t.Errorf("during a move: %v", err)
		}
	}
	must(t, e.mover.Abort(ctx, 0))

	// A database in the config without coffer's schema.
	bare := pgtest.NewDB(t, 1)
	e.cfg.Databases = append(e.cfg.Databases, shard.DatabaseConfig{Name: bare.Name, Host: "127.0.0.1", Port: bare.Server.Port(),
		User: pgserver.Superuser, Password: pgserver.Password, Shards: []shard.Range{}})
	mover := &move.Mover{Router: e.openRouter(), Engine: e.mover.Engine}
	if _, err := mover.Move(ctx, 0, mover.Router.Map().Databases()[3].Name()); err == nil || !strings.Contains(err.Error(), "holds no coffer schema") {
		t.Errorf("a move to a database without the schema: %v", err)
	}
	for i := range e.dbs {
		if got := e.leftovers(i); got != "publications 0, subscriptions 0, slots 0" {
			t.Errorf("database %d: %s", i, got)
		}
	}
}
