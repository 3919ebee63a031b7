package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Engine applies migrations to every database of a shard map. An Engine is
// used by one goroutine at a time.
type Engine struct {
	Map        *shard.Map
	Env        Env
	Migrations []Migration
	// StateSchema holds the state tables; empty means public.
	StateSchema string
	// Out receives one progress line per database and migration.
	Out io.Writer
	// ConnectTimeout bounds each connection attempt; zero means 10 s.
	ConnectTimeout time.Duration
	// Retired names migrations of a chain that Migrations replaced, each
	// with why a database that applied one is refused (coffer's schema:
	// schemaRetired). Without it such a database would be refused as if
	// a file had been renamed or removed.
	Retired map[string]string
}

// Options of one Apply.
type Options struct {
	// DryRun runs TRX migrations and rolls them back, and prints NOTRX ones.
	DryRun bool
	// TargetVersion stops after this version; negative means the newest.
	TargetVersion  int64
	ForceUpdateEnv bool
}

// advisoryLockKey serialises concurrent `coffer migrate` runs (and service
// instances migrating at start) on one database.
const advisoryLockKey = 0x636f66666572 // "coffer"

// lockRetry is how often a run waiting for another's migration lock tries
// it again.
const lockRetry = 500 * time.Millisecond

// session is the engine's connection to one database and what it found
// there.
type session struct {
	db    shard.Database
	conn  *pgx.Conn
	state state
	// pending are the migrations to apply, in order.
	pending []Migration
	// busy: another run held the migration lock (Status only, which does
	// not wait for it).
	busy bool
}

// state is what the state tables of a database hold.
type state struct {
	initialized bool // _sdbmigrate_sharding_state has its row
	shardCount  int
	shardIDs    []coffer.ShardID
	env         map[string][2]string // key → {value, type}
	applied     []appliedMigration
	checksums   map[int64]string
}

type appliedMigration struct {
	version int64
	name    string
}

func (s state) version() int64 {
	if len(s.applied) == 0 {
		return -1
	}
	return s.applied[len(s.applied)-1].version
}

// Apply brings every database to the target version. It first connects to
// every database and checks every refusal (an encoding other than UTF8,
// shard layout, env, edited or unknown migrations) and changes nothing if
// any fails. A failed TRX
// migration is rolled back, leaving its database at the previous version,
// and stops the run.
func (e *Engine) Apply(ctx context.Context, opts Options) error {
	if err := e.Env.Validate(); err != nil {
		return err
	}
	if moving := e.Map.InProgress(); len(moving) > 0 {
		mv := moving[0]
		return fmt.Errorf("shard %d is being moved from %s to %s (coffer shard move): finish the move, or abort it, then migrate; nothing was changed", mv.Shard, mv.Source, mv.Target)
	}
	sessions, err := e.open(ctx, true)
	defer closeAll(sessions)
	if err != nil {
		return err
	}
	for _, s := range sessions {
		if err := e.plan(s, opts); err != nil {
			return fmt.Errorf("%s: %w; nothing was changed", s.db.Label(), err)
		}
	}
	for _, s := range sessions {
		if err := e.applyDatabase(ctx, s, opts); err != nil {
			return err
		}
	}
	return nil
}

func closeAll(sessions []*session) {
	for _, s := range sessions {
		_ = s.conn.Close(context.Background())
	}
}

// open connects to every database, refuses one not UTF8, takes its
// migration lock (or, unless wait, goes on without it when another run
// holds it: session.busy) and reads its state.
func (e *Engine) open(ctx context.Context, wait bool) ([]*session, error) {
	timeout := e.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	var sessions []*session
	// run names this run's sessions (application_name, sent as they
	// connect), so that a session finding the lock held by one of them
	// knows the config lists its database twice.
	run := fmt.Sprintf("coffer migrate %016x", rand.Uint64())
	for _, db := range e.Map.Databases() {
		cfg, err := pgx.ParseConfig(db.Config.ConnString(int(timeout / time.Second)))
		if err != nil {
			return sessions, fmt.Errorf("%s: %w", db.Label(), err)
		}
		cfg.RuntimeParams["application_name"] = run
		cctx, cancel := context.WithTimeout(ctx, timeout)
		conn, err := pgx.ConnectConfig(cctx, cfg)
		cancel()
		if err != nil {
			return sessions, fmt.Errorf("%s: cannot connect: %w; check host, port, user, password and that the database exists", db.Label(), err)
		}
		s := &session{db: db, conn: conn}
		sessions = append(sessions, s)
		if err := e.lock(ctx, s, run, wait); err != nil {
			return sessions, fmt.Errorf("%s: take migration lock: %w", db.Label(), err)
		}
		if s.state, err = e.readState(ctx, conn); err != nil {
			return sessions, fmt.Errorf("%s: read migration state: %w", db.Label(), err)
		}
	}
	return sessions, nil
}

