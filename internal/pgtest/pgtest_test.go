package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
)

func TestMain(m *testing.M) {
	if os.Getenv("PGTEST_PANIC_PIDFILE") != "" {
		panicWithServer(os.Getenv("PGTEST_PANIC_PIDFILE"))
	}
	Main(m, 1)
}

// panicWithServer starts a server, records the postmaster's pid and panics,
// as a failing test binary would.
func panicWithServer(pidFile string) {
	s, err := pgserver.Start(context.Background(), pgserver.Options{})
	if err != nil {
		panic(err)
	}
	pid, err := os.ReadFile(s.Dir() + "/data/postmaster.pid")
	if err != nil {
		panic(err)
	}
	line := strings.SplitN(string(pid), "\n", 2)[0] + " " + s.Dir()
	_ = os.WriteFile(pidFile, []byte(line), 0o600)
	panic("deliberate panic with a server running")
}

func TestNewDBIsFreshAndWritable(t *testing.T) {
	a, b := NewDB(t, 0), NewDB(t, 0)
	if a.Name == b.Name {
		t.Fatal("two tests got the same database")
	}
	a.Exec(t, "CREATE TABLE x (v int)")
	b.Exec(t, "CREATE TABLE x (v int)") // would fail if a and b were one database
}

func TestKillAndRestartKeepsCommittedData(t *testing.T) {
	s, err := pgserver.Start(context.Background(), pgserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	db := DB{Server: s, Name: "postgres"}
	db.Exec(t, "CREATE TABLE kept (v int)")
	db.Exec(t, "INSERT INTO kept SELECT generate_series(1, 1000)")
	port := s.Port()

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, s.Port())
	}
	var n int
	if err := db.Conn(t).QueryRow(context.Background(), "SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Fatalf("after kill -9 and restart: %d rows, want 1000", n)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Conn(t).QueryRow(context.Background(), "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("after stop and start: %d rows, err %v", n, err)
	}
}

func TestPauseBlocksAndResumeContinues(t *testing.T) {
	db := NewDB(t, 0)
	conn := db.Conn(t)
	if err := db.Server.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := conn.Exec(ctx, "SELECT 1")
	cancel()
	if err == nil {
		t.Fatal("a paused server answered")
	}
	if err := db.Server.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Conn(t).Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("after resume: %v", err)
	}
}

// TestNoServerOutlivesAPanic runs this test binary in a mode that starts a
// server and panics, then checks that the server died with it.
func TestNoServerOutlivesAPanic(t *testing.T) {
	pidFile := t.TempDir() + "/pid"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGTEST_PANIC_PIDFILE="+pidFile)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "deliberate panic") {
		t.Fatalf("helper did not panic: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(raw))
	defer os.RemoveAll(fields[1])
	pid, _ := strconv.Atoi(fields[0])
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still running after its parent panicked", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRemoveAllTakesOutsideData: a server in a directory its OS user
// cannot reach (root's temp dir, when tests run as root) keeps its data
// under /var/tmp. RemoveAll deletes that too; RemoveOrphans deletes it once
// its link is gone, but never while the link is there or the server runs.
func TestRemoveAllTakesOutsideData(t *testing.T) {
	ctx := context.Background()
	start := func() (s *pgserver.Server, dir, dataDir string) {
		dir = t.TempDir()
		s, err := pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(dir, "pg")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(); _ = pgserver.RemoveAll(dir) })
		dataDir, err = filepath.EvalSymlinks(filepath.Join(dir, "pg", "data"))
		must(t, err)
		if !strings.HasPrefix(dataDir, "/var/tmp/") {
			t.Skip("not root: the data is inside the server's directory, nothing outside to remove")
		}
		return s, dir, dataDir
	}
	exists := func(what, path string, want bool) {
		t.Helper()
		if _, err := os.Stat(path); (err == nil) != want {
			t.Fatalf("%s: %s exists %v, want %v (%v)", what, path, err == nil, want, err)
		}
	}
	s, dir, dataDir := start()
	must(t, s.Stop())
	must(t, pgserver.RemoveAll(dir))
	exists("RemoveAll", dataDir, false)
	exists("RemoveAll", dir, false)

	s, dir, dataDir = start()
	link := filepath.Join(dir, "pg", "data")
	must(t, s.Stop())
	pgserver.RemoveOrphans(0)
	exists("RemoveOrphans, link there", dataDir, true)
	must(t, s.Start(ctx))
	must(t, os.Remove(link))
	pgserver.RemoveOrphans(0)
	exists("RemoveOrphans, server running", dataDir, true)
	must(t, s.Stop())
	pgserver.RemoveOrphans(0)
	exists("RemoveOrphans, link gone", dataDir, false)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
