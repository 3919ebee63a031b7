package pgserver

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFailoverAndSwitchoverKeepCommittedRows runs a primary with a
// synchronous standby through a crash failover (kill -9, promote, rewind the
// old primary into a standby) and a planned switchover back: every row
// committed before each change of primary is on the new one, and the old
// primary streams again from the new one.
func TestFailoverAndSwitchoverKeepCommittedRows(t *testing.T) {
	ctx := context.Background()
	a, err := Start(ctx, Options{Settings: ReplicationSettings()})
	must(t, err)
	t.Cleanup(a.Remove)
	b, err := StartStandby(ctx, a, Options{Settings: ReplicationSettings()})
	must(t, err)
	t.Cleanup(b.Remove)
	must(t, a.RequireSynchronousStandby(ctx))
	must(t, b.RequireSynchronousStandby(ctx))
	if b.Upstream() != a {
		t.Fatal("the standby does not name its primary")
	}
	execSQL(t, a, "CREATE TABLE t (n int)")
	execSQL(t, a, "INSERT INTO t VALUES (1)")

	// Failover: the primary crashes; the standby has every commit.
	must(t, a.Kill())
	must(t, b.Promote(ctx))
	waitRows(t, b, 1)
	must(t, a.Rejoin(ctx, b))
	if a.Upstream() != b || b.Upstream() != nil {
		t.Fatal("roles not swapped")
	}
	execSQL(t, b, "INSERT INTO t VALUES (2)") // commits only once a has it
	waitRows(t, a, 2)

	// Switchover: a clean stop sends everything to the standby first.
	must(t, b.Stop())
	must(t, a.Promote(ctx))
	must(t, b.Rejoin(ctx, a))
	execSQL(t, a, "INSERT INTO t VALUES (3)")
	waitRows(t, b, 3)
}

func execSQL(t *testing.T, s *Server, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	must(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	must(t, err)
}

// waitRows waits until s (a standby applies with a delay) has n rows in t.
func waitRows(t *testing.T, s *Server, n int) {
	t.Helper()
	ctx := context.Background()
	var got int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			continue
		}
		err = conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&got)
		conn.Close(ctx)
		if err == nil && got == n {
			return
		}
	}
	t.Fatalf("server on port %d has %d rows, want %d", s.Port(), got, n)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
