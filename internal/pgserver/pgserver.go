// Package pgserver runs throwaway and local PostgreSQL servers from the
// PostgreSQL binaries installed on this machine: initdb into a directory, a
// free TCP port on 127.0.0.1, and start, stop, kill -9, pause and restart of
// the postmaster. Tests (through internal/pgtest), `coffer dev`, the benchmark
// and the fault suite all use it.
//
// When the calling process runs as root the server runs as an unprivileged OS
// user (postgres, else nobody), because initdb refuses to run as root. Every
// server is started with a parent-death signal, so it goes away with the
// process that started it, even when that process panics or is killed.
package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a server. The zero value is a throwaway test server.
type Options struct {
	// Dir holds the server: Dir/data is the data directory, Dir/postgres.log
	// its log. Empty means a new temporary directory removed by Remove.
	Dir string
	// Port to listen on; 0 picks a free port and keeps it across restarts.
	Port int
	// Durable keeps fsync on. Off is for tests only: it trades safety
	// against an OS crash (not a server crash) for speed.
	Durable bool
	// Settings are extra postgresql.conf settings passed with -c.
	Settings map[string]string
	// StartTimeout bounds how long Start waits for the server to accept
	// connections. Zero means 60 seconds.
	StartTimeout time.Duration
	// RandomPassword gives the superuser a random password instead of
	// Password, made at the first start and kept in Dir/password (mode
	// 0600) for the next: for a server that outlives its process and
	// listens where other local users can reach it (coffer dev). A server
	// made before with Password gets a random one at its next start.
	RandomPassword bool
}

// Superuser is the name of every server's superuser, and Password its
// password unless Options.RandomPassword. Host connections use
// scram-sha-256, so wrong credentials are refused as on a real deployment.
const (
	Superuser = "coffer"
	Password  = "coffer"
)

// Server is one PostgreSQL server. Its methods are safe for concurrent use.
type Server struct {
	opts    Options
	dir     string
	dataDir string
	ownDir  bool
	binDir  string
	cred    *syscall.Credential

	password string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	port int
	// upstream is the primary a standby streams from; nil for a primary.
	upstream *Server
}

// Start creates the server (initdb) if its data directory is empty and starts
// it. It returns once the server accepts connections.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	// A server made before with the fixed password keeps it until it
	// runs and can be told the new one.
	legacy := false
	if opts.RandomPassword {
		if legacy, err = s.loadPassword(); err != nil {
			s.Remove()
			return nil, err
		}
	}
	if err := s.initdb(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		s.Remove()
		return nil, err
	}
	if legacy {
		if err := s.setPassword(ctx); err != nil {
			s.Remove()
			return nil, err
		}
	}
	return s, nil
}

// newServer prepares the server's directories; it neither creates the
// cluster nor starts it.
func newServer(opts Options) (*Server, error) {
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, binDir: binDir, cred: cred, port: opts.Port, password: Password}
	if opts.Dir == "" {
		s.dir, err = os.MkdirTemp("", "coffer-pg-")
		if err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		s.ownDir = true
	} else {
		s.dir, err = filepath.Abs(opts.Dir)
		if err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	s.dataDir, err = s.prepareDataDir()
	if err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// Port is the TCP port the server listens on at 127.0.0.1.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Dir is the directory that holds the server's data and log.
func (s *Server) Dir() string { return s.dir }

// LogPath is the server's log file.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "postgres.log") }

// Password is the superuser's password.
func (s *Server) Password() string { return s.password }

// DSN is a connection string for database db as the superuser.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, url.QueryEscape(s.password), s.Port(), db)
}