// lock takes s's migration lock, trying again every lockRetry while another
// run holds it if wait, else marking s busy. It never waits inside a
// statement: a session blocked in pg_advisory_lock holds a snapshot, which
// a CREATE INDEX CONCURRENTLY of the run holding the lock waits for, and
// PostgreSQL would end one of the two as a deadlock. A lock held by this
// run itself (run, its sessions' name) is an error: waiting would be
// forever.
func (e *Engine) lock(ctx context.Context, s *session, run string, wait bool) error {
	for try := 0; ; try++ {
		var locked bool
		if err := s.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", advisoryLockKey).Scan(&locked); err != nil {
			return err
		}
		if locked {
			return nil
		}
		// Who holds it is asked once: a session of this run holds its lock
		// until the run ends, so a later try would find the same.
		if try == 0 {
			pid, holder := lockHolder(ctx, s.conn)
			switch {
			case holder == run:
				return errors.New("the config lists this database twice (another entry of databases names the same database, spelt otherwise)")
			case !wait:
				s.busy = true
				return nil
			case pid > 0:
				e.progress("%s: waiting for another coffer migrate to finish (backend pid %d holds the lock)", s.db.Label(), pid)
			default:
				e.progress("%s: waiting for another coffer migrate to finish", s.db.Label())
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lockRetry):
		}
	}
}

