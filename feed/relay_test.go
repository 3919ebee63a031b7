package feed_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
)

// TestEveryKindOnce: every kind of committed trx change is stored in the
// stream exactly once, with the ops and balances the ledger answered;
// a write refused and a transaction rolled back make nothing.
func TestEveryKindOnce(t *testing.T) {
	e := newEnv(t)
	e.startRelay()
	want := expectations{}
	buy := coffer.OpRequest{Currency: "gold", Amount: 500, Kind: "paid",
		Purchase: &coffer.Purchase{Store: "steam", OrderID: "o1", Price: 499, Fiat: "USD"}}
	trx := e.change(42, "buy", buy)
	want.add(feed.KindChange, 42, trx, "committed", trx.Ops)
	trx = e.change(42, "spend", free("gold", -20))
	want.add(feed.KindChange, 42, trx, "committed", trx.Ops)

	hold := e.hold(42, "h1", time.Minute, free("gold", -30), free("silver", 10))
	want.add(feed.KindHoldBegin, 42, hold, "pending", hold.Ops[:1])
	trx, _, err := e.store.Commit(ctx, byItsClient(42, "h1"))
	must(t, err)
	want.add(feed.KindHoldCommit, 42, trx, "committed", trx.Ops[1:])

	hold = e.hold(42, "h2", time.Minute, free("gold", -5))
	want.add(feed.KindHoldBegin, 42, hold, "pending", hold.Ops)
	trx, _, err = e.store.Rollback(ctx, byItsClient(42, "h2"))
	must(t, err)
	want.add(feed.KindHoldRollback, 42, trx, "rolled_back", trx.Ops[1:])

	trx, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(42, "ex"), From: "gold", To: "silver", Amount: 2})
	must(t, err)
	want.add(feed.KindExchange, 42, trx, "committed", trx.Ops)
	trx, _, err = e.store.Refund(ctx, coffer.RefundRequest{Scope: scope(42, "refund"), Store: "steam", OrderID: "o1", Kind: coffer.RefundChargeback})
	must(t, err)
	want.add(feed.KindRefund, 42, trx, "committed", trx.Ops)

	// Refused, and rolled back: nothing.
	if _, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(42, "broke"), Ops: []coffer.OpRequest{free("credits", -1)}}); coffer.ErrorCode(err) != coffer.CodeInsufficientFunds {
		t.Fatalf("a consume of nothing: %v", err)
	}
	e.rolledBackInsert(42)

	// The sweepers' writes: a hold expired, a lot's expiry recorded.
	trx = e.change(43, "g", free("gold", 10))
	want.add(feed.KindChange, 43, trx, "committed", trx.Ops)
	hold = e.hold(43, "h3", time.Second, free("gold", -7), free("gold", 1))
	want.add(feed.KindHoldBegin, 43, hold, "pending", hold.Ops[:1])
	soon := time.Now().Add(time.Second)
	trx = e.change(44, "brief", coffer.OpRequest{Currency: "gold", Amount: 3, ExpiresAt: &soon})
	want.add(feed.KindChange, 44, trx, "committed", trx.Ops)
	time.Sleep(time.Until(soon.Add(50 * time.Millisecond)))
	if n, err := e.store.SweepHolds(ctx, 100); err != nil || n != 1 {
		t.Fatalf("hold sweep: %d %v", n, err)
	}
	if n, err := e.store.SweepExpiredLots(ctx, 100); err != nil || n != 1 {
		t.Fatalf("lot sweep: %d %v", n, err)
	}
	expired, err := e.store.Trx(ctx, scope(43, "h3"))
	must(t, err)
	want.add(feed.KindHoldExpire, 43, expired, "expired", expired.Ops[1:])

	evs := e.waitStored(e.committedTrx())
	checkOrder(t, evs)
	seen := map[feed.Kind]bool{}
	for _, ev := range evs {
		seen[ev.Kind] = true
		if ev.Kind == feed.KindExpire {
			if ev.PlayerID != 44 || len(ev.Ops) != 1 || ev.Ops[0].Amount != -3 || ev.Ops[0].Kind != coffer.OpExpire || ev.Balances[0].Total != 0 {
				t.Errorf("expiry event: %s", js(ev))
			}
			continue
		}
		w, ok := want[ev.ID]
		if !ok {
			t.Errorf("event %s not committed by the test: %s", ev.ID, js(ev))
			continue
		}
		delete(want, ev.ID)
		w.check(t, ev)
	}
	for id := range want {
		t.Errorf("no event %s", id)
	}
	for _, k := range feed.Kinds {
		if !seen[k] {
			t.Errorf("no event of kind %s", k)
		}
	}
	e.auditClean()
}

