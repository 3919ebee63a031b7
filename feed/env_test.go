package feed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/natsserver"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	ctx = context.Background()
	// pg is the package's PostgreSQL server, with wal_level = logical;
	// broker its NATS server. Each test takes databases and a stream of
	// its own on them.
	pg     *pgserver.Server
	broker *natsserver.Server
	seq    atomic.Int64
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	pg, err = pgserver.Start(ctx, pgserver.Options{Settings: logical})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Remove()
	broker, err = natsserver.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer broker.Remove()
	return m.Run()
}

// logical are the settings logical decoding needs; the logical
// replication workers of a shard move's subscription start within half a
// second, not 5 s, of one another.
var logical = map[string]string{"wal_level": "logical", "max_wal_senders": "20", "max_replication_slots": "20",
	"wal_retrieve_retry_interval": "500ms"}

// env is a ledger on one database of pg, its relay's stream on broker,
// and the relay, started by startRelay.
type env struct {
	*jsStream
	db      pgtest.DB
	m       *shard.Map
	router  *shard.Router
	catalog *coffer.Catalog
	store   *postgres.Store

	// running is the relay startRelay started, until stopRelay.
	running *running
}

// jsStream is a JetStream stream of a test's own on broker, which its
// relays deliver to, and what they tell.
type jsStream struct {
	t      *testing.T
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	prefix string
	obs    *observer
}

// newJSStream names a stream of the test's own (the first relay's
// session creates it) and connects to broker; the stream is deleted at
// the end.
func newJSStream(t *testing.T) *jsStream {
	t.Helper()
	nc, err := nats.Connect(broker.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	must(t, err)
	js, err := jetstream.New(nc)
	must(t, err)
	n := seq.Add(1)
	s := &jsStream{t: t, nc: nc, js: js, stream: fmt.Sprintf("T%d_%d", os.Getpid(), n), prefix: fmt.Sprintf("t%d.events", n), obs: &observer{}}
	t.Cleanup(func() {
		_ = js.DeleteStream(ctx, s.stream)
		nc.Close()
	})
	return s
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, pg)
}

// newEnvOn is an env on a database of server.
func newEnvOn(t *testing.T, server *pgserver.Server) *env {
	t.Helper()
	db := pgtest.NewDBOn(t, server)
	cfg := shard.Config{ShardCount: 4, DistributionMode: "auto", ShardOnDB: 4, Databases: []shard.DatabaseConfig{{
		Name: db.Name, Host: "127.0.0.1", Port: server.Port(), User: pgserver.Superuser, Password: pgserver.Password}}}
	m, err := shard.NewMap(cfg)
	must(t, err)
	schema, err := migrate.SchemaEngine(m, nil)
	must(t, err)
	must(t, schema.Apply(ctx, migrate.Options{TargetVersion: -1}))
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	must(t, err)
	cat, err := coffer.NewCatalog([]coffer.Currency{
		{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "silver", Paid: true}, {ID: 3, Code: "credits"},
	}, 10*time.Minute, time.Hour)
	must(t, err)
	must(t, cat.AddRate(1, "gold", "silver", coffer.Rate{Num: 100, Den: 1}))
	e := &env{jsStream: newJSStream(t), db: db, m: m, router: router, catalog: cat, store: postgres.New(router, cat, postgres.Options{})}
	t.Cleanup(func() {
		e.stopRelay()
		e.store.Close()
		router.Close()
		dropSlot(t, db, e.slot())
	})
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) slot() string { return slotOf(e.db) }

// slotOf is the slot of the relay of db.
func slotOf(db pgtest.DB) string { return feed.SlotName("coffer_feed", db.Name) }

// dropSlot drops a test's slot: slots are the server's, and one left
// behind would keep its WAL for ever.
func dropSlot(t *testing.T, db pgtest.DB, slot string) {
	conn, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	for range 100 {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // its reader is going away
	}
}

// relay is the env's relay to JetStream.
func (e *env) relay(sinks ...feed.Sink) *feed.Relay {
	return e.relayOf(e.m.Databases()[0].Name(), e.db, e.catalog, sinks...)
}

// relayOf is a relay of db, named name, to sinks, that tells s's observer.
func (s *jsStream) relayOf(name string, db pgtest.DB, cat *coffer.Catalog, sinks ...feed.Sink) *feed.Relay {
	return &feed.Relay{Database: name, ConnString: db.DSN(), Catalog: cat,
		Slot: slotOf(db), Publication: "coffer_feed", Sinks: sinks, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: s.obs, StatusInterval: 50 * time.Millisecond, PauseMin: 20 * time.Millisecond, PauseMax: 500 * time.Millisecond,
		SlotCheckInterval: 100 * time.Millisecond}
}

func (e *jsStream) jetStream() *feed.JetStream {
	return &feed.JetStream{Conn: e.nc, Stream: feed.StreamFor(e.stream, e.prefix, 10*time.Minute), SubjectPrefix: e.prefix,
		InFlightMax: 64, PublishTimeout: 2 * time.Second, Observer: e.obs}
}

// startRelay runs a relay to JetStream until stopRelay.
func (e *env) startRelay() {
	e.t.Helper()
	e.startRelayOf(e.relay(e.jetStream()))
}

func (e *env) startRelayOf(r *feed.Relay) {
	e.t.Helper()
	e.running = runRelay(e.t, r)
}

