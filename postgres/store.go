// Package postgres is the only package with ledger SQL: the coffer.Ledger
// over the shard tables, the sweepers, and the mapping of PostgreSQL errors
// to domain codes.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	// RetriesMax bounds retries after a serialization failure or deadlock.
	RetriesMax int
	// ReportsMax bounds the revenue reports computed at once; zero means
	// 2. Each reads every shard, so a burst of them would take a pool
	// connection on every database for each.
	ReportsMax int
}

// Store implements coffer.Ledger on the shards of a Router. It is safe for
// concurrent use.
type Store struct {
	router  *shard.Router
	catalog *coffer.Catalog
	opts    Options
	reports *shed.Gate
	queries sync.Map // coffer.ShardID → *queries
	// lotsSwept is, per shard, the expiry time up to which the lot sweeper
	// has recorded every expired lot (coffer.ShardID → time.Time).
	lotsSwept sync.Map
}

var _ coffer.Ledger = (*Store)(nil)

// New returns a Store. The router's map must have been migrated with
// coffer's schema.
func New(router *shard.Router, catalog *coffer.Catalog, opts Options) *Store {
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.RetriesMax == 0 {
		opts.RetriesMax = 3
	}
	if opts.ReportsMax == 0 {
		opts.ReportsMax = 2
	}
	return &Store{router: router, catalog: catalog, opts: opts, reports: shed.NewGate("revenue reports in flight", opts.ReportsMax)}
}

// q returns the statements of a shard, built once.
func (s *Store) q(id coffer.ShardID) *queries {
	if q, ok := s.queries.Load(id); ok {
		return q.(*queries)
	}
	q, _ := s.queries.LoadOrStore(id, newQueries(id))
	return q.(*queries)
}

// retryable tells whether a transaction failed only because it lost a race
// with another one, so that running it again is correct.
func retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// fail maps err and, when it shows the connection or server failed, marks
// the shard's database down so that its next requests fail fast.
// A connection that reached a server that has become a standby (or is
// read-only) makes the pool reconnect at once, to whichever server
// accepts writes now, instead of failing every request until the next
// probe finds it.
func (s *Store) fail(id coffer.ShardID, err error) error {
	mapped, connFailed := classify(id, err)
	if connFailed {
		s.router.MarkDown(s.router.DatabaseIndex(id))
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == sqlstateReadOnlyTransaction {
		s.router.Reconnect(s.router.DatabaseIndex(id))
	}
	return mapped
}

// sqlstateReadOnlyTransaction is what a write gets on a standby or a
// read-only server.
const sqlstateReadOnlyTransaction = "25006"

// pool returns the pool of shard id's database, or shard_unavailable at
// once while the database is known to be down or unverified.
func (s *Store) pool(id coffer.ShardID) (*pgxpool.Pool, error) {
	return s.checkedPool(id, s.router.Available)
}

// writePool is pool for a write, which is refused also while the database
// lacks a required synchronous standby.
func (s *Store) writePool(id coffer.ShardID) (*pgxpool.Pool, error) {
	return s.checkedPool(id, s.router.Writable)
}

func (s *Store) checkedPool(id coffer.ShardID, check func(int) error) (*pgxpool.Pool, error) {
	if err := check(s.router.DatabaseIndex(id)); err != nil {
		return nil, &coffer.Error{Code: coffer.CodeUnavailable, Message: fmt.Sprintf("shard %d is unavailable", id), Err: err}
	}
	return s.router.Shard(id), nil
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
		case pg.Code[:2] == "08", pg.Code[:2] == "57":
			return unavailable("is unavailable"), true
		case pg.Code == "53300", pg.Code == sqlstateReadOnlyTransaction:
			return unavailable("is unavailable"), false
		case pg.Code[:2] == "22":
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

// playerTx is an open transaction on a player's shard, begun inside the
// first batch (saving a round trip), holding the player's balance lock.
type playerTx struct {
	conn    pgxConn
	shard   coffer.ShardID
	q       *queries
	ns      coffer.Namespace
	player  coffer.PlayerID
	emitter coffer.Emitter
	version int64
	now     time.Time
	// pos is the last position handed out in the player's order of trx
	// and ops; posLocked is what the lock read, so that finish knows
	// whether to store it.
	pos, posLocked int64
	ids            []int64
	idErr          error
	open           bool
	// ctx bounds every statement of the transaction: the request's, cut
	// to the store's Timeout.
	ctx context.Context
}

// pgxConn is what playerTx needs of a pooled connection.
type pgxConn interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rollback ends the transaction if it is open. It runs on its own short
// deadline, so that a canceled request still releases its lock.
func (t *playerTx) rollback() error {
	if !t.open {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	if err == nil {
		t.open = false
	}
	return err
}

// withPlayer runs fn in a transaction on the player's shard, retrying lost
// races up to RetriesMax times. fn gets the batch that begins the
// transaction and locks the player; it queues its own reads on it, runs it
// with t.start and queues writes with t.finish.
func (s *Store) withPlayer(ctx context.Context, ns coffer.Namespace, player coffer.PlayerID, fn func(t *playerTx) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	id := s.router.Map().ShardOf(player)
	pool, err := s.writePool(id)
	if err != nil {
		return err
	}
	for attempt := 0; attempt <= s.opts.RetriesMax; attempt++ {
		err = func() error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			t := &playerTx{conn: conn, shard: id, q: s.q(id), ns: ns, player: player, ctx: ctx}
			defer func() {
				if t.rollback() != nil {
					// The connection is in an unknown state: drop it
					// rather than hand it to the next request.
					_ = conn.Conn().Close(context.Background())
				}
				conn.Release()
			}()
			return fn(t)
		}()
		if !retryable(err) {
			break
		}
	}
	return s.fail(id, err)
}

// start queues BEGIN, the player lock and nIDs fresh ids in front of b and
// runs it: one round trip for the transaction's reads.
func (t *playerTx) start(b *pgx.Batch, nIDs int) error {
	head := &pgx.Batch{}
	head.Queue("BEGIN")
	head.Queue(t.q.lockPlayer, t.ns, t.player, nIDs).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&t.version, &t.now, &t.pos, &t.ids); err != nil {
			return err
		}
		t.posLocked = t.pos
		return nil
	})
	head.QueuedQueries = append(head.QueuedQueries, b.QueuedQueries...)
	t.open = true
	return t.conn.SendBatch(t.ctx, head).Close()
}

// nextPos hands out the next position in the player's order: every trx
// and op row takes one as it is queued, so the order is the order the
// write queues them in.
func (t *playerTx) nextPos() int64 {
	t.pos++
	return t.pos
}

// finish runs the writes in b, stores the last position handed out, and
// commits: the second round trip.
func (t *playerTx) finish(b *pgx.Batch) error {
	if t.pos != t.posLocked {
		b.Queue(t.q.setPos, t.ns, t.player, t.pos)
	}
	b.Queue("COMMIT")
	if err := t.conn.SendBatch(t.ctx, b).Close(); err != nil {
		return err
	}
	t.open = false
	return nil
}
