package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { pgtest.Main(m, 1) }

// TestStatementsNeedTheLibrary: on a server that does not preload
// pg_stat_statements (the test servers), the extension can be created but
// not read, and the error says what the server needs.
func TestStatementsNeedTheLibrary(t *testing.T) {
	ctx := context.Background()
	d := pgtest.NewDB(t, 0)
	m, err := shard.NewMap(shard.Config{ShardCount: 2, DistributionMode: "auto", ShardOnDB: 2, Databases: []shard.DatabaseConfig{
		{Name: d.Name, Host: "127.0.0.1", Port: d.Server.Port(), User: pgserver.Superuser, Password: pgserver.Password}}})
	if err != nil {
		t.Fatal(err)
	}
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	if err := CreateStatementsExtension(ctx, router); err != nil {
		t.Fatal(err)
	}
	err = resetStatements(ctx, router)
	if err == nil || !strings.Contains(err.Error(), "shared_preload_libraries") {
		t.Fatalf("reset without the library: %v", err)
	}
	if _, err := readStatements(ctx, router); err == nil {
		t.Fatal("read without the library: no error")
	}
}

// TestWalsendersAreTold: of a server's processes, the walsender of a
// replication connection is told apart from the backends, so that the
// report can give the change feed's decoding its own line.
func TestWalsendersAreTold(t *testing.T) {
	ctx := context.Background()
	d := pgtest.NewDB(t, 0)
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s replication=database",
		d.Server.Port(), pgserver.Superuser, pgserver.Password, d.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pid := int(conn.PID())
	all := d.Server.PIDs()
	if !slices.Contains(all, pid) {
		t.Fatalf("the walsender %d is not among the server's processes %v", pid, all)
	}
	if got := walsenders(all); !slices.Equal(got, []int{pid}) {
		t.Fatalf("walsenders %v, want [%d]", got, pid)
	}
}