// expected is what the event of a trx change must carry.
type expected struct {
	kind feed.Kind
	trx  coffer.Trx
	ops  []coffer.Op
}

func (w expected) check(t *testing.T, ev feed.Event) {
	t.Helper()
	if ev.Kind != w.kind || ev.Trx.ID != w.trx.ID || ev.Trx.IdempotencyKey != w.trx.IdempotencyKey || ev.Trx.Emitter != 7 ||
		ev.Trx.Kind != w.trx.Kind || ev.Trx.FinishedBy != w.trx.FinishedBy || ev.Namespace != 1 {
		t.Errorf("event %s: %s", ev.ID, js(ev))
	}
	if ev.Version != w.trx.Version {
		t.Errorf("event %s: version %d, the ledger's %d", ev.ID, ev.Version, w.trx.Version)
	}
	if got, want := js(ev.Ops), js(orEmpty(w.ops)); got != want {
		t.Errorf("event %s: ops %s, want %s", ev.ID, got, want)
	}
	if got, want := js(ev.Balances), js(w.trx.Balances); got != want {
		t.Errorf("event %s: balances %s, want %s", ev.ID, got, want)
	}
	if ev.Kind != feed.KindHoldExpire && ev.Kind != feed.KindHoldCommit && ev.Kind != feed.KindHoldRollback && ev.Trx.Reason != w.trx.Reason {
		t.Errorf("event %s: reason %q, want %q", ev.ID, ev.Trx.Reason, w.trx.Reason)
	}
	if ev.CommittedAt.Before(ev.At) {
		t.Errorf("event %s: committed at %v, before its write at %v", ev.ID, ev.CommittedAt, ev.At)
	}
}

func orEmpty(ops []coffer.Op) []coffer.Op {
	if ops == nil {
		return []coffer.Op{}
	}
	return ops
}

// add expects the event of player's trx at status, with ops: those the
// change wrote, of the answer's (a hold's begin answers its pending
// grants too, a finish the ops of its begin too). Its balances are the
// answer's: those its ops leave.
func (m expectations) add(kind feed.Kind, player coffer.PlayerID, trx coffer.Trx, status string, ops []coffer.Op) {
	m[fmt.Sprintf("1/%d/%d/%s", player, trx.ID, status)] = expected{kind: kind, trx: trx, ops: ops}
}

type expectations map[string]expected

func (e *env) hold(player coffer.PlayerID, key string, ttl time.Duration, ops ...coffer.OpRequest) coffer.Trx {
	e.t.Helper()
	trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Ops: ops, Reason: "test", Hold: true, HoldTTL: ttl})
	must(e.t, err)
	return trx
}

// rolledBackInsert writes a trx and an op for player in a transaction
// that rolls back.
func (e *env) rolledBackInsert(player coffer.PlayerID) {
	e.t.Helper()
	id := e.m.ShardOf(player)
	tx, err := e.router.Shard(id).Begin(ctx)
	must(e.t, err)
	_, err = tx.Exec(ctx, shard.Tables(`INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason, version, pos)
		VALUES (1, $1, now(), 999999, 7, 'ghost', '', 'change', 'committed', 'ghost', 1000, 1000)`, id), player)
	must(e.t, err)
	must(e.t, tx.Rollback(ctx))
}

// checkOrder checks each player's events come in (version, seq) order,
// every version from 1 up with an event: none missing, none twice.
func checkOrder(t *testing.T, evs []feed.Event) {
	t.Helper()
	type key struct {
		ns     coffer.Namespace
		player coffer.PlayerID
	}
	last := map[key][2]int64{}
	for _, ev := range evs {
		k := key{ev.Namespace, ev.PlayerID}
		prev, ok := last[k]
		cur := [2]int64{ev.Version, int64(ev.Seq)}
		switch {
		case !ok && (ev.Version != 1 || ev.Seq != 0):
			t.Errorf("player %v: first event %s at %v", k, ev.ID, cur)
		case ok && cur[0] == prev[0] && cur[1] != prev[1]+1, ok && cur[0] != prev[0] && (cur[0] != prev[0]+1 || cur[1] != 0):
			t.Errorf("player %v: event %s at %v after %v", k, ev.ID, cur, prev)
		}
		last[k] = cur
	}
}

