package postgres

import (
	"context"
	"testing"

	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestNothingSentIsNotUncertain: a COMMIT round trip whose time ran out
// before it was sent (a batch that planned too long) cannot have run
// it; a database's refusal cannot either; a connection that failed
// under it may have.
func TestNothingSentIsNotUncertain(t *testing.T) {
	conn := pgtest.NewDB(t, 0).Conn(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	late, cancel := context.WithCancel(ctx)
	cancel()
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("COMMIT")
	err := conn.SendBatch(late, b).Close()
	if err == nil || uncertain(err) {
		t.Fatalf("a round trip never sent: %v, uncertain %v", err, uncertain(err))
	}
	if !uncertain(&pgconn.PgError{Code: "08006"}) || uncertain(&pgconn.PgError{Code: "23505"}) {
		t.Fatal("a connection failure must be uncertain, a refusal not")
	}
}
