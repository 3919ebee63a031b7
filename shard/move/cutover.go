package move

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cut fences the source's copy, in one transaction: it takes the shard's
// tables (waiting for the writes in flight, holding new ones: the pause
// begins), renames them and the shard's sequences (moved), so that no
// statement, of any instance, whatever its config, finds them again,
// records that the source no longer holds the shard and that the move is
// cut. A try that cannot take the tables within LockTimeout lets go,
// and the shard's writes run again, until the next.
func (s *session) cut(ctx context.Context) error {
	timeout := s.m.LockTimeout
	if timeout == 0 {
		timeout = time.Second
	}
	var list []string
	for _, t := range s.tables {
		list = append(list, ident(t))
	}
	s.mv.State = shard.MoveCut
	for try := 1; ; try++ {
		began := time.Now()
		err := pgx.BeginFunc(ctx, s.src, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = "+strconv.FormatInt(timeout.Milliseconds(), 10)); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(list, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
			for _, t := range s.tables {
				if _, err := tx.Exec(ctx, "ALTER TABLE "+ident(t)+" RENAME TO "+ident(moved(t))); err != nil {
					return err
				}
			}
			for _, q := range s.sequences {
				if _, err := tx.Exec(ctx, "ALTER SEQUENCE "+ident(q)+" RENAME TO "+ident(moved(q))); err != nil {
					return err
				}
			}
			if err := s.m.Engine.SetShard(ctx, tx, s.mv.Shard, false); err != nil {
				return err
			}
			return s.record(ctx, tx)
		})
		if err == nil {
			s.cutAt = began
			break
		}
		var pg *pgconn.PgError
		if try == cutTriesMax || !errors.As(err, &pg) || pg.Code != "55P03" && pg.Code != "40P01" {
			s.mv.State = shard.MoveCopying
			return err
		}
		s.m.progress("shard %d: could not take its tables within %s (try %d of %d): long transactions on them?", s.mv.Shard, timeout, try, cutTriesMax)
		if err := sleep(ctx, time.Duration(try)*100*time.Millisecond); err != nil {
			s.mv.State = shard.MoveCopying
			return err
		}
	}
	if err := s.src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s.cutLSN); err != nil {
		return err
	}
	return s.record(ctx, s.dst)
}

// open makes the target take the shard's writes once it has applied
// everything the source wrote before the cut-over: its sequences set past
// the source's, its fences dropped, the move recorded done, in one
// transaction, which ends the pause. Before it, a transaction on the
// target takes the snapshot verify reads the copy in.
func (s *session) open(ctx context.Context) error {
	if s.cutLSN == "" {
		// The cut-over was an earlier run's: what the source wrote is all
		// before its WAL position now, and the pause began at the cut.
		var sinceS float64
		if err := s.src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, extract(epoch FROM clock_timestamp() - updated_at)::float8 FROM shard_move WHERE shard_id = $1",
			s.mv.Shard).Scan(&s.cutLSN, &sinceS); err != nil {
			return err
		}
		s.cutAt = time.Now().Add(-time.Duration(sinceS * float64(time.Second)))
	}
	if err := s.standbyHas(ctx, s.src, s.mv.Source); err != nil {
		return fmt.Errorf("the cut-over: %w", err)
	}
	if err := s.caughtUp(ctx, s.cutLSN); errors.As(err, new(*slotGone)) {
		err = s.recopy(ctx, err)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	values := make([]int64, len(s.sequences))
	for i, q := range s.sequences {
		// Past every id the source handed out, cached ones included.
		if err := s.src.QueryRow(ctx, "SELECT last_value + (SELECT cache_size FROM pg_sequences WHERE schemaname = 'public' AND sequencename = $1) FROM "+
			ident(moved(q)), moved(q)).Scan(&values[i]); err != nil {
			return err
		}
	}
	if err := s.takeSnapshot(ctx); err != nil {
		return err
	}
	s.mv.State = shard.MoveDone
	err := pgx.BeginFunc(ctx, s.dst, func(tx pgx.Tx) error {
		for i, q := range s.sequences {
			if _, err := tx.Exec(ctx, "SELECT setval($1::regclass, $2)", ident(q), values[i]); err != nil {
				return err
			}
		}
		for _, t := range s.tables {
			if _, err := tx.Exec(ctx, "DROP TRIGGER IF EXISTS shard_move_fence ON "+ident(t)); err != nil {
				return err
			}
		}
		if err := s.publishHere(ctx, tx); err != nil {
			return err
		}
		if err := s.arrive(ctx, tx); err != nil {
			return err
		}
		s.mv.Pause = time.Since(s.cutAt)
		return s.record(ctx, tx)
	})
	if err != nil {
		s.mv.State, s.mv.Pause = shard.MoveCut, 0
		return err
	}
	if err := s.standbyHas(ctx, s.dst, s.mv.Target); err != nil {
		return fmt.Errorf("the opening: %w", err)
	}
	return s.record(ctx, s.src)
}

