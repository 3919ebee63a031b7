package migrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// DatabaseStatus is what Status reports for one database.
type DatabaseStatus struct {
	Label   string
	Shards  []coffer.ShardID
	Version int64 // -1: nothing applied
	Applied int
	Pending []string
	// Problem is why Apply would refuse this database; empty if none.
	Problem string
	// Busy: another coffer migrate was running there, so what Status read
	// may be about to change.
	Busy bool
}

// String is the status as one line.
func (d DatabaseStatus) String() string {
	s := fmt.Sprintf("%s: shards %s, version %d, %d applied, %d pending", d.Label, shardList(d.Shards), d.Version, d.Applied, len(d.Pending))
	for _, p := range d.Pending {
		s += "\n    pending " + p
	}
	if d.Problem != "" {
		s += "\n    refused: " + d.Problem
	}
	if d.Busy {
		s += "\n    another coffer migrate is running here: this may be about to change"
	}
	return s
}

// Status reports the version, pending migrations and problems of every
// database without changing anything.
func (e *Engine) Status(ctx context.Context) ([]DatabaseStatus, error) {
	sessions, err := e.open(ctx, false)
	defer closeAll(sessions)
	if err != nil {
		return nil, err
	}
	var out []DatabaseStatus
	for _, s := range sessions {
		ds := DatabaseStatus{Label: s.db.Label(), Shards: s.db.Shards, Version: s.state.version(), Applied: len(s.state.applied), Busy: s.busy}
		if err := e.plan(s, Options{TargetVersion: -1}); err != nil {
			ds.Problem = err.Error()
		}
		for _, m := range s.pending {
			ds.Pending = append(ds.Pending, m.Name)
		}
		out = append(out, ds)
	}
	return out, nil
}

// Templates are the kinds of migration Generate writes, named as in
// sdbmigrate's --generate-template (SQL only).
var Templates = map[string]struct {
	kind string
	body string
}{
	"trx_plain_sql":   {"TRX_PLAIN", "-- Runs once per database, in one transaction.\n"},
	"trx_shard_sql":   {"TRX_SHARD", "-- Runs once per shard of each database, in one transaction per database.\n-- <shard_id> is the shard number, e.g. ALTER TABLE lot_<shard_id> ...;\n"},
	"notrx_plain_sql": {"NOTRX_PLAIN", "-- Runs statement by statement outside a transaction (CREATE INDEX CONCURRENTLY).\n"},
	"notrx_shard_sql": {"NOTRX_SHARD", "-- Runs statement by statement outside a transaction, once per shard.\n-- CREATE INDEX CONCURRENTLY IF NOT EXISTS x_<shard_id> ON t_<shard_id> (c);\n"},
}

// Generate writes the next migration file into dir: version one above the
// newest there, from the named template. It returns the file's path.
func Generate(dir, template, name string) (string, error) {
	t, ok := Templates[template]
	if !ok {
		return "", fmt.Errorf("generate template %q: must be trx_plain_sql, trx_shard_sql, notrx_plain_sql or notrx_shard_sql", template)
	}
	existing, err := Load(os.DirFS(dir), dir)
	if err != nil {
		return "", err
	}
	next := int64(0)
	if len(existing) > 0 {
		next = existing[len(existing)-1].Version + 1
	}
	file := fmt.Sprintf("V%04d__%s__%s.sql", next, t.kind, name)
	if _, err := parseName(file); err != nil {
		return "", err
	}
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if os.IsExist(err) {
			return "", fmt.Errorf("%s: %w", path, ErrExists)
		}
		return "", err
	}
	defer f.Close()
	_, err = f.WriteString(t.body)
	return path, err
}

// ErrUnreachable marks a Verify that could not reach its database, as
// opposed to one that found the schema incompatible.
var ErrUnreachable = errors.New("database unreachable")

// Verify checks, without changing anything or taking the migration lock,
// that db is UTF8, has every migration applied and that its recorded shard
// state and env agree with the config. A server calls it before sending db requests.
func (e *Engine) Verify(ctx context.Context, db shard.Database) error {
	timeout := e.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(cctx, db.Config.ConnString(int(timeout/time.Second)))
	if err != nil {
		return fmt.Errorf("%s: %w: %v", db.Label(), ErrUnreachable, err)
	}
	defer conn.Close(context.Background())
	s := &session{db: db, conn: conn}
	if s.state, err = e.readState(cctx, conn); err != nil {
		return fmt.Errorf("%s: %w: read migration state: %v", db.Label(), ErrUnreachable, err)
	}
	if err := e.plan(s, Options{TargetVersion: -1}); err != nil {
		return fmt.Errorf("%s: %w", db.Label(), err)
	}
	if len(s.pending) > 0 {
		return fmt.Errorf("%s: schema is behind: %d migration(s) pending, first %s; run coffer migrate", db.Label(), len(s.pending), s.pending[0].Name)
	}
	return nil
}
