package feed_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// TestCopiedRowsAreNoEvents: rows a subscription writes into another
// database — a shard move's copy of a shard, both its initial copy and
// the changes it applies after — were events where they were first
// written; the relay of the database they are copied to makes none.
func TestCopiedRowsAreNoEvents(t *testing.T) {
	src := newEnv(t)
	src.startRelay()
	src.writeAll(3, 4)()

	dst := newEnv(t)
	dst.startRelay()
	var tables []string
	for _, id := range src.m.Databases()[0].Shards {
		tables = append(tables, shard.Tables("trx_N, op_N", id))
	}
	slot := fmt.Sprintf("move_%d", seq.Add(1))
	src.db.Exec(t, "CREATE PUBLICATION "+slot+" FOR TABLE "+strings.Join(tables, ", "))
	src.db.Exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s password=%s", pg.Port(), src.db.Name, pgserver.Superuser, pgserver.Password)
	dst.db.Exec(t, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION %s WITH (create_slot = false, slot_name = '%s')",
		slot, conninfo, slot, slot))
	t.Cleanup(func() { dropSubscription(t, dst.db, slot) })
	src.writeAll(3, 2)() // applied by the subscription after its copy

	want := src.committedTrx()
	for deadline := time.Now().Add(60 * time.Second); dst.rows() != want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the subscription copied %d trx of %d", dst.rows(), want)
		}
	}
	src.waitStored(want)
	dst.waitConfirmedPastNow()
	if evs := dst.stored(); len(evs) != 0 {
		t.Fatalf("%d events of copied rows, the first %s", len(evs), evs[0].ID)
	}
}

// rows counts the env's trx rows.
func (e *env) rows() uint64 {
	e.t.Helper()
	var n uint64
	for _, id := range e.m.Databases()[0].Shards {
		var c uint64
		must(e.t, e.router.Shard(id).QueryRow(ctx, shard.Tables("SELECT count(*) FROM trx_N", id)).Scan(&c))
		n += c
	}
	return n
}

// waitConfirmedPastNow waits (generous bound) until the relay's slot
// confirmed the database's WAL as it is now: the relay decoded it all.
func (e *env) waitConfirmedPastNow() {
	e.t.Helper()
	var now string
	must(e.t, e.router.Database(0).QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&now))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var caught bool
		must(e.t, e.router.Database(0).QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
			now, e.slot()).Scan(&caught))
		if caught {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("the relay's slot never confirmed the WAL of now")
		}
	}
}

func dropSubscription(t *testing.T, db pgtest.DB, name string) {
	conn, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SUBSCRIPTION IF EXISTS "+name); err != nil {
		t.Error(err)
	}
}