func js(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

// TestRelayKilledStoresOnce: sessions cut while writes go on (the
// database ends the relay's connection, as a crash of its process would
// leave the slot), a relay stopped and started again, the broker killed
// and started again: the stream holds each committed trx change once,
// every player's in order.
func TestRelayKilledStoresOnce(t *testing.T) {
	e := newEnv(t)
	e.startRelay()
	const players, writes = 12, 15
	stopWriting := e.writeAll(players, writes)
	e.waitDelivered(20)
	e.terminateSession()
	e.waitDelivered(60)
	e.stopRelay()
	e.startRelay()
	e.waitDelivered(80)
	e.terminateSession()
	must(t, broker.Kill())
	// Writes go on without the broker; the slot keeps their WAL.
	e.change(1000, "while-down", free("gold", 1))
	e.waitSlot(func(st feed.SlotState) bool { return st.RetainedBytes > 0 })
	must(t, broker.Start())
	stopWriting()
	evs := e.waitStored(e.committedTrx())
	checkOrder(t, evs)
	if got := len(evs); got != players*writes+1 {
		t.Fatalf("%d events, want %d", got, players*writes+1)
	}
	e.obs.mu.Lock()
	t.Logf("%d duplicates dropped by the stream; %d sessions ended", e.obs.duplicates, len(e.obs.sessions))
	e.obs.mu.Unlock()
	e.auditClean()
}

// writeAll makes writes changes for each of players players, the players
// side by side; the returned func waits for them.
func (e *env) writeAll(players, writes int) func() {
	var wg sync.WaitGroup
	for p := range players {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writes {
				_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(coffer.PlayerID(p+1), fmt.Sprint("w", i)),
					Ops: []coffer.OpRequest{free("gold", coffer.Amount(i+1))}})
				if err != nil {
					e.t.Errorf("player %d write %d: %v", p+1, i, err)
					return
				}
			}
		}()
	}
	return wg.Wait
}

// waitDelivered waits (generous bound) until the relays delivered n
// events, duplicates counted.
func (e *env) waitDelivered(n int) {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.obs.mu.Lock()
		got := e.obs.delivered["jetstream"]
		e.obs.mu.Unlock()
		if got >= n {
			return
		}
	}
	e.t.Fatalf("fewer than %d events delivered", n)
}

// waitSlot waits (generous bound) until the slot's state reported
// satisfies ok.
func (e *env) waitSlot(ok func(feed.SlotState) bool) {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.obs.mu.Lock()
		st := e.obs.slot
		e.obs.mu.Unlock()
		if ok(st) {
			return
		}
	}
	e.t.Fatalf("the slot's state never came to pass")
}

// terminateSession ends the relay's replication connection from the
// database's side: the session ends without confirming what it
// delivered last, as a killed relay.
func (e *env) terminateSession() {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		must(e.t, e.router.Database(0).QueryRow(ctx, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot()).Scan(&n))
		if n == 1 {
			return
		}
	}
	e.t.Fatalf("the relay never read its slot")
}

// TestPlayerOrderSurvivesAFailedPublish: a player's event the stream
// refuses (larger than it takes) holds back the player's later events,
// never another player's; once the stream takes it, the player's events
// are stored in order.
func TestPlayerOrderSurvivesAFailedPublish(t *testing.T) {
	e := newEnv(t)
	sc := feed.StreamFor(e.stream, e.prefix, 10*time.Minute)
	sc.MaxMsgSize = 1500
	_, err := e.js.CreateStream(ctx, sc)
	must(t, err)
	e.startRelay()
	big := fmt.Sprintf(`{"note": %q}`, strings.Repeat("x", 2000))
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(7, "big"), Ops: []coffer.OpRequest{free("gold", 1)}, Meta: json.RawMessage(big)})
	must(t, err)
	e.change(7, "after", free("gold", 1))
	e.change(8, "other", free("gold", 1))
	if evs := e.waitStored(1); evs[0].PlayerID != 8 {
		t.Fatalf("stored first: %s", evs[0].ID)
	}
	e.waitSessionsEnded(2) // the big event refused again and again
	if evs := e.stored(); len(evs) != 1 {
		t.Fatalf("stored while player 7's first event is refused: %s", js(evs))
	}
	sc.MaxMsgSize = -1
	_, err = e.js.UpdateStream(ctx, sc)
	must(t, err)
	checkOrder(t, e.waitStored(3))
}

