package shard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, 3) }

func db(name string, shards ...Range) DatabaseConfig {
	return DatabaseConfig{Name: name, Host: "127.0.0.1", Port: 5432, User: "u", Shards: shards}
}

func TestNewMapRejects(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"zero count", Config{ShardCount: 0, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{db("a")}}, "shard_count"},
		{"no databases", Config{ShardCount: 4, DistributionMode: "auto", ShardOnDB: 4}, "databases"},
		{"bad mode", Config{ShardCount: 4, DistributionMode: "magic", Databases: []DatabaseConfig{db("a")}}, "shard_distribution_mode"},
		{"auto not divisible", Config{ShardCount: 5, DistributionMode: "auto", ShardOnDB: 2, Databases: []DatabaseConfig{db("a"), db("b")}}, "shard_on_db"},
		{"auto missing shard_on_db", Config{ShardCount: 4, DistributionMode: "auto", Databases: []DatabaseConfig{db("a")}}, "shard_on_db"},
		{"auto with ranges", Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 2, Databases: []DatabaseConfig{db("a", Range{0, 1})}}, "databases[0].shards"},
		{"manual gap", Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{db("a", Range{0, 1}), db("b", Range{3, 3})}}, "shards 2 are on no database"},
		{"manual overlap", Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{db("a", Range{0, 2}), db("b", Range{2, 3})}}, "shard 2 is already on databases[0]"},
		{"manual out of range", Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{db("a", Range{0, 4})}}, "databases[0].shards[0]"},
		{"manual min > max", Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{db("a", Range{3, 0})}}, "min > max"},
		{"manual without ranges", Config{ShardCount: 4, DistributionMode: "manual", Databases: []DatabaseConfig{db("a", Range{0, 3}), db("b")}}, "databases[1].shards"},
		{"mysql", Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{{Name: "a", Host: "h", User: "u", Type: "mysql"}}}, "mysql is not supported"},
		{"no name", Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{{Host: "h", User: "u"}}}, "databases[0].name"},
		{"no host", Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{{Name: "a", User: "u"}}}, "databases[0].host"},
		{"no user", Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{{Name: "a", Host: "h"}}}, "databases[0].user"},
		{"duplicate", Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{db("a"), db("a")}}, "same database as databases[0]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewMap(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestNewMapAutoAndManual(t *testing.T) {
	auto, err := NewMap(Config{ShardCount: 12, DistributionMode: "auto", ShardOnDB: 4, Databases: []DatabaseConfig{db("a"), db("b"), db("c")}})
	if err != nil {
		t.Fatal(err)
	}
	manual, err := NewMap(Config{ShardCount: 12, DistributionMode: "manual", Databases: []DatabaseConfig{
		db("a", Range{0, 3}), db("b", Range{8, 11}, Range{4, 7}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for s := coffer.ShardID(0); s < 12; s++ {
		if got, want := auto.DatabaseOf(s).Config.Name, string("abc"[s/4]); got != want {
			t.Errorf("auto: shard %d on %s, want %s", s, got, want)
		}
		want := "a"
		if s >= 4 {
			want = "b"
		}
		if got := manual.DatabaseOf(s).Config.Name; got != want {
			t.Errorf("manual: shard %d on %s, want %s", s, got, want)
		}
	}
	if got := fmt.Sprint(manual.Databases()[1].Shards); got != "[4 5 6 7 8 9 10 11]" {
		t.Errorf("manual shards of b = %s, want sorted 4…11", got)
	}
	if got := auto.ShardOf(42); got != coffer.ShardID(Jump(42, 12)) {
		t.Errorf("ShardOf(42) = %d", got)
	}
}

func TestConnStringMultiHost(t *testing.T) {
	d := DatabaseConfig{Name: "co'ffer", Hosts: []string{"10.0.0.1:5432", "10.0.0.2:5433"}, User: "u", Password: `p\w`}
	got := d.ConnString(3)
	for _, want := range []string{"host='10.0.0.1,10.0.0.2'", "port='5432,5433'", `dbname='co\'ffer'`, `password='p\\w'`, "target_session_attrs='read-write'", "connect_timeout='3'"} {
		if !strings.Contains(got, want) {
			t.Errorf("ConnString = %s, missing %s", got, want)
		}
	}
}

// TestRouterRoutesToTheRightServer spreads 12 shards over three real
// servers and checks that each player's pool is the server of its shard.
func TestRouterRoutesToTheRightServer(t *testing.T) {
	var dbs []DatabaseConfig
	for i := 0; i < 3; i++ {
		d := pgtest.NewDB(t, i)
		dbs = append(dbs, DatabaseConfig{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), User: pgserver.Superuser, Password: pgserver.Password})
	}
	r := openRouter(t, Config{ShardCount: 12, DistributionMode: "auto", ShardOnDB: 4, Databases: dbs})
	m := r.Map()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for p := coffer.PlayerID(1); p <= 60; p++ {
		s := m.ShardOf(p)
		pool := r.Shard(s)
		var port int
		if err := pool.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil {
			t.Fatal(err)
		}
		if want := m.DatabaseOf(s).Config.Port; port != want {
			t.Fatalf("player %d (shard %d) routed to port %d, want %d", p, s, port, want)
		}
	}
}

// TestRouterReadsTimesInUTC: a timestamptz, alone or in an array, reads
// in UTC whatever the host's zone (pgx's default is time.Local).
func TestRouterReadsTimesInUTC(t *testing.T) {
	d := pgtest.NewDB(t, 0)
	r := openRouter(t, Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1, Databases: []DatabaseConfig{
		{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), User: pgserver.Superuser, Password: pgserver.Password}}})
	var at time.Time
	var ats []time.Time
	if err := r.Database(0).QueryRow(context.Background(), "SELECT now(), ARRAY[now()]").Scan(&at, &ats); err != nil {
		t.Fatal(err)
	}
	if at.Location() != time.UTC || len(ats) != 1 || ats[0].Location() != time.UTC {
		t.Fatalf("times read in %v and %v, want UTC", at.Location(), ats[0].Location())
	}
}

func TestRouterPingNamesTheDeadDatabase(t *testing.T) {
	d := pgtest.NewDB(t, 0)
	dbs := []DatabaseConfig{
		{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), User: pgserver.Superuser, Password: pgserver.Password},
		{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), User: pgserver.Superuser, Password: "wrong"},
	}
	dbs[1].Name = "missing_db"
	r := openRouter(t, Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 1, Databases: dbs})
	err := r.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), `database #1 "missing_db"`) {
		t.Fatalf("Ping = %v, want it to name database #1", err)
	}
}

// openRouter opens a router over the map of cfg, closed when the test ends.
func openRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	m, err := NewMap(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(m, DefaultPoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}
