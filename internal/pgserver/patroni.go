package pgserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PatroniInstallHint tells a person how to get Patroni and etcd.
const PatroniInstallHint = "install them with `sudo apt-get install -y patroni etcd-server` (Debian/Ubuntu)"

// PatroniBinaries finds patroni, patronictl and etcd on PATH, or says what
// to install.
func PatroniBinaries() error {
	var missing []string
	for _, name := range []string{"patroni", "patronictl", "etcd"} {
		if _, err := exec.LookPath(name); err != nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("pgserver: %s not found; %s", strings.Join(missing, ", "), PatroniInstallHint)
	}
	return nil
}

// process is a child process that dies with ours (a parent-death signal,
// see spawn), with its output in a log file.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProcess(logPath string, cred *syscall.Credential, deathSignal syscall.Signal, name string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: deathSignal}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("pgserver: exec %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop signals the process and waits up to timeout, then kills it.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Etcd is a one-member etcd, the store Patroni keeps its leader lock in.
type Etcd struct {
	dir  string
	port int
	proc *process
}

// StartEtcd starts etcd with its data in dir (created), on free ports, and
// returns once it answers.
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	peer, err := freePort()
	if err != nil {
		return nil, err
	}
	client, peerURL := fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", peer)
	proc, err := startProcess(filepath.Join(dir, "etcd.log"), nil, syscall.SIGKILL, "etcd", "--name", "coffer",
		"--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "coffer="+peerURL,
		// Debian's Patroni speaks etcd's v2 API (python3-etcd).
		"--enable-v2=true", "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	e := &Etcd{dir: dir, port: port, proc: proc}
	if err := waitHTTP(ctx, client+"/health", proc.done, 30*time.Second); err != nil {
		e.Stop()
		return nil, fmt.Errorf("pgserver: etcd: %w", err)
	}
	return e, nil
}

// Endpoint is etcd's client address, host:port.
func (e *Etcd) Endpoint() string { return fmt.Sprintf("127.0.0.1:%d", e.port) }

// Stop kills etcd.
func (e *Etcd) Stop() { e.proc.stop(syscall.SIGKILL, 10*time.Second) }

// PatroniMember is one Patroni agent and the PostgreSQL server it runs, a
// member of the cluster (scope) of one shard database. Its methods are
// safe for concurrent use.
type PatroniMember struct {
	Scope, Name string
	dir         string
	dataDir     string
	configPath  string
	pgPort      int
	apiPort     int
	cred        *syscall.Credential

	mu   sync.Mutex
	proc *process
}

// PatroniDCS are the cluster-wide settings a cluster bootstraps with:
// synchronous mode, strict (a commit waits for a synchronous standby, and
// with none it waits: an acknowledged write is always on two servers);
// short timings, so that a dead leader is replaced within seconds
// (ttl 10 s); pg_rewind to bring an old leader back.
const patroniDCS = `
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: logical
        wal_log_hints: "on"
        synchronous_commit: "on"
        max_connections: 300
        wal_keep_size: 512MB
        max_wal_senders: 10
        max_replication_slots: 10
`

