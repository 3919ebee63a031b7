// Package postgres is the only package with ledger SQL: the coffer.Ledger
// over the shard tables, the sweepers, and the mapping of PostgreSQL errors
// to domain codes.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shed"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options tune a Store.
type Options struct {
	// Timeout bounds each call's database work; zero means 5 seconds.
	Timeout time.Duration
	// LockTimeout bounds a batch's wait for its players' locks; zero
	// means a quarter of Timeout. A batch that waits longer (a player
	// locked elsewhere) is split by player, so that only that player's
	// writes fail, and within Timeout.
	LockTimeout time.Duration
	// RetriesMax bounds the retries of a batch that lost a race
	// (deadlock, serialization, an idempotency key written by another
	// instance) or its connection; zero means 3.
	RetriesMax int
	// BatchSizeMax bounds the writes of one batch; zero means 100. A
	// committer takes one job and adds those queued while they fit.
	BatchSizeMax int
	// Committers is the number of batches of writes in flight per
	// database, each on a connection of its pool; zero means 1 (ADR
	// 0023: one batch in flight carries the writes that queue while it
	// runs, and costs the database less per write).
	Committers int
	// Readers is the number of batches of balance reads in flight per
	// database, each on a connection of its pool; zero means 1. A read
	// batch is one round trip with no commit to wait for, so one at a
	// time gathers the reads that queue meanwhile: coffer bench measured
	// PostgreSQL's CPU per read at 0.070–0.079 ms with one against
	// 0.103–0.110 with two (docs/benchmarks.md).
	Readers int
	// QueueMax bounds the jobs (a call's writes, or its read) waiting per
	// database; zero means 1024. A call that finds the queue full is
	// refused at once: overloaded.
	QueueMax int
	// ReportsMax bounds the revenue reports computed at once; zero means
	// 2. Each reads every shard, so a burst of them would take a pool
	// connection on every database for each.
	ReportsMax int
	// FinlogScanMax bounds the trx a finlog page with a filter
	// (coffer.FinlogQuery.Filtered) looks at; zero means 10 000. So a page never reads a long
	// history to find a rare trx; it answers what it found and a cursor.
	FinlogScanMax int
	// Observer is told of each batch and of each attempt of a batch of
	// writes (metrics); nil tells nothing.
	Observer Observer
}

// Store implements coffer.Ledger on the shards of a Router. It is safe for
// concurrent use.
type Store struct {
	router  *shard.Router
	catalog *coffer.Catalog
	opts    Options
	reports *shed.Gate
	queries sync.Map // coffer.ShardID → *queries
	// writes are the statements a batch writes with ([2]uint{shard,
	// parts} → string, writeSQL), built once.
	writes sync.Map
	// oneRows are the batch statements' one-row forms (statement →
	// oneRow), built once.
	oneRows sync.Map
	// writers and readers are the batches of each database (by index).
	writers []*committer[*request]
	readers []*committer[*readRequest]
	// batchPools are the connections of the batches of writes and reads,
	// by database index (batchPool).
	batchPools []*pgxpool.Pool
	// holdSweeps and lotSweeps are what the sweepers remember of their
	// last pass (sweep).
	holdSweeps, lotSweeps failedSweeps
	// now is the clock planLate reads: time.Now, or a test's clock
	// (stall_export_test.go) that makes planning run late at the writes
	// it chooses, which real time cannot do without a timing bet.
	now func() time.Time
}

var _ coffer.Ledger = (*Store)(nil)

// New returns a Store. The router's map must have been migrated with
// coffer's schema.
func New(router *shard.Router, catalog *coffer.Catalog, opts Options) *Store {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = opts.Timeout / 4
	}
	if opts.RetriesMax == 0 {
		opts.RetriesMax = 3
	}
	if opts.ReportsMax == 0 {
		opts.ReportsMax = 2
	}
	if opts.BatchSizeMax == 0 {
		opts.BatchSizeMax = 100
	}
	if opts.Committers == 0 {
		opts.Committers = 1
	}
	if opts.Readers == 0 {
		opts.Readers = 1
	}
	if opts.QueueMax == 0 {
		opts.QueueMax = 1024
	}
	if opts.FinlogScanMax == 0 {
		opts.FinlogScanMax = 10000
	}
	if opts.Observer == nil {
		opts.Observer = unobserved{}
	}
	s := &Store{router: router, catalog: catalog, opts: opts, reports: shed.NewGate("revenue reports in flight", opts.ReportsMax), now: time.Now}
	for i := range router.Map().Databases() {
		s.batchPools = append(s.batchPools, s.batchPool(i))
		s.writers = append(s.writers, newCommitter(s, i, "writes", opts.Committers, s.settler, failWrites, unanswered))
		s.readers = append(s.readers, newCommitter(s, i, "reads", opts.Readers, func() func(context.Context, int, []*readRequest) { return s.runReads }, failReads, nil))
	}
	return s
}