// standbyHas waits, within CatchUpTimeout, until a physical standby of
// conn's server (database db) has flushed what it flushed so far, where
// synchronous_standby_names holds '*', or is empty and db has several
// hosts: there a logical walsender, this
// move's subscription among them, may have released the mover's COMMIT
// though no physical standby has it (ADR 0009), and a failover would
// then undo the cut-over, or the opening, on one side only.
func (s *session) standbyHas(ctx context.Context, conn *pgx.Conn, db string) error {
	var upTo string
	var star, empty bool
	if err := conn.QueryRow(ctx, shard.FlushedNames).Scan(&upTo, &star, &empty); err != nil {
		return err
	}
	// Empty is a server without synchronous standbys, unless it has
	// several hosts (a failover to lose the commit to).
	if i := s.m.Router.Map().Index(db); !star && !(empty && i >= 0 && s.m.Router.Guarded(i)) {
		return nil
	}
	timeout := s.m.CatchUpTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	for deadline := time.Now().Add(timeout); ; {
		var flushed bool
		if err := conn.QueryRow(ctx, shard.Flushed, upTo).Scan(&flushed); err != nil || flushed {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no physical standby of %s has flushed its WAL up to %s within %s: run again to carry on", db, upTo, timeout)
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// arrive records on the target, in the transaction that opens it, where
// the shard came from and the WAL positions of the cut-over on the source
// and of the opening here (shard_arrival): the change feed's relay of the
// target holds the shard's events until the source's relay has passed
// the cut-over, so that a player's events keep their order
// (docs/events.md#shard-moves).
func (s *session) arrive(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `INSERT INTO shard_arrival (shard_id, epoch, source, cut_lsn, open_lsn)
		VALUES ($1, $2, $3, $4::pg_lsn, pg_current_wal_lsn())`, s.mv.Shard, s.mv.Epoch, s.mv.Source, s.cutLSN)
	return err
}

// recopy copies the source's old copy of the shard to the target anew,
// after the source lost the move's slot past the cut-over (gone, a
// failover: slots do not follow it), and with it what the subscription
// had not applied yet. Fenced, the old copy changes no more, and the
// synchronous standby that took over has it as the cut left it: the
// whole of it, copied in one transaction on the target, is what the
// subscription would have brought. The rows pass the target's fences as
// the subscription's do (session_replication_role replica), and carry a
// replication origin as the subscription's do: the change feed
// publishes the target's tables of the shard from its prepare, and
// skips what has an origin (those rows were events on the source). A
// mover stopped midway does it again from the start.
func (s *session) recopy(ctx context.Context, gone error) error {
	s.m.progress("shard %d: %v after the cut-over (a failover?): copying the old copy, fenced, anew", s.mv.Shard, gone)
	if _, err := s.dropSubscription(ctx); err != nil {
		return err
	}
	var list []string
	for _, t := range s.tables {
		list = append(list, ident(t))
	}
	origin := s.name() + "_recopy"
	if _, err := s.dst.Exec(ctx, `SELECT pg_replication_origin_create($1) WHERE NOT EXISTS (SELECT FROM pg_replication_origin WHERE roname = $1)`, origin); err != nil {
		return err
	}
	if _, err := s.dst.Exec(ctx, "SELECT pg_replication_origin_session_setup($1)", origin); err != nil {
		return err
	}
	defer func() {
		_, _ = s.dst.Exec(ctx, "SELECT pg_replication_origin_session_reset()")
		_, _ = s.dst.Exec(ctx, "SELECT pg_replication_origin_drop($1)", origin)
	}()
	return pgx.BeginFunc(ctx, s.dst, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(list, ", ")); err != nil {
			return err
		}
		for _, t := range s.tables {
			if err := copyTable(ctx, s.src, tx.Conn(), ident(moved(t)), ident(t)); err != nil {
				return fmt.Errorf("copy %s: %w", t, err)
			}
		}
		return nil
	})
}

