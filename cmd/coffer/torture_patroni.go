package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/torture"
	"github.com/jackc/pgx/v5"
)

// patroniCluster is the databases of a torture run as Patroni clusters
// (--patroni): one etcd, and per database two members (Patroni agent and
// PostgreSQL) in synchronous mode, each member behind a fault proxy.
// coffer knows only the hosts.
type patroniCluster struct {
	etcd *pgserver.Etcd
	dbs  []*patroniDB
}

type patroniDB struct {
	members []*pgserver.PatroniMember
	proxies []*torture.Proxy
}

// patroniWait bounds each wait for Patroni: a bootstrap, a new leader, an
// old leader back as a synchronous standby. A bootstrap (initdb, then the
// standby's base backup) has taken over 90 s on a 2-core machine while
// the other packages' tests ran beside it.
const patroniWait = 180 * time.Second

// startPatroniCluster starts etcd and n clusters of two members under dir,
// with parameters over pgserver's, waits until each has a leader and a
// synchronous standby, and creates the database coffer on each.
func startPatroniCluster(ctx context.Context, dir string, n int, parameters map[string]string) (tortureCluster, error) {
	if err := pgserver.PatroniBinaries(); err != nil {
		return nil, err
	}
	// The agents run as the PostgreSQL user, under dir.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	etcd, err := pgserver.StartEtcd(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	c := &patroniCluster{etcd: etcd}
	for i := 0; i < n; i++ {
		db := &patroniDB{}
		c.dbs = append(c.dbs, db)
		for k := 0; k < 2; k++ {
			name := fmt.Sprintf("db%d-%d", i, k)
			m, err := pgserver.StartPatroni(ctx, etcd, filepath.Join(dir, name), fmt.Sprintf("coffer-db%d", i), name, parameters)
			if err != nil {
				c.close()
				return nil, err
			}
			db.members = append(db.members, m)
			p, err := torture.NewProxy(fmt.Sprintf("127.0.0.1:%d", m.Port()))
			if err != nil {
				c.close()
				return nil, err
			}
			db.proxies = append(db.proxies, p)
		}
	}
	for i, db := range c.dbs {
		if err := c.waitSynchronous(ctx, i); err != nil {
			c.close()
			return nil, err
		}
		if err := createDatabaseAt(ctx, db.members[c.leader(ctx, i)].DSN("postgres"), "coffer"); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// leader is the index of database i's leading member, or 0 when none
// leads (during a failover).
func (c *patroniCluster) leader(ctx context.Context, i int) int {
	for k, m := range c.dbs[i].members {
		if m.IsLeader(ctx) {
			return k
		}
	}
	return 0
}

// waitSynchronous waits until database i has a leader and its other
// member is the synchronous standby.
func (c *patroniCluster) waitSynchronous(ctx context.Context, i int) error {
	ms := c.dbs[i].members
	err := waitPatroni(ctx, func() bool {
		return (ms[0].IsLeader(ctx) && ms[1].IsSyncStandby(ctx)) || (ms[1].IsLeader(ctx) && ms[0].IsSyncStandby(ctx))
	}, fmt.Sprintf("cluster %s: no leader with a synchronous standby", ms[0].Scope))
	if err != nil {
		return fmt.Errorf("%w; %s's log: %s; %s's log: %s", err, ms[0].Name, ms[0].LogTail(), ms[1].Name, ms[1].LogTail())
	}
	return nil
}

// waitPatroni polls ok every 100 ms for at most patroniWait; what says what failed.
func waitPatroni(ctx context.Context, ok func() bool, what string) error {
	for start := time.Now(); !ok(); time.Sleep(100 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) > patroniWait {
			return fmt.Errorf("%s after %s", what, patroniWait)
		}
	}
	return nil
}

func (c *patroniCluster) databases() (direct, proxied [][]string) {
	for _, db := range c.dbs {
		var ports []int
		for _, m := range db.members {
			ports = append(ports, m.Port())
		}
		direct, proxied = appendAddresses(direct, proxied, ports, db.proxies)
	}
	return direct, proxied
}

func (c *patroniCluster) close() {
	var wg sync.WaitGroup
	for _, db := range c.dbs {
		for _, p := range db.proxies {
			p.Close()
		}
		for _, m := range db.members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.Stop()
			}()
		}
	}
	wg.Wait()
	c.etcd.Stop()
}

