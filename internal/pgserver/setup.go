package pgserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// InstallHint tells a person how to get the PostgreSQL server binaries.
const InstallHint = "install them with `sudo apt-get install -y postgresql` (Debian/Ubuntu), or put the directory holding initdb and postgres on PATH"

// BinDir finds the directory that holds initdb, postgres and the client
// programs: PATH first, then the newest /usr/lib/postgresql/*/bin (Debian
// keeps them off PATH).
func BinDir() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		// Links on PATH (/usr/local/bin/postgres, say) lead to the
		// directory that also has the client programs (pg_basebackup,
		// pg_rewind).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("pgserver: PostgreSQL server binaries (initdb, postgres) not found; " + InstallHint)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// serverCredential is the OS identity the server runs as: nil (ourselves)
// unless we are root, whom initdb refuses.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pgserver: running as root and no unprivileged user (postgres or nobody) exists to run PostgreSQL; create one with `useradd -r postgres`")
}

// prepareDataDir returns the data directory, owned by the server's OS user.
// When that user cannot reach s.dir (a root-owned home directory, say), the
// data lives under /var/tmp and s.dir/data is a symlink to it, so that a
// second run still finds it.
func (s *Server) prepareDataDir() (string, error) {
	link := filepath.Join(s.dir, "data")
	if s.cred == nil {
		return link, nil
	}
	if s.ownDir {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return "", fmt.Errorf("pgserver: %w", err)
		}
		return link, nil
	}
	if target, err := os.Readlink(link); err == nil {
		return target, nil
	}
	dataDir := link
	if !reachable(s.dir, s.cred.Uid) {
		sum := sha256.Sum256([]byte(s.dir))
		parent := filepath.Join(outsideDir, "coffer-pg-"+hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(parent, 0o711); err != nil {
			return "", fmt.Errorf("pgserver: %w", err)
		}
		dataDir = filepath.Join(parent, "data")
		if err := os.Symlink(dataDir, link); err != nil {
			return "", fmt.Errorf("pgserver: %w", err)
		}
		// The link's path, so that RemoveOrphans can tell when it is gone.
		// Written after the link: a directory whose link file names a
		// missing link is never one still being set up.
		if err := os.WriteFile(filepath.Join(parent, "link"), []byte(link), 0o644); err != nil {
			return "", fmt.Errorf("pgserver: %w", err)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Chown(dataDir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return "", fmt.Errorf("pgserver: %w", err)
	}
	return dataDir, nil
}

// outsideDir holds the data directories of servers whose own directory
// their OS user cannot reach (see prepareDataDir).
const outsideDir = "/var/tmp"

// RemoveAll deletes dir, which holds servers' directories (Options.Dir),
// with the data directories outside it that their data links point to.
// os.RemoveAll would delete only the links.
func RemoveAll(dir string) error {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "data" && d.Type()&fs.ModeSymlink != 0 {
			if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, filepath.Join(outsideDir, "coffer-pg-")) {
				_ = os.RemoveAll(filepath.Dir(target))
			}
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// RemoveOrphans deletes data directories outside their server's directory
// whose link is gone (its directory was deleted, by a run that was killed
// or by os.RemoveAll), untouched for olderThan and not running.
func RemoveOrphans(olderThan time.Duration) {
	parents, _ := filepath.Glob(filepath.Join(outsideDir, "coffer-pg-*"))
	for _, parent := range parents {
		link, err := os.ReadFile(filepath.Join(parent, "link"))
		if err != nil {
			continue
		}
		dataDir := filepath.Join(parent, "data")
		if target, err := os.Readlink(string(link)); err == nil && target == dataDir {
			continue
		}
		fi, err := os.Stat(parent)
		if err != nil || time.Since(fi.ModTime()) < olderThan {
			continue
		}
		if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); err == nil {
			continue
		}
		_ = os.RemoveAll(parent)
	}
}

// reachable tells whether uid may traverse every directory down to dir.
func reachable(dir string, uid uint32) bool {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return false
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid && fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// initdbStopWait bounds how long an interrupted initdb may take to remove
// what it made.
const initdbStopWait = 30 * time.Second

func (s *Server) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	pwFile := filepath.Join(filepath.Dir(s.dataDir), "pwfile-"+randomHex(4))
	if err := os.WriteFile(pwFile, []byte(s.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer os.Remove(pwFile)
	if s.cred != nil {
		if err := os.Chown(pwFile, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	args := []string{"-D", s.dataDir, "-U", Superuser, "--pwfile", pwFile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"}
	if !s.opts.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = "/"
	// Interrupted, initdb removes what it made, unless killed: a half-made
	// data directory has PG_VERSION, and the next start would take it for
	// a made one. So the context's end asks it to stop, and kills it only
	// if it has not after initdbStopWait.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = initdbStopWait
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgserver: initdb %s: %w: %s", s.dataDir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// spawnRequests is served by one goroutine locked to its OS thread for the
// life of the process. Pdeathsig fires when the thread that forked the child
// exits, not the process; a thread that never exits ties the servers' lives
// to the process's.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for r := range spawnRequests {
			r.done <- r.cmd.Start()
		}
	}()
}

func spawn(cmd *exec.Cmd) error {
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// waitReady polls until the server accepts a connection, the process exits
// or ctx ends. A refused password counts as ready: the server answered, and
// Start of a server made with the fixed password then sets its new one.
func waitReady(ctx context.Context, port int, exited <-chan struct{}) error {
	dsn := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", Superuser, Password, port)
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgconn.Connect(attemptCtx, dsn)
		cancel()
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == invalidPassword {
			return nil
		}
		select {
		case <-exited:
			return errors.New("pgserver: postgres exited during start")
		case <-ctx.Done():
			return fmt.Errorf("pgserver: not ready: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// invalidPassword is PostgreSQL's SQLSTATE for a refused password.
const invalidPassword = "28P01"

// passwordFile keeps a random superuser password (Options.RandomPassword).
func (s *Server) passwordFile() string { return filepath.Join(s.dir, "password") }

// loadPassword reads the kept random password, or makes one and keeps it
// (mode 0600: it opens every database of the server). It tells whether the
// data directory was made before with the fixed Password, which the server
// then still has.
func (s *Server) loadPassword() (legacy bool, err error) {
	raw, err := os.ReadFile(s.passwordFile())
	if err == nil {
		s.password = strings.TrimSpace(string(raw))
		return false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("pgserver: %w", err)
	}
	s.password = randomHex(24)
	if _, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION")); err == nil {
		return true, nil // kept once the server has it (setPassword)
	}
	return false, s.keepPassword()
}

func (s *Server) keepPassword() error {
	if err := os.WriteFile(s.passwordFile(), []byte(s.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// setPassword gives a server made with the fixed Password its random one.
func (s *Server) setPassword(ctx context.Context) error {
	dsn := fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", Superuser, Password, s.Port())
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pgserver: set the superuser's new password: %w", err)
	}
	defer conn.Close(ctx)
	// ALTER ROLE takes no parameters; the password is hex, so quoting it
	// is safe.
	if _, err := conn.Exec(ctx, "ALTER ROLE "+Superuser+" PASSWORD '"+s.password+"'").ReadAll(); err != nil {
		return fmt.Errorf("pgserver: set the superuser's new password: %w", err)
	}
	return s.keepPassword()
}