// copyTable copies the rows of table from on src into table to on dst,
// streamed through the mover.
func copyTable(ctx context.Context, src, dst *pgx.Conn, from, to string) error {
	r, w := io.Pipe()
	sent := make(chan error, 1)
	go func() {
		_, err := src.PgConn().CopyTo(ctx, w, "COPY "+from+" TO STDOUT (FORMAT binary)")
		w.CloseWithError(err)
		sent <- err
	}()
	_, err := dst.PgConn().CopyFrom(ctx, r, "COPY "+to+" FROM STDIN (FORMAT binary)")
	r.CloseWithError(errors.New("the copy into the target stopped"))
	return errors.Join(<-sent, err)
}

// publishHere adds the shard's tables to the target's publications that
// publish the same tables of other shards (the change feed's,
// coffer_feed: its trx_N and op_N), in the transaction that opens the
// target, so that a relay reading the target publishes the shard's
// writes from the first (the rows the copy wrote carry a replication
// origin, which the relay skips). The moves' own publications are not
// the target's business.
func (s *session) publishHere(ctx context.Context, tx pgx.Tx) error {
	rows, _ := tx.Query(ctx, `SELECT DISTINCT pubname, regexp_replace(tablename, '_[0-9]+$', '') FROM pg_publication_tables
		WHERE schemaname = 'public' AND tablename ~ '^[a-z][a-z_]*_[0-9]+$' AND pubname NOT LIKE 'coffer\_move\_%'`)
	type kind struct{ publication, prefix string }
	var kinds []kind
	var k kind
	if _, err := pgx.ForEachRow(rows, []any{&k.publication, &k.prefix}, func() error {
		kinds = append(kinds, k)
		return nil
	}); err != nil {
		return err
	}
	for _, k := range kinds {
		table := k.prefix + "_" + strconv.Itoa(int(s.mv.Shard))
		var member bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = $1 AND schemaname = 'public' AND tablename = $2)",
			k.publication, table).Scan(&member); err != nil {
			return err
		}
		if member || !slices.Contains(s.tables, table) {
			continue
		}
		if _, err := tx.Exec(ctx, "ALTER PUBLICATION "+ident(k.publication)+" ADD TABLE "+ident(table)); err != nil {
			return fmt.Errorf("publication %s: %w", k.publication, err)
		}
	}
	return nil
}

// takeSnapshot begins, on a connection of its own, a transaction on the
// target that sees what the target holds now: the copy as the cut-over
// left it, before any write of its own.
func (s *session) takeSnapshot(ctx context.Context) error {
	conn, err := s.m.dial(ctx, s.mv.Target)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT 1") // the snapshot is taken at the first statement
	}
	if err != nil {
		_ = conn.Close(ctx)
		return err
	}
	s.snapshot = tx
	return nil
}

// unsubscribe drops the subscription, and with it its slot on the
// source, and records the move done on the source too.
func (s *session) unsubscribe(ctx context.Context) error {
	if dropped, err := s.dropSubscription(ctx); err != nil || !dropped {
		return err
	}
	return s.record(ctx, s.src)
}

// dropSubscription drops the move's subscription on the target, if
// there is one (then it tells so), and with it its slots on the source.
// A slot the source lost (to a failover: slots do not follow it) is
// first detached from the subscription, else DROP SUBSCRIPTION fails for
// want of it.
func (s *session) dropSubscription(ctx context.Context) (bool, error) {
	if ok, err := s.exists(ctx, s.dst, subscriptionSQL); err != nil || !ok {
		return false, err
	}
	slot, err := s.exists(ctx, s.src, slotSQL)
	if err != nil {
		return false, err
	}
	if !slot {
		for _, sql := range []string{"ALTER SUBSCRIPTION %s DISABLE", "ALTER SUBSCRIPTION %s SET (slot_name = NONE)"} {
			if _, err := s.dst.Exec(ctx, fmt.Sprintf(sql, ident(s.name()))); err != nil {
				return false, err
			}
		}
	}
	_, err = s.dst.Exec(ctx, "DROP SUBSCRIPTION "+ident(s.name()))
	return err == nil, err
}

