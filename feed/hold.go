package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Source is a database a shard may have moved from: how to reach it, and
// the slot its relay reads.
type Source struct {
	// ConnString is the database's libpq connection string: under
	// Patroni its hosts, so that it reaches the primary, where the
	// permanent slot is.
	ConnString string
	Slot       string
}

// arrival is the move that brought a shard to the relay's database, as
// the mover recorded it there (shard_arrival): the shard's events here
// wait until the slot of Source's relay has confirmed Cut, past every
// event of the shard there.
type arrival struct {
	shard  coffer.ShardID
	epoch  int64
	source string
	cut    pglogrepl.LSN
	// passed tells that the source's relay passed the cut-over, or that
	// it has nothing to wait for: the shard's events here go on.
	passed bool
	// heldSince is when the relay began holding for it, over sessions.
	heldSince time.Time
}

// holdPoll paces the reads of a source's slot while the relay holds;
// holdReadTimeout bounds each read of a hold.
const (
	holdPoll        = 50 * time.Millisecond
	holdReadTimeout = 5 * time.Second
)

// arrivalOf is the move that brought shard here before commit (the WAL
// position of a transaction that wrote it): the one opened last before
// it. A database migrated before shard_arrival records none.
const arrivalOf = `SELECT epoch, source, cut_lsn::text FROM shard_arrival
	WHERE shard_id = $1 AND open_lsn <= $2::pg_lsn ORDER BY open_lsn DESC LIMIT 1`

// sourcePassed tells of a source's slot whether it exists, whether
// PostgreSQL invalidated it, and whether it confirmed $2.
const sourcePassed = `SELECT COALESCE(wal_status, '') = 'lost', COALESCE(confirmed_flush_lsn >= $2::pg_lsn, false)
	FROM pg_replication_slots WHERE slot_name = $1`

// holdMoved returns once the events of t may be delivered after those a
// shard's old home had: for each shard t wrote that moved here, once the
// relay of the database it came from has confirmed its slot past the
// cut-over (every event of the shard there is delivered). Until then
// the whole stream waits: the slot gives the transactions in commit
// order. It calls idle every StatusInterval meanwhile. What it learns of
// a stay of a shard here (a relation) it keeps, so that it costs a query
// once per stay. Errors: a database cannot be read (the session ends,
// the next one holds again), ctx ended.
func (r *Relay) holdMoved(ctx context.Context, conn *pgx.Conn, dec *decoder, t decoded, idle func() error) error {
	if r.arrivals == nil {
		r.arrivals = map[uint32]*arrival{}
	}
	for _, rel := range t.txn.tables {
		a, known := r.arrivals[rel]
		if !known {
			var err error
			if a, err = readArrival(ctx, conn, dec.relations[rel].shard, t.commit); err != nil {
				return err
			}
			r.arrivals[rel] = a
		}
		if a == nil || a.passed {
			continue
		}
		if err := r.awaitSource(ctx, a, idle); err != nil {
			return err
		}
		a.passed = true
	}
	return nil
}

// readArrival reads the move that brought shard here before commit, nil
// if none did (the shard is here since the config placed it).
func readArrival(ctx context.Context, conn *pgx.Conn, shard coffer.ShardID, commit pglogrepl.LSN) (*arrival, error) {
	qctx, cancel := context.WithTimeout(ctx, holdReadTimeout)
	defer cancel()
	a := &arrival{shard: shard}
	var cut string
	err := conn.QueryRow(qctx, arrivalOf, shard, commit.String()).Scan(&a.epoch, &a.source, &cut)
	if errors.Is(err, pgx.ErrNoRows) || sqlState(err) == undefinedTable {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the moves that brought shard %d here: %w", shard, err)
	}
	if a.cut, err = pglogrepl.ParseLSN(cut); err != nil {
		return nil, err
	}
	return a, nil
}

// awaitSource waits until the slot of a's source has confirmed the
// cut-over, reporting the hold (log, Observer.Held). A source the relay
// does not know (left the config), or whose slot is missing (the feed
// never ran there, it was dropped) or lost, has nothing to wait for: it
// says so once.
func (r *Relay) awaitSource(ctx context.Context, a *arrival, idle func() error) error {
	src, ok := r.Sources[a.source]
	if !ok {
		r.Logger.Warn("feed: a shard came from a database the config does not list; its events there are not waited for",
			"database", r.Database, "shard", a.shard, "epoch", a.epoch, "source", a.source)
		return nil
	}
	conn, err := pgx.Connect(ctx, src.ConnString)
	if err != nil {
		return fmt.Errorf("the database shard %d came from, %s: %w", a.shard, a.source, err)
	}
	defer conn.Close(context.Background())
	last := time.Now()
	for {
		qctx, cancel := context.WithTimeout(ctx, holdReadTimeout)
		var lost, passed bool
		err := conn.QueryRow(qctx, sourcePassed, src.Slot, a.cut.String()).Scan(&lost, &passed)
		cancel()
		switch {
		case errors.Is(err, pgx.ErrNoRows), lost:
			r.Logger.Warn("feed: the slot of the database a shard came from is missing or lost; its events there are not waited for",
				"database", r.Database, "shard", a.shard, "epoch", a.epoch, "source", a.source, "slot", src.Slot, "lost", lost)
			r.released(a)
			return nil
		case err != nil:
			return fmt.Errorf("slot %s of %s, which shard %d came from: %w", src.Slot, a.source, a.shard, err)
		case passed:
			r.released(a)
			return nil
		}
		if a.heldSince.IsZero() {
			a.heldSince = time.Now()
			r.Logger.Info("feed: holding the events until the feed of the database a shard came from has passed its cut-over",
				"database", r.Database, "shard", a.shard, "epoch", a.epoch, "source", a.source, "slot", src.Slot, "cut_lsn", a.cut)
		}
		if r.Observer != nil {
			r.Observer.Held(r.Database, time.Since(a.heldSince))
		}
		if err := waitIdle(ctx, holdPoll, r.StatusInterval, &last, idle); err != nil {
			return err
		}
	}
}

// released reports the end of a hold for a, if it held.
func (r *Relay) released(a *arrival) {
	if a.heldSince.IsZero() {
		return
	}
	r.Logger.Info("feed: released: the feed of the database a shard came from has passed its cut-over",
		"database", r.Database, "shard", a.shard, "epoch", a.epoch, "source", a.source, "held", time.Since(a.heldSince))
	if r.Observer != nil {
		r.Observer.Held(r.Database, 0)
	}
}
