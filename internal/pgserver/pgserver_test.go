package pgserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestRandomPasswordKeptAndAdopted: a server made with the fixed password
// (as coffer dev made them) gets a random one at its next start with
// RandomPassword, kept in a file only its owner reads, and the same one
// at the start after; the fixed password is refused from then on. The
// server's log is its owner's only too.
func TestRandomPasswordKeptAndAdopted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Cleanup(func() { _ = RemoveAll(dir) })
	old, err := Start(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	var password string
	for run := 1; run <= 2; run++ {
		s, err := Start(ctx, Options{Dir: dir, RandomPassword: true})
		if err != nil {
			t.Fatal(err)
		}
		if run == 1 {
			password = s.Password()
		}
		if s.Password() != password || len(password) < 32 || password == Password {
			t.Fatalf("run %d: password %q (first %q)", run, s.Password(), password)
		}
		raw, err := os.ReadFile(s.passwordFile())
		if err != nil || strings.TrimSpace(string(raw)) != password {
			t.Fatalf("run %d: password file %q, %v", run, raw, err)
		}
		for _, path := range []string{s.passwordFile(), s.LogPath()} {
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("run %d: %s: %v %v", run, path, fi.Mode(), err)
			}
		}
		conn, err := pgconn.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			t.Fatalf("run %d: the random password: %v", run, err)
		}
		_ = conn.Close(ctx)
		fixed := strings.Replace(s.DSN("postgres"), ":"+password+"@", ":"+Password+"@", 1)
		var pgErr *pgconn.PgError
		if _, err := pgconn.Connect(ctx, fixed); !errors.As(err, &pgErr) || pgErr.Code != invalidPassword {
			t.Fatalf("run %d: the fixed password: %v", run, err)
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInterruptedInitdbLeavesNoDataDir: a first start interrupted while
// initdb runs (Ctrl-C in coffer dev) leaves no half-made data directory,
// which the next start would take for a made one and fail to run: the
// next start makes it again and runs.
func TestInterruptedInitdbLeavesNoDataDir(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { _ = RemoveAll(dir) })
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Interrupt once initdb has written PG_VERSION, the mark of a made
	// data directory, well before it is done.
	go func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err == nil {
				break
			}
		}
		cancel()
	}()
	if s, err := Start(cctx, Options{Dir: dir}); err == nil {
		_ = s.Stop()
		t.Fatal("started though interrupted")
	}
	s, err := Start(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatalf("the start after the interrupted one: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