// stopRelay stops the relay startRelay started (running.stop).
func (e *env) stopRelay() {
	if e.running != nil {
		e.running.stop(e.t)
		e.running = nil
	}
}

// running is a relay that runs until stop.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

// runRelay prepares r's database and runs r.
func runRelay(t *testing.T, r *feed.Relay) *running {
	t.Helper()
	must(t, r.Prepare(ctx))
	rctx, cancel := context.WithCancel(ctx)
	rr := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(rctx) }()
	return rr
}

// stop stops the relay as a kill would for its deliveries: what is in
// flight is dropped; the slot keeps what was not confirmed.
func (rr *running) stop(t *testing.T) {
	rr.cancel()
	if err := <-rr.done; err != nil {
		t.Errorf("relay: %v", err)
	}
}

// storedCount is how many messages the stream stores now.
func (e *jsStream) storedCount() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(ctx, e.stream)
	must(e.t, err)
	info, err := s.Info(ctx)
	must(e.t, err)
	return info.State.Msgs
}

// waitStored waits until the stream stores n messages (generous bound),
// and fails the test if it stores more.
func (e *jsStream) waitStored(n uint64) []feed.Event {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var have uint64
	for time.Now().Before(deadline) {
		s, err := e.js.Stream(ctx, e.stream)
		if err == nil {
			info, err := s.Info(ctx)
			if err == nil {
				have = info.State.Msgs
				if have >= n {
					break
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if have != n {
		e.t.Fatalf("stream holds %d events, want %d", have, n)
	}
	return e.stored()
}

// stored reads every message of the stream, in order.
func (e *jsStream) stored() []feed.Event {
	e.t.Helper()
	s, err := e.js.Stream(ctx, e.stream)
	must(e.t, err)
	info, err := s.Info(ctx)
	must(e.t, err)
	var out []feed.Event
	for sq := info.State.FirstSeq; sq <= info.State.LastSeq && info.State.Msgs > 0; sq++ {
		msg, err := s.GetMsg(ctx, sq)
		must(e.t, err)
		var ev feed.Event
		must(e.t, json.Unmarshal(msg.Data, &ev))
		if want := ev.Subject(e.prefix); msg.Subject != want {
			e.t.Errorf("event %s on %s, want %s", ev.ID, msg.Subject, want)
		}
		if id := msg.Header.Get(jetstream.MsgIDHeader); id != ev.ID {
			e.t.Errorf("event %s with message id %q", ev.ID, id)
		}
		out = append(out, ev)
	}
	return out
}

// committedTrx counts the trx changes the ledger committed: every trx
// row, and every finished hold once more.
func (e *env) committedTrx() uint64 {
	e.t.Helper()
	var n uint64
	for _, id := range e.m.Databases()[0].Shards {
		var c uint64
		must(e.t, e.router.Shard(id).QueryRow(ctx, shard.Tables(
			"SELECT count(*) + count(*) FILTER (WHERE kind = 'hold' AND status <> 'pending') FROM trx_N", id)).Scan(&c))
		n += c
	}
	return n
}

func (e *env) auditClean() {
	e.t.Helper()
	auditClean(e.t, e.router)
}

// auditClean runs the audit on the databases of router.
func auditClean(t *testing.T, router *shard.Router) {
	t.Helper()
	r, err := (&audit.Checker{Router: router, HoldGrace: time.Minute}).Check(ctx)
	must(t, err)
	if !r.Clean() {
		t.Fatalf("audit: %+v", r.Violations)
	}
}

func scope(player coffer.PlayerID, key string) coffer.Scope {
	return coffer.Scope{Namespace: 1, PlayerID: player, Emitter: 7, IdempotencyKey: key}
}

// byItsClient is a commit or rollback of the hold of scope(player, key)
// by the client that began it.
func byItsClient(player coffer.PlayerID, key string) coffer.FinishRequest {
	sc := scope(player, key)
	return coffer.FinishRequest{Scope: sc, By: sc.Emitter}
}

func free(cur string, amount coffer.Amount) coffer.OpRequest {
	return coffer.OpRequest{Currency: cur, Amount: amount}
}

func (e *env) change(player coffer.PlayerID, key string, ops ...coffer.OpRequest) coffer.Trx {
	e.t.Helper()
	return change(e.t, e.store, player, key, ops...)
}

// change writes a one-phase change through store.
func change(t *testing.T, store *postgres.Store, player coffer.PlayerID, key string, ops ...coffer.OpRequest) coffer.Trx {
	t.Helper()
	trx, _, err := store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, key), Ops: ops, Reason: "test"})
	must(t, err)
	return trx
}

// observer counts what the relay tells.
type observer struct {
	mu         sync.Mutex
	delivered  map[string]int
	duplicates int
	sessions   []error
	slot       feed.SlotState
	// held is what each database's relay reported last of its hold.
	held map[string]time.Duration
}

func (o *observer) Delivered(database, sink string, duplicate bool, lag time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.delivered == nil {
		o.delivered = map[string]int{}
	}
	o.delivered[sink]++
	if duplicate {
		o.duplicates++
	}
}

func (o *observer) Slot(database string, st feed.SlotState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slot = st
}

func (o *observer) SessionEnded(database string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sessions = append(o.sessions, err)
}

func (o *observer) Held(database string, held time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = map[string]time.Duration{}
	}
	o.held[database] = held
}

// heldNow tells whether the relay of database holds its stream now.
func (o *observer) heldNow(database string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held[database] > 0
}