// KillServer is part of torture.Target: kill -9 the leader's PostgreSQL.
func (c *patroniCluster) KillServer(i int) error {
	return c.dbs[i].members[c.leader(context.Background(), i)].KillPostgres()
}

// RestartServer is part of torture.Target: Patroni restarts PostgreSQL (or
// fails over) by itself.
func (c *patroniCluster) RestartServer(context.Context, int) error { return nil }

var errPatroniPause = errors.New("pg-stop is not a fault of --patroni runs")

// PauseServer is part of torture.Target.
func (c *patroniCluster) PauseServer(int) error { return errPatroniPause }

// ResumeServer is part of torture.Target.
func (c *patroniCluster) ResumeServer(int) error { return errPatroniPause }

// Proxy is part of torture.Target: the proxy in front of the leader.
func (c *patroniCluster) Proxy(i int) *torture.Proxy {
	return c.dbs[i].proxies[c.leader(context.Background(), i)]
}

// Failover is part of torture.Target. patroni-kill kills the leader's
// agent (its PostgreSQL runs on, as a primary whose standby is about to
// leave it), waits until the other member leads, and restarts the agent
// once length has passed, which turns its PostgreSQL into a standby;
// pg-switchover is `patronictl switchover`. Both return once the old
// leader is the synchronous standby.
func (c *patroniCluster) Failover(ctx context.Context, i int, kind string, length time.Duration) error {
	db := c.dbs[i]
	// A fault of another kind (pg-kill) may have left the standby out
	// of sync, or made it the leader.
	if err := c.waitSynchronous(ctx, i); err != nil {
		return err
	}
	old := c.leader(ctx, i)
	next := 1 - old
	switch kind {
	case torture.PatroniKill:
		killed := time.Now()
		db.members[old].KillAgent()
		if err := waitPatroni(ctx, func() bool { return db.members[next].IsLeader(ctx) },
			db.members[next].Name+" did not take the lead"); err != nil {
			return errors.Join(fmt.Errorf("%w; its log: %s", err, db.members[next].LogTail()), db.members[old].StartAgent(ctx))
		}
		time.Sleep(time.Until(killed.Add(length)))
		if err := db.members[old].StartAgent(ctx); err != nil {
			return err
		}
	case torture.PGSwitchover:
		if err := db.members[old].Switchover(ctx, db.members[old].Name, db.members[next].Name); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s is not a fault of --patroni runs", kind)
	}
	err := waitPatroni(ctx, func() bool { return db.members[next].IsLeader(ctx) && db.members[old].IsSyncStandby(ctx) },
		fmt.Sprintf("%s: %s not back as the synchronous standby", kind, db.members[old].Name))
	if err != nil {
		return fmt.Errorf("%w; its log: %s", err, db.members[old].LogTail())
	}
	return nil
}

// keepSlot is part of tortureCluster: the slot becomes a permanent slot of
// every cluster (Patroni copies it to the replica, whose PostgreSQL
// restarts), and keepSlot returns once each member has it and the
// replica is the synchronous standby again.
func (c *patroniCluster) keepSlot(ctx context.Context, slot string) error {
	for i, db := range c.dbs {
		if err := db.members[c.leader(ctx, i)].AddPermanentSlot(ctx, slot, "coffer", "pgoutput"); err != nil {
			return err
		}
		for _, m := range db.members {
			if err := waitPatroni(ctx, func() bool { return hasSlot(ctx, m.DSN("coffer"), slot) },
				fmt.Sprintf("%s has no copy of the permanent slot %s", m.Name, slot)); err != nil {
				return fmt.Errorf("%w; its log: %s", err, m.LogTail())
			}
		}
		if err := c.waitSynchronous(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// hasSlot tells whether the server at dsn has the replication slot.
func hasSlot(ctx context.Context, dsn, slot string) bool {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var n int
	return conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n) == nil && n == 1
}
