package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ReplicationSettings make a server one that standbys can stream from and
// that can be rewound into a standby after a failover: pg_rewind needs the
// hint bits logged and full pages written.
func ReplicationSettings() map[string]string {
	return map[string]string{
		"wal_level":        "logical", // standbys, and shard moves (coffer shard move)
		"wal_log_hints":    "on",
		"full_page_writes": "on",
		"hot_standby":      "on",
		// A standby whose primary went away retries every half second,
		// not every 5 s: it rejoins a restarted primary quickly.
		"wal_retrieve_retry_interval": "500ms",
		// WAL kept for a standby that was away (restarted, or being
		// rewound) so that it catches up by streaming.
		"wal_keep_size": "512MB",
	}
}

// RequireSynchronousStandby makes every later commit on the server, and on
// whatever server it becomes, wait until a standby has flushed it, so that
// an acknowledged write survives the loss of the primary; with no standby
// connected, commits wait. Call it on the primary and on its standby once
// the standby runs (before, the primary's own setup would wait).
func (s *Server) RequireSynchronousStandby(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "ALTER SYSTEM SET synchronous_commit = on", "SELECT pg_reload_conf()"} {
		if err := conn.Exec(ctx, sql).Close(); err != nil {
			return fmt.Errorf("pgserver: %s: %w", sql, err)
		}
	}
	return nil
}

// StartStandby makes a streaming standby of primary in opts.Dir (a base
// backup of it, unless opts.Dir already holds a cluster) and starts it. It
// returns once the standby accepts connections. Give both servers the
// ReplicationSettings.
func StartStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	s.password = primary.password
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err != nil {
		if err := s.baseBackup(ctx, primary); err != nil {
			s.Remove()
			return nil, err
		}
	}
	if err := s.follow(primary); err != nil {
		s.Remove()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// Upstream is the primary the server streams from, nil if it is a primary.
func (s *Server) Upstream() *Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstream
}

// Promote ends a standby's recovery: it becomes a primary (on a new
// timeline) and accepts writes when Promote returns.
func (s *Server) Promote(ctx context.Context) error {
	conn, err := pgconn.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: promote: %w", err)
	}
	defer conn.Close(ctx)
	// pg_promote waits (up to 60 s) until the server has left recovery.
	res := conn.ExecParams(ctx, "SELECT pg_promote(true, 60)", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("pgserver: promote: %w", res.Err)
	}
	if len(res.Rows) != 1 || string(res.Rows[0][0]) != "t" {
		return errors.New("pgserver: promote: the server did not leave recovery within 60 s")
	}
	s.mu.Lock()
	s.upstream = nil
	s.mu.Unlock()
	return nil
}

// Rejoin makes a stopped (or killed) server a standby of primary and starts
// it. pg_rewind first takes back whatever the server wrote that primary
// never received (commits that were waiting for their standby when the
// server died); if that fails, a fresh base backup replaces its data.
func (s *Server) Rejoin(ctx context.Context, primary *Server) error {
	if s.running() {
		return errors.New("pgserver: rejoin: the server is running; stop it first")
	}
	if err := s.rewind(ctx, primary); err != nil {
		if err := s.clearData(); err != nil {
			return err
		}
		if err := s.baseBackup(ctx, primary); err != nil {
			return err
		}
	}
	if err := s.follow(primary); err != nil {
		return err
	}
	return s.Start(ctx)
}

// rewind runs pg_rewind against primary. The primary checkpoints first: a
// freshly promoted server records its new timeline in its control file
// only at its first checkpoint, and pg_rewind reads it there.
func (s *Server) rewind(ctx context.Context, primary *Server) error {
	conn, err := pgconn.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: rewind: %w", err)
	}
	err = conn.Exec(ctx, "CHECKPOINT").Close()
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("pgserver: rewind: checkpoint on the primary: %w", err)
	}
	// pg_rewind recovers a crashed target in single-user mode first, with
	// the settings of the data directory's files, not those Start passes:
	// without wal_log_hints it refuses the target, and without
	// wal_keep_size its checkpoint recycles the WAL pg_rewind then reads.
	if err := s.writeAutoConf(); err != nil {
		return fmt.Errorf("pgserver: rewind: %w", err)
	}
	return s.run(ctx, "pg_rewind", "--target-pgdata", s.dataDir, "--source-server", primary.replicationConnInfo("pg_rewind"))
}

// writeAutoConf adds the Options' settings to postgresql.auto.conf, for the
// programs that start the server without them.
func (s *Server) writeAutoConf() error {
	f, err := os.OpenFile(filepath.Join(s.dataDir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	for k, v := range s.opts.Settings {
		fmt.Fprintf(f, "%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''"))
	}
	return f.Close()
}

// baseBackup copies primary's data into the (empty) data directory.
func (s *Server) baseBackup(ctx context.Context, primary *Server) error {
	args := []string{"-D", s.dataDir, "-h", "127.0.0.1", "-p", fmt.Sprint(primary.Port()), "-U", Superuser,
		"-X", "stream", "--checkpoint", "fast"}
	if !s.opts.Durable {
		args = append(args, "--no-sync")
	}
	return s.run(ctx, "pg_basebackup", args...)
}

// clearData empties the data directory, keeping the directory itself (it
// may be the target of the data link, see prepareDataDir).
func (s *Server) clearData() error {
	entries, err := os.ReadDir(s.dataDir)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(s.dataDir, e.Name())); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	return nil
}

// follow makes the server, at its next start, a standby streaming from
// primary.
func (s *Server) follow(primary *Server) error {
	signal := filepath.Join(s.dataDir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(signal, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	s.mu.Lock()
	s.upstream = primary
	s.mu.Unlock()
	return nil
}

// replicationConnInfo is the libpq connection string a standby (named
// name) or pg_rewind uses to reach the server.
func (s *Server) replicationConnInfo(name string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=postgres application_name=%s connect_timeout=2",
		s.Port(), Superuser, s.password, name)
}

// run runs one of the PostgreSQL client programs as the server's OS user.
func (s *Server) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, program), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = "/"
	// The programs that connect reach the primary, whose superuser and
	// password a standby shares: it is a copy.
	cmd.Env = append(os.Environ(), "PGPASSWORD="+s.password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: %s: %w: %s", program, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// WaitSynchronousStandby waits until a standby streams from the server as
// its synchronous standby (so that commits go through again), for at most
// timeout.
func (s *Server) WaitSynchronousStandby(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if n, err := s.synchronousStandbys(ctx); err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: no synchronous standby on port %d: %w", s.Port(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) synchronousStandbys(ctx context.Context) (int, error) {
	conn, err := pgconn.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	res := conn.ExecParams(ctx, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return 0, res.Err
	}
	return strconv.Atoi(string(res.Rows[0][0]))
}