// Checksum is one table of the copy as verify found it on both sides.
type Checksum struct {
	Table string
	// Rows and Sum are the row count and the sum of the rows' hashes
	// (hashtextextended of each row as text): the same on both sides
	// whatever the order of the rows.
	Rows int64
	Sum  string
}

const checksumSQL = "SELECT count(*), COALESCE(sum(hashtextextended(t::text, 0)), 0)::text FROM %s t"

// verify compares each table of the copy, in the snapshot the cut-over
// left, with the old copy: row counts and checksums. It records the move
// verified when they agree.
func (s *session) verify(ctx context.Context) ([]Checksum, error) {
	defer func() {
		_ = s.snapshot.Rollback(ctx)
	}()
	var sums []Checksum
	for _, t := range s.tables {
		var dst, src Checksum
		dst.Table, src.Table = t, t
		if err := s.snapshot.QueryRow(ctx, fmt.Sprintf(checksumSQL, ident(t))).Scan(&dst.Rows, &dst.Sum); err != nil {
			return sums, err
		}
		if err := s.src.QueryRow(ctx, fmt.Sprintf(checksumSQL, ident(moved(t)))).Scan(&src.Rows, &src.Sum); err != nil {
			return sums, err
		}
		if dst != src {
			return sums, fmt.Errorf("table %s differs: %d rows (checksum %s) on %s, %d rows (checksum %s) on %s; the old copy is kept",
				t, src.Rows, src.Sum, s.mv.Source, dst.Rows, dst.Sum, s.mv.Target)
		}
		sums = append(sums, dst)
	}
	s.mv.State = shard.MoveVerified
	return sums, s.record(ctx, s.src, s.dst)
}

// abort drops what the move made: on the target, the subscription (and
// with it its slots on the source) and the shard's tables, no longer
// recorded among its shards; on the source, the publication and the
// slot. It records the move aborted.
func (s *session) abort(ctx context.Context) error {
	if _, err := s.dropSubscription(ctx); err != nil {
		return err
	}
	if err := s.dropCopy(ctx, s.dst, func(name string) string { return name }); err != nil {
		return err
	}
	if err := s.m.Engine.SetShard(ctx, s.dst, s.mv.Shard, false); err != nil {
		return err
	}
	if err := s.unpublish(ctx); err != nil {
		return err
	}
	s.mv.State = shard.MoveAborted
	if err := s.record(ctx, s.src, s.dst); err != nil {
		return err
	}
	s.m.progress("shard %d: move to %s aborted; it stays on %s", s.mv.Shard, s.mv.Target, s.mv.Source)
	return nil
}

// unpublish drops the publication and the slot on the source, waiting
// for the slot's last reader (a subscription just dropped) to let go.
func (s *session) unpublish(ctx context.Context) error {
	if _, err := s.src.Exec(ctx, "DROP PUBLICATION IF EXISTS "+ident(s.name())); err != nil {
		return err
	}
	for try := 0; ; try++ {
		_, err := s.src.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", s.name())
		var pg *pgconn.PgError
		if err == nil || try == 100 || !errors.As(err, &pg) || pg.Code != "55006" { // object_in_use: still read
			return err
		}
		if err := sleep(ctx, 10*poll); err != nil {
			return err
		}
	}
}

// cleanup drops the old copy on the source, the publication and any
// slot left, and records the move cleaned.
func (s *session) cleanup(ctx context.Context) error {
	if err := s.unsubscribe(ctx); err != nil {
		return err
	}
	if err := s.unpublish(ctx); err != nil {
		return err
	}
	if err := s.dropCopy(ctx, s.src, moved); err != nil {
		return err
	}
	s.mv.State = shard.MoveCleaned
	if err := s.record(ctx, s.src, s.dst); err != nil {
		return err
	}
	s.m.progress("shard %d: the old copy on %s is dropped", s.mv.Shard, s.mv.Source)
	return nil
}
