package feed_test

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/postgres"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMovedPlayerKeepsItsOrder: a shard moves while the relay of its old
// home is stopped, with events of a player of it not yet published
// there. The relay of its new home holds the player's event written
// there — and with it its stream, the other shards' events too — until
// the old home's relay has published the player's events there; then
// the stream holds the player's events in version order.
func TestMovedPlayerKeepsItsOrder(t *testing.T) {
	e := newMoveEnv(t)
	e.prepare(0)
	e.prepare(1)
	p, q := e.playerOn(0), e.playerOn(2)
	e.change(p, "on a, 1")
	e.change(p, "on a, 2")
	e.move(0, 1)
	e.change(p, "on b")
	e.change(q, "on b, unmoved")

	b := e.start(1)
	defer b.stop(t)
	// Either the relay of b holds, or it published p's event: waiting for
	// either is no bet on time.
	for deadline := time.Now().Add(time.Minute); !e.obs.heldNow(e.name(1)) && len(versionsOf(e.storedYet(), p)) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay of b neither held nor published within a minute")
		}
	}
	if evs := e.storedYet(); len(evs) > 0 {
		t.Fatalf("while a's events of the moved player are not published, b's relay stored %d events, the first %s", len(evs), evs[0].ID)
	}

	a := e.start(0)
	defer a.stop(t)
	evs := e.waitStored(4)
	if got := versionsOf(evs, p); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("the moved player's events are stored in the versions %v, want 1, 2, 3", got)
	}
	if e.obs.heldNow(e.name(1)) {
		t.Error("the relay of b still tells it holds")
	}
	auditClean(t, e.router)
}

// TestMovedFromNoFeed: a shard moves from a database whose feed never ran
// (its relay has no slot there): nothing of it waits to be published, so
// the relay of the new home goes on, and says so once.
func TestMovedFromNoFeed(t *testing.T) {
	e := newMoveEnv(t)
	e.prepare(1)
	p := e.playerOn(0)
	e.change(p, "on a")
	e.move(0, 1)
	e.change(p, "on b, 1")
	e.change(p, "on b, 2")

	var log syncBuffer
	r := e.relay(1)
	r.Logger = slog.New(slog.NewTextHandler(&log, nil))
	defer runRelay(t, r).stop(t)
	if got := versionsOf(e.waitStored(2), p); !slices.Equal(got, []int64{2, 3}) {
		t.Errorf("the moved player's events are stored in the versions %v, want 2, 3", got)
	}
	if n := strings.Count(log.String(), "is missing or lost"); n != 1 {
		t.Errorf("the relay said %d times that the old home's slot is missing, want once:\n%s", n, log.String())
	}
	auditClean(t, e.router)
}

// TestMovedThereAndBack: a shard moves from a to b and back, both relays
// stopped all along; started together, each holds the shard's events of
// its later stay for the other, and neither waits for the other for
// ever: a's events of the shard's first stay, before its move to b,
// wait for nothing, and a relay that holds confirms its slot up to the
// transaction it holds.
func TestMovedThereAndBack(t *testing.T) {
	e := newMoveEnv(t)
	e.prepare(0)
	e.prepare(1)
	p := e.playerOn(0)
	e.change(p, "on a")
	e.move(0, 1)
	must(t, e.mover.Cleanup(ctx, 0, false))
	e.change(p, "on b")
	e.move(0, 0)
	e.change(p, "on a again")

	a, b := e.start(0), e.start(1)
	defer a.stop(t)
	defer b.stop(t)
	if got := versionsOf(e.waitStored(3), p); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("the moved player's events are stored in the versions %v, want 1, 2, 3", got)
	}
	auditClean(t, e.router)
}

// moveEnv is a deployment of 4 shards on two databases of pg, a (0–1)
// and b (2–3), migrated; a store and a mover; and a relay for each
// database, to one stream.
type moveEnv struct {
	*jsStream
	dbs     []pgtest.DB
	router  *shard.Router
	catalog *coffer.Catalog
	store   *postgres.Store
	mover   *move.Mover
}