// waitSessionsEnded waits (generous bound) until n of the relay's
// sessions ended.
func (e *env) waitSessionsEnded(n int) {
	e.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		e.obs.mu.Lock()
		got := len(e.obs.sessions)
		e.obs.mu.Unlock()
		if got >= n {
			return
		}
	}
	e.t.Fatalf("fewer than %d sessions ended", n)
}

// TestIdleWALConfirmed: WAL without events (other tables' writes, or
// other databases' on the server) is confirmed while no event comes,
// again and again, so that a quiet database's slot keeps no WAL.
func TestIdleWALConfirmed(t *testing.T) {
	e := newEnv(t)
	e.startRelay()
	e.change(1, "first", free("gold", 1))
	e.waitStored(1)
	db := e.router.Database(0)
	_, err := db.Exec(ctx, "CREATE TABLE not_published (x int)")
	must(t, err)
	for round := range 3 {
		var lsn string
		_, err := db.Exec(ctx, "INSERT INTO not_published SELECT generate_series(1, 1000)")
		must(t, err)
		must(t, db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var done bool
			must(t, db.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1",
				e.slot(), lsn).Scan(&done))
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the slot did not confirm the WAL up to %s", round, lsn)
			}
		}
	}
}

// TestOnlyDurableCommitsAreEvents: on a primary whose commits wait for a
// synchronous standby, a commit the standby has not flushed (it is
// frozen) is no event yet, though the primary wrote it and decoding sent
// it to the relay: the primary may still fail over without it. Once the
// standby has it, it is an event. With a standby required, that holds
// even once the server stops waiting for it (a Patroni agent demoting a
// primary whose standby took over empties synchronous_standby_names, and
// the waiting commits complete).
func TestOnlyDurableCommitsAreEvents(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, logical)
	e := newEnvOn(t, primary)
	r := e.relay(e.jetStream())
	r.RequireStandby = true
	e.startRelayOf(r)
	e.change(1, "before", free("gold", 1))
	e.waitStored(1)
	db := e.router.Database(0)
	syncNames := func(names string) {
		_, err := db.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'")
		must(t, err)
		_, err = db.Exec(ctx, "SELECT pg_reload_conf()")
		must(t, err)
	}

	must(t, standby.Pause())
	t.Cleanup(func() { _ = standby.Resume() })
	written := e.changeWaiting(2, "waits")
	e.notStoredPastNow(1)
	must(t, standby.Resume())
	must(t, <-written)
	e.waitStored(2)

	must(t, standby.Pause())
	written = e.changeWaiting(3, "released")
	syncNames("") // the commit completes, on the primary alone
	must(t, <-written)
	e.notStoredPastNow(2)
	must(t, standby.Resume())
	syncNames("*")
	e.waitStored(3)
}

// changeWaiting starts a change of player and returns once its commit
// waits for the synchronous standby; the channel gets its outcome.
func (e *env) changeWaiting(player coffer.PlayerID, key string) <-chan error {
	e.t.Helper()
	written := make(chan error, 1)
	go func() {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Ops: []coffer.OpRequest{free("gold", 2)}})
		written <- err
	}()
	e.waitTrue("no commit waits for the standby", "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
	return written
}

// waitTrue waits until the database answers query (a boolean) with
// true, and fails the test with failure after a generous bound.
func (e *env) waitTrue(failure, query string, args ...any) {
	e.t.Helper()
	var ok bool
	for deadline := time.Now().Add(60 * time.Second); !ok; time.Sleep(10 * time.Millisecond) {
		must(e.t, e.router.Database(0).QueryRow(ctx, query, args...).Scan(&ok))
		if time.Now().After(deadline) {
			e.t.Fatal(failure)
		}
	}
}

// notStoredPastNow waits until the relay's walsender has sent the WAL as
// it is now, then a second more, and fails the test unless the stream
// still holds n events: an event published from what was sent would be
// stored by then.
func (e *env) notStoredPastNow(n uint64) {
	e.t.Helper()
	e.waitTrue("the relay was not sent the WAL", `SELECT count(*) > 0 FROM pg_stat_replication
		WHERE application_name = 'coffer-feed' AND sent_lsn >= pg_current_wal_lsn()`)
	time.Sleep(time.Second)
	if got := e.storedCount(); got != n {
		e.t.Fatalf("the stream holds %d events, want %d: a commit its standby does not have was published", got, n)
	}
}