// StartPatroni starts a Patroni agent for member name of cluster scope, in
// dir (created), with etcd as its store; the first agent of a scope
// bootstraps the cluster (initdb, with Superuser and Password, and
// parameters over the patroniDCS ones), the others clone it as replicas.
// It returns once the agent's REST API answers; PostgreSQL may still be
// starting.
func StartPatroni(ctx context.Context, etcd *Etcd, dir, scope, name string, parameters map[string]string) (*PatroniMember, error) {
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
		if !reachable(dir, cred.Uid) {
			return nil, fmt.Errorf("pgserver: the user PostgreSQL runs as cannot reach %s", dir)
		}
	}
	m := &PatroniMember{Scope: scope, Name: name, dir: dir, dataDir: filepath.Join(dir, "data"), cred: cred,
		configPath: filepath.Join(dir, "patroni.yml")}
	if m.pgPort, err = freePort(); err != nil {
		return nil, err
	}
	if m.apiPort, err = freePort(); err != nil {
		return nil, err
	}
	dcs := patroniDCS
	for _, k := range slices.Sorted(maps.Keys(parameters)) {
		dcs += fmt.Sprintf("        %s: %q\n", k, parameters[k])
	}
	config := fmt.Sprintf(`scope: %s
name: %s
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:%d
  connect_address: 127.0.0.1:%d
etcd:
  host: %s
bootstrap:%s
  initdb:
    - encoding: UTF8
    - locale: C
    - auth-host: scram-sha-256
    - auth-local: trust
postgresql:
  listen: 127.0.0.1:%d
  connect_address: 127.0.0.1:%d
  data_dir: %s
  bin_dir: %s
  pgpass: %s
  authentication:
    superuser: {username: %s, password: %s}
    replication: {username: replicator, password: replicator}
    rewind: {username: %s, password: %s}
  parameters:
    unix_socket_directories: %s
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 scram-sha-256
    - host replication all 127.0.0.1/32 scram-sha-256
`, scope, name, m.apiPort, m.apiPort, etcd.Endpoint(), dcs, m.pgPort, m.pgPort, m.dataDir, binDir,
		filepath.Join(dir, "pgpass"), Superuser, Password, Superuser, Password, dir)
	if err := os.WriteFile(m.configPath, []byte(config), 0o600); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if cred != nil {
		if err := os.Chown(m.configPath, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: %w", err)
		}
	}
	if err := m.StartAgent(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// StartAgent starts the member's Patroni agent (again, after KillAgent)
// and returns once its REST API answers. The agent stops its PostgreSQL
// when it is stopped, and when our process dies (a parent-death SIGTERM).
func (m *PatroniMember) StartAgent(ctx context.Context) error {
	proc, err := startProcess(filepath.Join(m.dir, "patroni.log"), m.cred, syscall.SIGTERM, "patroni", m.configPath)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = proc
	m.mu.Unlock()
	if err := waitHTTP(ctx, m.api("/liveness"), proc.done, 60*time.Second); err != nil {
		return fmt.Errorf("pgserver: patroni %s: %w; log: %s", m.Name, err, tail(filepath.Join(m.dir, "patroni.log")))
	}
	return nil
}

// LogTail is the end of the agent's log (PostgreSQL's is in it too).
func (m *PatroniMember) LogTail() string { return tail(filepath.Join(m.dir, "patroni.log")) }

// Port is the member's PostgreSQL port on 127.0.0.1.
func (m *PatroniMember) Port() int { return m.pgPort }

// DSN is a connection string for database db on this member as the
// superuser.
func (m *PatroniMember) DSN(db string) string {
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", Superuser, Password, m.pgPort, db)
}

func (m *PatroniMember) api(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", m.apiPort, path)
}

// IsLeader tells whether the member's agent answers that it leads, with
// its PostgreSQL a primary.
func (m *PatroniMember) IsLeader(ctx context.Context) bool { return apiOK(ctx, m.api("/primary")) }

// IsSyncStandby tells whether the member's agent answers that it is the
// cluster's synchronous standby.
func (m *PatroniMember) IsSyncStandby(ctx context.Context) bool { return apiOK(ctx, m.api("/sync")) }

// KillAgent kills the Patroni agent (kill -9), leaving its PostgreSQL
// running, as a crashed agent would.
func (m *PatroniMember) KillAgent() {
	m.mu.Lock()
	proc := m.proc
	m.mu.Unlock()
	proc.stop(syscall.SIGKILL, 10*time.Second)
}

// KillPostgres kills the member's postmaster and its children (kill -9),
// as a crash would; the agent notices and restarts it, or fails over.
func (m *PatroniMember) KillPostgres() error {
	pid, err := m.postmasterPID()
	if err != nil {
		return err
	}
	children := childPIDs(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgserver: kill postgres of %s: %w", m.Name, err)
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	return nil
}

func (m *PatroniMember) postmasterPID() (int, error) {
	raw, err := os.ReadFile(filepath.Join(m.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgserver: postgres of %s: %w", m.Name, err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Switchover asks the cluster, with patronictl, to hand leadership from
// leader to candidate (a planned switchover), and waits for patronictl.
func (m *PatroniMember) Switchover(ctx context.Context, leader, candidate string) error {
	cmd := exec.CommandContext(ctx, "patronictl", "-c", m.configPath, "switchover", m.Scope,
		"--leader", leader, "--candidate", candidate, "--force")
	out, err := cmd.CombinedOutput()
	// patronictl exits 0 when the agent refuses the switchover.
	if err == nil && strings.Contains(string(out), "failed, details") {
		err = errors.New("refused")
	}
	if err != nil {
		return fmt.Errorf("pgserver: patronictl switchover %s → %s: %w: %s", leader, candidate, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// AddPermanentSlot makes slot, a logical slot of database decoded with
// plugin, a permanent slot of the member's cluster: Patroni keeps it on
// the leader and copies it to the replicas (a restart of their
// PostgreSQL), where it advances it to the leader's position, so that it
// outlives a failover. A slot Patroni does not know it drops whenever no
// one reads it. Make the slot first: Patroni would make it at once,
// before what it is to decode exists.
func (m *PatroniMember) AddPermanentSlot(ctx context.Context, slot, database, plugin string) error {
	body := fmt.Sprintf(`{"slots": {%q: {"type": "logical", "database": %q, "plugin": %q}}}`, slot, database, plugin)
	req, err := http.NewRequestWithContext(ctx, "PATCH", m.api("/config"), strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("pgserver: patroni %s: %w", m.Name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pgserver: patroni %s: PATCH /config: %s", m.Name, resp.Status)
	}
	return nil
}

// Stop stops the agent, which stops its PostgreSQL; a PostgreSQL left
// running by a killed agent is stopped too.
func (m *PatroniMember) Stop() {
	m.mu.Lock()
	proc := m.proc
	m.mu.Unlock()
	proc.stop(syscall.SIGTERM, 60*time.Second)
	if pid, err := m.postmasterPID(); err == nil {
		if syscall.Kill(pid, syscall.SIGQUIT) == nil {
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

// apiOK tells whether a GET of url answers 200 within 2 s.
func apiOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitHTTP polls url until it answers 200, the process exits or timeout
// passes.
func waitHTTP(ctx context.Context, url string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !apiOK(ctx, url) {
		select {
		case <-exited:
			return errors.New("exited during start")
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// tail is the end of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}