// Start starts a stopped or killed server again on the same port and waits
// until it accepts connections. Starting a running server is a no-op.
func (s *Server) Start(ctx context.Context) error {
	timeout := s.opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	const attemptsMax = 50
	var lastErr error
	for attempt := 0; attempt < attemptsMax; attempt++ {
		if s.running() {
			return nil
		}
		if s.Port() == 0 || (attempt > 0 && s.opts.Port == 0 && isAddrInUse(lastErr)) {
			port, err := freePort()
			if err != nil {
				return err
			}
			s.setPort(port)
		}
		lastErr = s.startOnce(ctx)
		if lastErr == nil {
			return nil
		}
		// After a kill -9 the old backends may still hold shared memory
		// for a moment; the new postmaster refuses until they are gone.
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: start %s: %w (last error: %v)", s.dataDir, ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("pgserver: start %s: %w", s.dataDir, lastErr)
}

func (s *Server) setPort(port int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.port = port
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) startOnce(ctx context.Context) error {
	// The log is for the one who runs the server: it may quote statements
	// and their data.
	logFile, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgserver: open log: %w", err)
	}
	defer logFile.Close()
	if err := logFile.Chmod(0o600); err != nil { // one made before with 0644
		return fmt.Errorf("pgserver: log: %w", err)
	}
	logStart, _ := logFile.Seek(0, 2)

	args := []string{"-D", s.dataDir}
	for _, kv := range s.settings() {
		args = append(args, "-c", kv)
	}
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: s.cred,
		// Own process group: a Ctrl-C in the terminal reaches the parent,
		// which stops the server in order, not the server directly.
		Setpgid: true,
		// SIGQUIT is PostgreSQL's immediate shutdown: the postmaster takes
		// its backends down with it, so nothing is left behind.
		Pdeathsig: syscall.SIGQUIT,
	}
	if err := spawn(cmd); err != nil {
		return fmt.Errorf("pgserver: exec postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	if err := waitReady(ctx, s.Port(), done); err != nil {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		return fmt.Errorf("%w; log: %s", err, s.logTail(logStart))
	}
	return nil
}

// Stop shuts the server down cleanly (PostgreSQL's fast shutdown: open
// transactions are rolled back, everything committed is kept) and waits.
func (s *Server) Stop() error { return s.signalAndWait(syscall.SIGINT, 60*time.Second) }

// Kill sends SIGKILL to the postmaster, as a crash would, and waits for it
// to exit. Committed data survives; Start recovers the server.
func (s *Server) Kill() error { return s.signalAndWait(syscall.SIGKILL, 10*time.Second) }

// Pause freezes the postmaster and its backends (SIGSTOP): connections stay
// open but nothing answers. Resume undoes it.
func (s *Server) Pause() error { return s.signalGroup(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signalGroup(syscall.SIGCONT) }

// PIDs lists the postmaster and its children (backends, checkpointer,
// WAL writer, …), for measuring their CPU; nil if the server is stopped.
func (s *Server) PIDs() []int {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return append([]int{cmd.Process.Pid}, childPIDs(cmd.Process.Pid)...)
}

// signalGroup signals the postmaster and its children. PostgreSQL makes
// each child a session leader of its own, so a process-group signal would
// reach the postmaster only.
func (s *Server) signalGroup(sig syscall.Signal) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("pgserver: server not started")
	}
	children := childPIDs(cmd.Process.Pid)
	if err := syscall.Kill(cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("pgserver: signal %v: %w", sig, err)
	}
	for _, pid := range children {
		_ = syscall.Kill(pid, sig)
	}
	return nil
}

func (s *Server) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = s.signalGroup(syscall.SIGCONT)
	children := childPIDs(cmd.Process.Pid)
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgserver: signal %v: %w", sig, err)
	}
	if sig == syscall.SIGKILL {
		// A crashed machine takes the backends too; and a restart would
		// otherwise wait for them to notice the postmaster is gone.
		for _, pid := range children {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("pgserver: server did not stop within %v after %v; killed", timeout, sig)
	}
}

// childPIDs lists the processes whose parent is pid, from /proc.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state, ppid, ...
		rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
		fields := strings.Fields(string(rest))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			pids = append(pids, child)
		}
	}
	return pids
}

// Remove stops the server and, if Start created its directory, deletes it.
func (s *Server) Remove() {
	_ = s.Stop()
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *Server) settings() []string {
	s.mu.Lock()
	port, upstream := s.port, s.upstream
	s.mu.Unlock()
	set := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": "",
		"max_connections":         "300",
		"logging_collector":       "off",
		"log_min_messages":        "warning",
		"log_checkpoints":         "off",
		// A shard move copies a shard by logical replication
		// (coffer shard move).
		"wal_level": "logical",
	}
	if !s.opts.Durable {
		// synchronous_commit stays on: a commit is then at least in the
		// OS page cache, so a killed server (the fault tests) loses nothing.
		set["fsync"] = "off"
		set["full_page_writes"] = "off"
		set["shared_buffers"] = "32MB"
		set["checkpoint_timeout"] = "30min"
	}
	if upstream != nil {
		set["primary_conninfo"] = upstream.replicationConnInfo(filepath.Base(s.dir))
	}
	for k, v := range s.opts.Settings {
		set[k] = v
	}
	kv := make([]string, 0, len(set))
	for k, v := range set {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return kv
}

func (s *Server) logTail(from int64) string {
	b, err := os.ReadFile(s.LogPath())
	if err != nil || int64(len(b)) < from {
		return "(no log)"
	}
	tail := strings.TrimSpace(string(b[from:]))
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return tail
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Address already in use")
}
