package feed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
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
	stopConsumer := confirmingConsumer(t, e.db.DSN())
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

// confirmingConsumer reads a temporary logical slot of the database at
// dsn and confirms every position the server sends it, as a subscription
// that applies what it receives elsewhere does. The function stops it.
func confirmingConsumer(t *testing.T, dsn string) (stop func()) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	must(t, err)
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "other-consumer"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	must(t, err)
	must(t, conn.Exec(ctx, "CREATE PUBLICATION other_consumer").Close())
	_, err = pglogrepl.CreateReplicationSlot(ctx, conn, "other_consumer", "pgoutput", pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	must(t, err)
	must(t, pglogrepl.StartReplication(ctx, conn, "other_consumer", 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'other_consumer'"}}))
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pos pglogrepl.LSN
		for cctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(cctx, time.Second)
			msg, err := conn.ReceiveMessage(rctx)
			rcancel()
			if err != nil && !pgconn.Timeout(err) {
				return
			}
			if cd, ok := msg.(*pgproto3.CopyData); ok {
				switch cd.Data[0] {
				case pglogrepl.PrimaryKeepaliveMessageByteID:
					if ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:]); err == nil {
						pos = max(pos, ka.ServerWALEnd)
					}
				case pglogrepl.XLogDataByteID:
					if x, err := pglogrepl.ParseXLogData(cd.Data[1:]); err == nil {
						pos = max(pos, x.ServerWALEnd)
					}
				}
			}
			if pos > 0 && pglogrepl.SendStandbyStatusUpdate(cctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}) != nil {
				return
			}
		}
	}()
	stop = func() {
		cancel()
		<-done
		_ = conn.Close(ctx)
	}
	t.Cleanup(stop)
	return stop
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