// batchPool opens the pool of database i's batches: Committers +
// Readers connections, each running one batch at a time, which start
// with the batches' settings (batchSession) and keep the prepared
// statements of every shard of the database (batchStatementsMax). It is
// the router's pool's configuration otherwise (hosts, timeouts,
// lifetimes, tracer), and connects lazily as that pool does.
func (s *Store) batchPool(i int) *pgxpool.Pool {
	cfg := s.router.Database(i).Config()
	cfg.MaxConns = int32(s.opts.Committers + s.opts.Readers)
	cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
	maps.Copy(cfg.ConnConfig.RuntimeParams, batchSession(s.opts))
	cfg.ConnConfig.StatementCacheCapacity = batchStatementsMax(len(s.router.Map().Databases()[i].Shards))
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		// pgxpool refuses only a configuration the router's pool, made
		// of the same, would have had refused, or no connection.
		panic(fmt.Sprintf("database %d: the batches' pool: %v", i, err))
	}
	return pool
}

// Close stops the store's committers once the batches in flight are
// answered, then closes their connections; a write or read still
// queued, or sent after, answers shard_unavailable. The router stays
// open: its owner closes it.
func (s *Store) Close() {
	for _, c := range s.writers {
		c.close()
	}
	for _, c := range s.readers {
		c.close()
	}
	for _, p := range s.batchPools {
		p.Close()
	}
}

// q returns the statements of a shard, built once.
func (s *Store) q(id coffer.ShardID) *queries {
	if q, ok := s.queries.Load(id); ok {
		return q.(*queries)
	}
	q, _ := s.queries.LoadOrStore(id, newQueries(id))
	return q.(*queries)
}

// writeSQL is writeSQL(id, parts), built once.
func (s *Store) writeSQL(id coffer.ShardID, parts uint) string {
	k := [2]uint{uint(id), parts}
	if sql, ok := s.writes.Load(k); ok {
		return sql.(string)
	}
	sql, _ := s.writes.LoadOrStore(k, writeSQL(id, parts))
	return sql.(string)
}

// bind is batch statement sql with cols as its parameters, in turn: an
// array per column; or, when each of cols holds one row (a lone write's,
// a read of one player), sql's one-row form (oneRow) with the row's
// values.
func (s *Store) bind(sql string, cols ...*columns) (string, []any) {
	one := true
	for _, c := range cols {
		one = one && c.rows() == 1
	}
	var args []any
	for _, c := range cols {
		if one {
			args = append(args, c.row()...)
		} else {
			args = append(args, c.args()...)
		}
	}
	if !one {
		return sql, args
	}
	if o, ok := s.oneRows.Load(sql); ok {
		return o.(string), args
	}
	o, _ := s.oneRows.LoadOrStore(sql, oneRow(sql))
	return o.(string), args
}

// queue queues batch statement sql in b with cols as its parameters
// (bind).
func (s *Store) queue(b *pgx.Batch, sql string, cols ...*columns) *pgx.QueuedQuery {
	sql, args := s.bind(sql, cols...)
	return b.Queue(sql, args...)
}

// retryable tells whether a batch failed only because it lost a race with
// another transaction, so that running it again is correct and nothing
// was written: a serialization failure, a deadlock, or a trx insert that
// found its idempotency key (or a refund its order's refund) written
// meanwhile (by an instance that does not lock the player first); run
// again, the batch reads that trx.
func retryable(err error) bool {
	var pg *pgconn.PgError
	return idempotencyViolation(err) || errors.As(err, &pg) && (pg.Code == sqlstateSerializationFailure || pg.Code == sqlstateDeadlockDetected ||
		(pg.Code == sqlstateUniqueViolation && strings.HasSuffix(pg.ConstraintName, "_refund")))
}

