package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/torture"
)

// serverCluster is the databases of a torture run as PostgreSQL servers
// the run starts itself: one per database, or with standbys a primary and
// its synchronous standby, each behind a fault proxy.
type serverCluster struct {
	dbs []*serverDB
}

// serverDB is one database's servers and proxies, and which server is the
// primary. Safe for concurrent use.
type serverDB struct {
	servers []*pgserver.Server
	proxies []*torture.Proxy

	mu      sync.Mutex
	primary int // index in servers
}

// startServerCluster starts n databases under dir, each with a database
// named coffer (created before the standby's base backup, which copies it),
// with settings over pgserver's (with standbys, give it the
// ReplicationSettings).
func startServerCluster(ctx context.Context, dir string, n int, standbys bool, settings map[string]string) (tortureCluster, error) {
	c := &serverCluster{}
	for i := 0; i < n; i++ {
		db := &serverDB{}
		c.dbs = append(c.dbs, db)
		opts := pgserver.Options{Dir: filepath.Join(dir, fmt.Sprintf("pg%d", i)), Durable: true, Settings: settings}
		s, err := pgserver.Start(ctx, opts)
		if err != nil {
			c.close()
			return nil, err
		}
		db.servers = append(db.servers, s)
		if err := createDatabase(ctx, s, "coffer"); err != nil {
			c.close()
			return nil, err
		}
		if standbys {
			opts.Dir += "-standby"
			standby, err := pgserver.StartStandby(ctx, s, opts)
			if err != nil {
				c.close()
				return nil, err
			}
			db.servers = append(db.servers, standby)
			for _, s := range db.servers {
				if err := s.RequireSynchronousStandby(ctx); err != nil {
					c.close()
					return nil, err
				}
			}
		}
		for _, s := range db.servers {
			p, err := torture.NewProxy(fmt.Sprintf("127.0.0.1:%d", s.Port()))
			if err != nil {
				c.close()
				return nil, err
			}
			db.proxies = append(db.proxies, p)
		}
	}
	return c, nil
}

func (c *serverCluster) databases() (direct, proxied [][]string) {
	for _, db := range c.dbs {
		var ports []int
		for _, s := range db.servers {
			ports = append(ports, s.Port())
		}
		direct, proxied = appendAddresses(direct, proxied, ports, db.proxies)
	}
	return direct, proxied
}

// appendAddresses appends a database's servers, on ports, and the proxies
// in front of them, to the addresses of the databases before it.
func appendAddresses(direct, proxied [][]string, ports []int, proxies []*torture.Proxy) ([][]string, [][]string) {
	var d, p []string
	for k, port := range ports {
		d = append(d, fmt.Sprintf("127.0.0.1:%d", port))
		p = append(p, fmt.Sprintf("127.0.0.1:%d", proxies[k].Port()))
	}
	return append(direct, d), append(proxied, p)
}

func (c *serverCluster) close() {
	for _, db := range c.dbs {
		for _, p := range db.proxies {
			p.Close()
		}
		for _, s := range db.servers {
			_ = s.Resume()
			_ = s.Stop()
		}
	}
}

// current is the index of database i's primary.
func (c *serverCluster) current(i int) int {
	db := c.dbs[i]
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.primary
}

func (c *serverCluster) server(i int) *pgserver.Server { return c.dbs[i].servers[c.current(i)] }

// KillServer is part of torture.Target: kill -9 database i's primary.
func (c *serverCluster) KillServer(i int) error { return c.server(i).Kill() }

// RestartServer is part of torture.Target.
func (c *serverCluster) RestartServer(ctx context.Context, i int) error {
	return c.server(i).Start(ctx)
}

// PauseServer is part of torture.Target.
func (c *serverCluster) PauseServer(i int) error { return c.server(i).Pause() }

// ResumeServer is part of torture.Target.
func (c *serverCluster) ResumeServer(i int) error { return c.server(i).Resume() }

// Proxy is part of torture.Target: the proxy in front of the primary.
func (c *serverCluster) Proxy(i int) *torture.Proxy { return c.dbs[i].proxies[c.current(i)] }

// Failover is part of torture.Target: the primary goes down (kill -9, or
// for a switchover a clean shutdown, which first sends the standby all it
// wrote), the standby is promoted, and the old primary is rewound into the
// new one's standby. It returns once that standby is in sync.
func (c *serverCluster) Failover(ctx context.Context, i int, kind string, _ time.Duration) error {
	db := c.dbs[i]
	if len(db.servers) < 2 {
		return errors.New("no standby to fail over to (run with --standbys)")
	}
	old := c.current(i)
	next := 1 - old
	var err error
	switch kind {
	case torture.PGFailover:
		err = db.servers[old].Kill()
	case torture.PGSwitchover:
		err = db.servers[old].Stop()
	default:
		return fmt.Errorf("%s needs --patroni", kind)
	}
	if err != nil {
		return err
	}
	if err := db.servers[next].Promote(ctx); err != nil {
		return err
	}
	db.mu.Lock()
	db.primary = next
	db.mu.Unlock()
	if err := db.servers[old].Rejoin(ctx, db.servers[next]); err != nil {
		return err
	}
	return db.servers[next].WaitSynchronousStandby(ctx, time.Minute)
}

// keepSlot is part of tortureCluster: a run with the feed has no standbys
// (PostgreSQL 15 keeps no logical slot across a failover by itself).
func (c *serverCluster) keepSlot(context.Context, string) error { return nil }
