// Package pgtest gives tests real PostgreSQL servers: a package's TestMain
// calls Main to start its servers once, and each test takes fresh, empty
// databases on them with NewDB. Servers are throwaway (fsync off) and are
// removed when the test binary exits, also on a panic (see pgserver).
package pgtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/jackc/pgx/v5"
)

var (
	servers []*pgserver.Server
	dbSeq   atomic.Int64
)

// Main starts n servers, runs the package's tests and removes the servers.
// Call it from TestMain: `func TestMain(m *testing.M) { pgtest.Main(m, 2) }`.
func Main(m *testing.M, n int) {
	os.Exit(Run(m, n))
}

// Run is Main without the exit, for a TestMain with cleanup of its own:
// it returns the exit code.
func Run(m *testing.M, n int) int {
	ctx := context.Background()
	removeStale()
	for i := 0; i < n; i++ {
		s, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			removeAll()
			return 1
		}
		servers = append(servers, s)
	}
	defer removeAll()
	return m.Run()
}

func removeAll() {
	for _, s := range servers {
		s.Remove()
	}
}

// removeStale deletes temporary server directories left by test binaries
// that were killed before they could clean up (their servers died with them).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "coffer-pg-*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			continue
		}
		_ = os.RemoveAll(dir)
	}
	pgserver.RemoveOrphans(time.Hour)
}

// Server returns the i-th server started by Main.
func Server(tb testing.TB, i int) *pgserver.Server {
	tb.Helper()
	if i >= len(servers) {
		tb.Fatalf("pgtest: server %d requested, Main started %d", i, len(servers))
	}
	return servers[i]
}

// DB is one fresh database on a test server.
type DB struct {
	Server *pgserver.Server
	Name   string
}

// DSN is a superuser connection string for the database.
func (db DB) DSN() string { return db.Server.DSN(db.Name) }

// NewDB creates an empty database on server i and drops it when the test
// ends.
func NewDB(tb testing.TB, i int) DB {
	tb.Helper()
	return NewDBOn(tb, Server(tb, i))
}

// NewDBOn creates an empty database on server s (one a test started for
// itself, say) and drops it when the test ends.
func NewDBOn(tb testing.TB, s *pgserver.Server) DB {
	tb.Helper()
	return newDB(tb, s, "")
}

// NewDBEncoded is NewDBOn with the database in encoding (LATIN1,
// SQL_ASCII: one coffer refuses), a name of letters, digits and _.
func NewDBEncoded(tb testing.TB, s *pgserver.Server, encoding string) DB {
	tb.Helper()
	return newDB(tb, s, " TEMPLATE template0 ENCODING '"+encoding+"' LC_COLLATE 'C' LC_CTYPE 'C'")
}

// newDB creates a database on s, with the options of CREATE DATABASE in
// with, and drops it when the test ends.
func newDB(tb testing.TB, s *pgserver.Server, with string) DB {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d_%s", os.Getpid(), dbSeq.Add(1), sanitize(tb.Name()))
	if len(name) > 63 {
		name = name[:63]
	}
	admin(tb, s, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+with)
	tb.Cleanup(func() {
		if s.Start(context.Background()) != nil {
			return // a test left the server broken; it is removed at exit anyway
		}
		admin(tb, s, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return DB{Server: s, Name: name}
}

// Exec runs sql on the database and fails the test on error.
func (db DB) Exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	conn := db.Conn(tb)
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Conn opens a connection to the database, closed when the test ends.
func (db DB) Conn(tb testing.TB) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.DSN())
	if err != nil {
		tb.Fatalf("pgtest: connect %s: %v", db.Name, err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func admin(tb testing.TB, s *pgserver.Server, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("pgtest: %s: %v", sql, err)
	}
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, name)
}

// SynchronousPair starts a server of its own whose COMMITs wait for its
// synchronous standby, and the standby, both with the replication
// settings and settings; both are removed when the test ends.
func SynchronousPair(t testing.TB, settings map[string]string) (primary, standby *pgserver.Server) {
	t.Helper()
	ctx := context.Background()
	all := pgserver.ReplicationSettings()
	maps.Copy(all, settings)
	primary, err := pgserver.Start(ctx, pgserver.Options{Settings: all})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Remove)
	if standby, err = pgserver.StartStandby(ctx, primary, pgserver.Options{Settings: all}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(standby.Remove)
	if err := primary.RequireSynchronousStandby(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.WaitSynchronousStandby(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	return primary, standby
}