// lockHolder is the backend holding the migration lock and its
// application_name (a coffer migrate run's name), for the operator to find
// it in pg_stat_activity; zero and empty if it cannot tell (the lock was
// just let go). A bigint advisory key is held as classid (high half),
// objid (low half) and objsubid 1.
func lockHolder(ctx context.Context, conn *pgx.Conn) (pid int, name string) {
	err := conn.QueryRow(ctx, `SELECT l.pid, COALESCE(a.application_name, '') FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		AND l.classid = ($1::bigint >> 32)::oid AND l.objid = ($1::bigint & 4294967295)::oid
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, advisoryLockKey).Scan(&pid, &name)
	if err != nil {
		return 0, ""
	}
	return pid, name
}

func (e *Engine) schema() string {
	if e.StateSchema == "" {
		return "public"
	}
	return e.StateSchema
}

func (e *Engine) table(name string) string {
	return pgx.Identifier{e.schema(), name}.Sanitize()
}

func (e *Engine) readState(ctx context.Context, conn *pgx.Conn) (state, error) {
	st := state{env: map[string][2]string{}, checksums: map[int64]string{}}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", e.table("_sdbmigrate_sharding_state")).Scan(&exists); err != nil {
		return st, err
	}
	if !exists {
		return st, nil
	}
	var ids []byte
	err := conn.QueryRow(ctx, "SELECT shard_count, shard_ids::text FROM "+e.table("_sdbmigrate_sharding_state")+" WHERE id = 0").Scan(&st.shardCount, &ids)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return st, err
	}
	if err == nil {
		st.initialized = true
		if err := json.Unmarshal(ids, &st.shardIDs); err != nil {
			return st, fmt.Errorf("_sdbmigrate_sharding_state.shard_ids: %w", err)
		}
	}
	rows, _ := conn.Query(ctx, "SELECT key, value, type FROM "+e.table("_sdbmigrate_env"))
	var key, value, typ string
	if _, err := pgx.ForEachRow(rows, []any{&key, &value, &typ}, func() error {
		st.env[key] = [2]string{value, typ}
		return nil
	}); err != nil {
		return st, err
	}
	rows, _ = conn.Query(ctx, "SELECT version, migration_name FROM "+e.table("_sdbmigrate_migrations")+" ORDER BY version")
	var am appliedMigration
	if _, err := pgx.ForEachRow(rows, []any{&am.version, &am.name}, func() error {
		st.applied = append(st.applied, am)
		return nil
	}); err != nil {
		return st, err
	}
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", e.table("_coffer_migration_checksums")).Scan(&exists); err != nil || !exists {
		return st, err
	}
	rows, _ = conn.Query(ctx, "SELECT version, checksum FROM "+e.table("_coffer_migration_checksums"))
	var v int64
	var sum string
	_, err = pgx.ForEachRow(rows, []any{&v, &sum}, func() error {
		st.checksums[v] = sum
		return nil
	})
	return st, err
}

// plan checks the database's state against the config and the files and
// lists the migrations to apply.
func (e *Engine) plan(s *session, opts Options) error {
	if err := checkEncoding(s); err != nil {
		return err
	}
	st := s.state
	for _, a := range st.applied {
		if why, ok := e.Retired[a.name]; ok {
			return errors.New(why)
		}
	}
	if st.initialized {
		if st.shardCount != e.Map.ShardCount() {
			return fmt.Errorf("shard_count is %d in the database but %d in the config; shard_count never changes after the first deploy", st.shardCount, e.Map.ShardCount())
		}
		// sdbmigrate records the ids in the order the config lists its
		// ranges; the map's are sorted. A shard moved here or away is
		// recorded so by the mover (coffer shard move), which the map
		// knows too; one a move is copying here may be recorded or not.
		incoming, placed := e.Map.Incoming(s.db.Index), e.Map.Databases()[s.db.Index].Shards
		recorded := slices.DeleteFunc(slices.Sorted(slices.Values(st.shardIDs)), func(id coffer.ShardID) bool { return slices.Contains(incoming, id) })
		if !slices.Equal(recorded, placed) {
			return fmt.Errorf("the database holds shards %s but the config and the shard moves place shards %s on it; fix the databases section of the config", shardList(recorded), shardList(placed))
		}
	}
	if len(st.env) > 0 && !opts.ForceUpdateEnv {
		if err := e.checkEnv(st.env); err != nil {
			return err
		}
	}
	files := map[int64]Migration{}
	for _, m := range e.Migrations {
		files[m.Version] = m
	}
	for _, a := range st.applied {
		m, ok := files[a.version]
		switch {
		case !ok:
			return fmt.Errorf("migration %s is applied but not among the migrations here; use the migrations (or coffer binary) the database was migrated with, or newer", a.name)
		case m.Name != a.name:
			return fmt.Errorf("version %d was applied as %s but the file is now %s; do not rename applied migrations", a.version, a.name, m.Name)
		case st.checksums[a.version] != "" && st.checksums[a.version] != m.Checksum:
			return fmt.Errorf("%s was edited after it was applied (its checksum differs); restore the file and put the change in a new migration", m.Name)
		}
	}
	s.pending = nil
	for _, m := range e.Migrations {
		if m.Version <= st.version() {
			if !slices.ContainsFunc(st.applied, func(a appliedMigration) bool { return a.version == m.Version }) {
				return fmt.Errorf("%s is not applied but the database is already at version %d; give it a version above %d", m.Name, st.version(), st.version())
			}
			continue
		}
		if opts.TargetVersion >= 0 && m.Version > opts.TargetVersion {
			break
		}
		s.pending = append(s.pending, m)
	}
	return nil
}

func (e *Engine) checkEnv(stored map[string][2]string) error {
	for _, k := range e.Env.Keys() {
		got, ok := stored[k]
		if !ok {
			return fmt.Errorf("env.%s is in the config but not in the database; env is frozen after the first apply: use --force-update-env to change it", k)
		}
		if !e.Env[k].equalStored(got[0], got[1]) {
			return fmt.Errorf("env.%s is %q (%s) in the database but %q (%s) in the config; env is frozen after the first apply: use --force-update-env to change it", k, got[0], got[1], e.Env[k].Text(), e.Env[k].typeName())
		}
	}
	for k := range stored {
		if _, ok := e.Env[k]; !ok {
			return fmt.Errorf("env.%s is in the database but not in the config; env is frozen after the first apply: use --force-update-env to change it", k)
		}
	}
	return nil
}

func shardList(ids []coffer.ShardID) string {
	if len(ids) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(int(ids[i])))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// applyDatabase writes the state and applies the pending migrations of one
// database. In a dry run everything transactional happens in one
// transaction that is rolled back at the end, so later migrations can build
// on earlier ones.
func (e *Engine) applyDatabase(ctx context.Context, s *session, opts Options) error {
	label := s.db.Label()
	if opts.DryRun {
		tx, err := s.conn.Begin(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		defer tx.Rollback(context.Background())
		if err := e.writeState(ctx, tx, s, opts); err != nil {
			return fmt.Errorf("%s: write migration state: %w", label, err)
		}
		for _, m := range s.pending {
			if err := e.dryRun(ctx, tx, s, m); err != nil {
				return err
			}
		}
		e.progress("%s: dry run: rolled back, nothing was changed", label)
		return nil
	}
	if err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error { return e.writeState(ctx, tx, s, opts) }); err != nil {
		return fmt.Errorf("%s: write migration state: %w", label, err)
	}
	if len(s.pending) == 0 {
		e.progress("%s: up to date at version %d", label, s.state.version())
		return nil
	}
	for _, m := range s.pending {
		start := time.Now()
		var err error
		if m.Trx {
			err = pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error { return e.run(ctx, tx, s, m) })
		} else {
			err = e.run(ctx, s.conn, s, m)
		}
		if err != nil {
			if m.Trx {
				return fmt.Errorf("%s: %w; the migration was rolled back, the database stays at version %d", label, err, s.state.version())
			}
			return fmt.Errorf("%s: %w; NOTRX migration: statements before the failing one stay applied, fix and rerun", label, err)
		}
		s.state.applied = append(s.state.applied, appliedMigration{m.Version, m.Name})
		e.progress("%s: %s applied%s in %v", label, m.Name, e.shardNote(s, m), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func (e *Engine) shardNote(s *session, m Migration) string {
	if !m.Shard {
		return ""
	}
	return fmt.Sprintf(" to shards %s", shardList(s.db.Shards))
}

func (e *Engine) progress(format string, args ...any) {
	if e.Out != nil {
		fmt.Fprintf(e.Out, format+"\n", args...)
	}
}

// execer is a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// run executes a migration's statements (per shard for SHARD) and records
// it as applied, on ex.
func (e *Engine) run(ctx context.Context, ex execer, s *session, m Migration) error {
	for _, shardID := range e.targets(s, m) {
		for _, st := range Split(e.render(m.SQL, shardID)) {
			if _, err := ex.Exec(ctx, st.SQL); err != nil {
				where := ""
				if shardID >= 0 {
					where = fmt.Sprintf(" shard %d,", shardID)
				}
				return fmt.Errorf("%s:%s statement at line %d: %w", m.Name, where, st.Line, err)
			}
		}
	}
	return e.record(ctx, ex, m)
}

func (e *Engine) dryRun(ctx context.Context, tx pgx.Tx, s *session, m Migration) error {
	if m.Trx {
		if err := e.run(ctx, tx, s, m); err != nil {
			return fmt.Errorf("%s: dry run: %w", s.db.Label(), err)
		}
		e.progress("%s: %s would apply%s (ran and rolled back)", s.db.Label(), m.Name, e.shardNote(s, m))
		return nil
	}
	e.progress("%s: %s would run outside a transaction%s:", s.db.Label(), m.Name, e.shardNote(s, m))
	for _, shardID := range e.targets(s, m) {
		for _, st := range Split(e.render(m.SQL, shardID)) {
			e.progress("    %s;", st.SQL)
		}
	}
	return e.record(ctx, tx, m)
}

// targets lists the shards a migration runs for; -1 stands for "once".
func (e *Engine) targets(s *session, m Migration) []coffer.ShardID {
	if !m.Shard {
		return []coffer.ShardID{-1}
	}
	return s.db.Shards
}

// render substitutes env variables, <db_schema> and <shard_id>, in
// sdbmigrate's order.
func (e *Engine) render(sql string, shardID coffer.ShardID) string {
	sql = e.Env.Substitute(sql)
	sql = strings.ReplaceAll(sql, "<db_schema>", e.schema())
	if shardID >= 0 {
		sql = strings.ReplaceAll(sql, "<shard_id>", strconv.Itoa(int(shardID)))
	}
	return sql
}

func (e *Engine) record(ctx context.Context, ex execer, m Migration) error {
	if _, err := ex.Exec(ctx, "INSERT INTO "+e.table("_sdbmigrate_migrations")+" (version, migration_name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
		return fmt.Errorf("%s: record as applied: %w", m.Name, err)
	}
	if _, err := ex.Exec(ctx, "INSERT INTO "+e.table("_coffer_migration_checksums")+" (version, checksum) VALUES ($1, $2) ON CONFLICT (version) DO UPDATE SET checksum = EXCLUDED.checksum", m.Version, m.Checksum); err != nil {
		return fmt.Errorf("%s: record checksum: %w", m.Name, err)
	}
	return nil
}