// idempotencyViolation tells whether err is a trx insert refused by
// trx_N_idempotency: its key has a trx.
func idempotencyViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == sqlstateUniqueViolation && strings.HasSuffix(pg.ConstraintName, "_idempotency")
}

// isolable tells whether a batch's failure may come from some of its
// writes only, so that running its players (or one player's writes)
// apart gives the others their answers: a player locked elsewhere past
// LockTimeout, a value the database refuses, a writesFailure.
func isolable(err error) bool {
	var own *writesFailure
	if errors.As(err, &own) {
		return true
	}
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return false
	}
	class := pg.Code[:2]
	return lockTimedOut(err) || class == classDataException || class == classIntegrityViolation || class == classProgramLimitExceeded
}

// lockTimedOut tells whether err is a lock wait cut by LockTimeout.
func lockTimedOut(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == sqlstateLockNotAvailable
}

// fail maps err and reports it to the shard's database (failed). A
// statement that met the shard's fence reads the moves again, so that
// the caller's retry finds the shard's new home.
func (s *Store) fail(id coffer.ShardID, err error) error {
	mapped, _ := classify(id, err)
	if fenced(err) {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		defer cancel()
		_ = s.router.Refresh(ctx)
	}
	if db := s.router.DatabaseIndex(id); db >= 0 {
		s.failed(db, err)
	}
	return mapped
}

// failed tells the router what err shows of database db. A connection or
// server that failed marks it down, so that its next requests fail fast.
// A connection that reached a server that has become a standby (or is
// read-only) makes the pools (the router's, the batches') reconnect at once, to whichever server
// accepts writes now, instead of failing every request until the next
// probe finds it.
func (s *Store) failed(db int, err error) {
	if _, connFailed := classify(0, err); connFailed {
		s.router.MarkDown(db)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == sqlstateReadOnlyTransaction {
		s.router.Reconnect(db)
		s.batchPools[db].Reset()
	}
}

// pool returns the pool of shard id's database, waiting while the shard
// is being cut over (home), or shard_unavailable at once while the
// database is known to be down or unverified.
func (s *Store) pool(ctx context.Context, id coffer.ShardID) (*pgxpool.Pool, error) {
	db, err := s.home(ctx, id, s.router.Available)
	if err != nil {
		return nil, err
	}
	return s.router.Database(db), nil
}

// classify turns a driver error into a domain error and tells whether it is
// a failure of the connection or the server rather than of the request.
// Domain errors pass through; a database that is down, unreachable or slow
// is shard_unavailable, which the client may retry with the same key. A
// timeout is not a connection failure: the request's own deadline may have
// been short.
func classify(id coffer.ShardID, err error) (mapped error, connFailed bool) {
	if err == nil {
		return nil, false
	}
	var de *coffer.Error
	if errors.As(err, &de) {
		return err, false
	}
	unavailable := func(msg string) error {
		return &coffer.Error{Code: coffer.CodeUnavailable, Message: fmt.Sprintf("shard %d %s", id, msg), Err: err}
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code[:2] == classConnectionException, pg.Code[:2] == classOperatorIntervention:
			return unavailable("is unavailable"), true
		case pg.Code == sqlstateTooManyConnections, pg.Code == sqlstateReadOnlyTransaction:
			return unavailable("is unavailable"), false
		case pg.Code == sqlstateLockNotAvailable:
			return unavailable("has the player locked by another transaction"), false
		case fenced(err):
			return unavailable("moved to another database, or is moving"), false
		case retryable(err):
			// A race lost again after every retry: nothing was written,
			// and the same request may well pass later.
			return unavailable("aborted the write in a conflict with another transaction"), false
		case pg.Code[:2] == classDataException:
			return &coffer.Error{Code: coffer.CodeInvalid, Message: pg.Message, Err: err}, false
		}
		return &coffer.Error{Code: coffer.CodeInternal, Message: fmt.Sprintf("shard %d: database error", id), Err: err}, false
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return unavailable("is unavailable or slow"), false
	}
	if errors.Is(err, context.Canceled) {
		return &coffer.Error{Code: coffer.CodeUnavailable, Message: "request canceled", Err: err}, false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return unavailable("is unavailable: connection failed"), true
	}
	// Anything else (a row that does not decode, say) is our bug, not the
	// database's: retrying would not help.
	return &coffer.Error{Code: coffer.CodeInternal, Message: fmt.Sprintf("shard %d: internal error", id), Err: err}, false
}
