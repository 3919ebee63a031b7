package feed_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
)

// TestLogicalWalsendersAreNoStandby: under synchronous_standby_names
// '*' (Patroni's strict synchronous mode with no replica to name) a
// logical walsender is picked as the synchronous standby once no
// physical one streams, and the commits it confirms are on no standby.
// Neither coffer's probe (require_synchronous_standby) nor the relay
// takes one for a standby: not another logical consumer (a subscription)
// that confirms what it receives, nor the relay itself.
func TestLogicalWalsendersAreNoStandby(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, logical)
	e := newEnvOn(t, primary)
	// The consumer connects before the relay: its walsender's slot in
	// the server's array comes first, and PostgreSQL picks the first.
	stopConsumer := pgtest.ConfirmingConsumer(t, e.db.DSN())
	r := e.relay(e.jetStream())
	r.RequireStandby = true
	e.startRelayOf(r)
	e.change(1, "before", free("gold", 1))
	e.waitStored(1)
	router := guardedRouter(t, e.db.Name, primary, standby)
	wantSynchronous(t, router, true)

	must(t, standby.Stop())
	t.Cleanup(func() { _ = standby.Start(ctx) }) // the database's drop waits for it
	e.waitSyncStandby("other-consumer")
	e.change(2, "on the primary alone", free("gold", 1)) // the consumer confirmed it
	wantSynchronous(t, router, false)
	e.notStoredPastNow(1)

	stopConsumer()
	e.waitSyncStandby("coffer-feed")
	wantSynchronous(t, router, false)

	must(t, standby.Start(ctx))
	e.waitStored(2)
	// The standby may reconnect once more as it catches up.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p, err := router.Probe(ctx, 0); err == nil && p.Synchronous() && router.Writable(0) == nil {
			break
		}
		if time.Now().After(deadline) {
			wantSynchronous(t, router, true)
		}
	}
}

// TestRelayCountsAPhysicalStandbyBehindALogicalOne: under
// synchronous_standby_names '*' a physical standby that connects after a
// logical walsender is a candidate the server reports as "potential",
// not "sync". It is the standby writes wait for (shard.Flushed), and the
// relay publishes what it has flushed rather than wait until Patroni
// names it.
func TestRelayCountsAPhysicalStandbyBehindALogicalOne(t *testing.T) {
	primary, standby := pgtest.SynchronousPair(t, logical)
	e := newEnvOn(t, primary)
	stopConsumer := pgtest.ConfirmingConsumer(t, e.db.DSN())
	t.Cleanup(stopConsumer)
	// The standby leaves the array's first place, which the relay's
	// walsender takes; it comes back behind both logical ones.
	must(t, standby.Stop())
	t.Cleanup(func() { _ = standby.Start(ctx) }) // the database's drop waits for it
	e.waitSyncStandby("other-consumer")
	r := e.relay(e.jetStream())
	r.RequireStandby = true
	e.startRelayOf(r)
	must(t, standby.Start(ctx))
	e.waitTrue("the standby does not stream behind the logical walsenders", `SELECT count(*) > 0 FROM `+shard.StandbyReplication+` standbys
		WHERE state = 'streaming' AND sync_state = 'potential'`)
	e.change(1, "a potential standby has it", free("gold", 1))
	e.waitStored(1)
}

// waitSyncStandby waits until the walsender of application is the
// primary's synchronous standby.
func (e *env) waitSyncStandby(application string) {
	e.t.Helper()
	e.waitTrue(application+" was not picked as the synchronous standby", `SELECT count(*) > 0 FROM pg_stat_replication
		WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'`, application)
}

// guardedRouter is a router whose database has both servers as hosts,
// as coffer serve follows a failover, and requires a synchronous standby.
func guardedRouter(t *testing.T, database string, servers ...*pgserver.Server) *shard.Router {
	t.Helper()
	db := shard.DatabaseConfig{Name: database, User: pgserver.Superuser, Password: pgserver.Password}
	for _, s := range servers {
		db.Hosts = append(db.Hosts, fmt.Sprintf("127.0.0.1:%d", s.Port()))
	}
	m, err := shard.NewMap(shard.Config{ShardCount: 4, DistributionMode: "auto", ShardOnDB: 4, Databases: []shard.DatabaseConfig{db}})
	must(t, err)
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	must(t, err)
	t.Cleanup(router.Close)
	router.RequireSynchronousStandby()
	return router
}

// wantSynchronous probes the router's database and fails the test unless
// it finds a synchronous standby, and takes writes, as want says.
func wantSynchronous(t *testing.T, router *shard.Router, want bool) {
	t.Helper()
	p, err := router.Probe(ctx, 0)
	must(t, err)
	if p.Synchronous() != want || (router.Writable(0) == nil) != want {
		t.Fatalf("probe: %d synchronous standbys, writable: %v; want a synchronous standby: %v", p.SynchronousStandbys, router.Writable(0), want)
	}
}