func newMoveEnv(t *testing.T) *moveEnv {
	t.Helper()
	e := &moveEnv{jsStream: newJSStream(t)}
	cfg := shard.Config{ShardCount: 4, DistributionMode: "manual"}
	for _, r := range []shard.Range{{Min: 0, Max: 1}, {Min: 2, Max: 3}} {
		db := pgtest.NewDBOn(t, pg)
		t.Cleanup(func() { dropSlot(t, db, slotOf(db)) })
		e.dbs = append(e.dbs, db)
		cfg.Databases = append(cfg.Databases, shard.DatabaseConfig{Name: db.Name, Host: "127.0.0.1", Port: pg.Port(),
			User: pgserver.Superuser, Password: pgserver.Password, Shards: []shard.Range{r}})
	}
	m, err := shard.NewMap(cfg)
	must(t, err)
	schema, err := migrate.SchemaEngine(m, nil)
	must(t, err)
	must(t, schema.Apply(ctx, migrate.Options{TargetVersion: -1}))
	e.router = openRouter(t, m)
	e.catalog, err = coffer.NewCatalog([]coffer.Currency{{ID: 1, Code: "gold", Paid: true}}, 10*time.Minute, time.Hour)
	must(t, err)
	e.store = postgres.New(e.router, e.catalog, postgres.Options{})
	t.Cleanup(e.store.Close)
	e.mover = &move.Mover{Router: openRouter(t, m), Engine: schema}
	return e
}

// openRouter opens a router of its own on m, closed at the end.
func openRouter(t *testing.T, m *shard.Map) *shard.Router {
	t.Helper()
	r, err := shard.Open(m, shard.DefaultPoolConfig())
	must(t, err)
	t.Cleanup(r.Close)
	return r
}

// name is database i's name (shard.Database.Name).
func (e *moveEnv) name(i int) string { return e.router.Map().Databases()[i].Name() }

// relay is the relay of database i, which knows the other as a source.
func (e *moveEnv) relay(i int) *feed.Relay {
	r := e.relayOf(e.name(i), e.dbs[i], e.catalog, e.jetStream())
	r.Sources = map[string]feed.Source{}
	for j, db := range e.dbs {
		r.Sources[e.name(j)] = feed.Source{ConnString: db.DSN(), Slot: slotOf(db)}
	}
	return r
}

// prepare makes database i's publication and slot, as a relay's first
// start does: from then on its writes are in the feed.
func (e *moveEnv) prepare(i int) { must(e.t, e.relay(i).Prepare(ctx)) }

// start runs the relay of database i.
func (e *moveEnv) start(i int) *running { return runRelay(e.t, e.relay(i)) }

// move moves shard s to database to, up to verified, and makes the
// store's router read it.
func (e *moveEnv) move(s coffer.ShardID, to int) {
	e.t.Helper()
	rep, err := e.mover.Move(ctx, s, e.name(to))
	must(e.t, err)
	if rep.Move.State != shard.MoveVerified {
		e.t.Fatalf("shard %d's move is %s", s, rep.Move.State)
	}
	must(e.t, e.router.Refresh(ctx))
}

// playerOn is a player of shard s.
func (e *moveEnv) playerOn(s coffer.ShardID) coffer.PlayerID {
	p := coffer.PlayerID(1)
	for e.router.Map().ShardOf(p) != s {
		p++
	}
	return p
}

func (e *moveEnv) change(p coffer.PlayerID, key string) {
	e.t.Helper()
	change(e.t, e.store, p, key, free("gold", 1))
}

// versionsOf are the versions of p's events in evs, in their order.
func versionsOf(evs []feed.Event, p coffer.PlayerID) []int64 {
	var out []int64
	for _, ev := range evs {
		if ev.PlayerID == p {
			out = append(out, ev.Version)
		}
	}
	return out
}

// storedYet is stored, or none while no relay has made the stream.
func (s *jsStream) storedYet() []feed.Event {
	s.t.Helper()
	if _, err := s.js.Stream(ctx, s.stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return s.stored()
}

// syncBuffer is a buffer a relay's logger may write while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
