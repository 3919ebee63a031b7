package feed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// durable tells how far a primary's WAL would survive a failover:
// flushed by a synchronous standby or, on a server that waits for none
// and of which none is required, flushed locally. Logical decoding sends
// a transaction once it is flushed locally, before its synchronous
// standby has it (PostgreSQL 15 has no synchronized_standby_slots): the
// commit of a primary cut off from its standby would otherwise become an
// event, then vanish in the failover (pg_rewind), a phantom; and the
// slot's position, which Patroni copies to the standby, must not pass
// what the standby has. The server's own setting is not enough where a
// standby is required: a Patroni agent restarting on a primary whose
// standby took over empties synchronous_standby_names before it demotes
// the server, and the commits that waited for the standby complete
// there. A durable is used by its session's goroutine only.
type durable struct {
	// conn is an ordinary connection to the server the slot is on.
	conn *pgx.Conn
	// standby requires a synchronous standby's flush, whatever the
	// server's synchronous_standby_names.
	standby bool
	upTo    pglogrepl.LSN
	read    time.Time
}

// durableReadGap is the least time between two reads of the position:
// a session reads it at most 200 times a second, whatever its write
// rate, and holds an event back at most that long past it.
const durableReadGap = 5 * time.Millisecond

// durableUpTo is how far the WAL is durable: what a physical synchronous
// standby flushed (shard.StandbyFlushed: only one of them need have it,
// one synchronous standby, as Patroni's synchronous mode runs; a logical
// walsender picked as one, the relay's own or another consumer's, has
// what it confirmed, which no failover keeps), or, where $1 (a standby
// required) is false and the server waits for none, the local flush;
// and whether the relay's user may read the standbys' positions
// (pg_stat_replication hides them from others).
const durableUpTo = `WITH local AS (SELECT NOT $1::bool AND current_setting('synchronous_standby_names') = '' AS flush)
	SELECT (CASE WHEN local.flush THEN pg_current_wal_flush_lsn()
		ELSE COALESCE(` + shard.StandbyFlushed + `, '0/0') END)::text,
		local.flush OR pg_has_role('pg_read_all_stats', 'USAGE')
	FROM local`

// refresh reads the durable position, unless it was read less than
// durableReadGap ago.
func (d *durable) refresh(ctx context.Context) error {
	if time.Since(d.read) < durableReadGap {
		return nil
	}
	d.read = time.Now()
	var text string
	var readable bool
	if err := d.conn.QueryRow(ctx, durableUpTo, d.standby).Scan(&text, &readable); err != nil {
		return fmt.Errorf("durable position: %w", err)
	}
	if !readable {
		return &fatalError{errors.New("the relay's database user cannot read pg_stat_replication's positions, and the server has synchronous standbys: grant it pg_read_all_stats (docs/events.md)")}
	}
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		return err
	}
	d.upTo = max(d.upTo, lsn)
	return nil
}

// wait returns once the WAL up to end is durable, calling idle every
// interval while it waits (the replication connection's status must go
// on). Errors: the server cannot say (a fatalError when the relay's user
// may not read it), ctx ended.
func (d *durable) wait(ctx context.Context, end pglogrepl.LSN, interval time.Duration, idle func() error) error {
	last := time.Now()
	for {
		if err := d.refresh(ctx); err != nil {
			return err
		}
		if d.upTo >= end {
			return nil
		}
		if err := waitIdle(ctx, time.Until(d.read.Add(durableReadGap)), interval, &last, idle); err != nil {
			return err
		}
	}
}

// waitIdle waits for wait, after a call of idle if interval has passed
// since last (then set): a session that waits keeps its replication
// connection's status going. Errors: idle's, ctx ended.
func waitIdle(ctx context.Context, wait, interval time.Duration, last *time.Time, idle func() error) error {
	if time.Since(*last) >= interval {
		if err := idle(); err != nil {
			return err
		}
		*last = time.Now()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}
