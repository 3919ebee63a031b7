package shard

import (
	"context"
	"fmt"
	"net"
	"slices"
)

// Primary is what a probe found of the server a database's connections
// reach: for a database with several hosts, whichever accepts writes.
type Primary struct {
	// Host is the configured address ("host:port") the connections
	// reach, or the remote address when no configured one matches.
	Host string
	// SynchronousStandbys counts the physical standbys streaming from it
	// as synchronous standbys (sync_state sync or quorum, caught up).
	SynchronousStandbys int
	// SynchronousCommit is the setting for coffer's sessions.
	SynchronousCommit string
}

// Synchronous tells whether a commit coffer acknowledges is on a standby
// too, so that it survives a failover: a standby is in sync, and commits
// wait for it (synchronous_commit on, remote_apply or remote_write; the
// last survives the loss of the primary, not of both servers at once).
func (p Primary) Synchronous() bool {
	return p.SynchronousStandbys > 0 && slices.Contains([]string{"on", "remote_apply", "remote_write"}, p.SynchronousCommit)
}

// StandbyReplication is pg_stat_replication without its logical
// walsenders (the change feed's relay, a subscription): only
// a physical standby can take over from the primary. A logical walsender
// is a candidate synchronous standby all the same: under
// synchronous_standby_names '*', which Patroni's synchronous_mode_strict
// sets while it has no replica to name (and a Patroni agent restarted on
// a primary sets again), it is picked once no physical standby streams,
// and the commits it confirms are on no server a failover promotes.
const StandbyReplication = `(SELECT * FROM pg_stat_replication r WHERE NOT EXISTS
	(SELECT FROM pg_replication_slots s WHERE s.active_pid = r.pid AND s.slot_type = 'logical'))`

// StarBefore and CommitOnStandby, sent before and after a COMMIT in the
// same round trip, read whether the commit may have returned without a
// physical standby (synchronous_standby_names empty or holding '*' at
// either), and after it the WAL position to wait for (Flushed) when it
// may. Empty, no standby is waited for: a Patroni agent restarting on a
// primary whose standby took over empties it before it demotes the
// server, and the COMMITs waiting there complete (feed/durable.go). A
// logical walsender confirms what it received or what its
// subscriber applied (a shard move's subscription does; other consumers,
// such as another change-data-capture tool, may), whatever any physical
// standby has. It is a candidate synchronous standby only where
// synchronous_standby_names matches its name: under '*' (Patroni's
// synchronous_mode_strict sets it while it has no replica to name) it is
// picked once it comes before the physical standby in the server's array
// or once that one stops, and a probe notices only later. Read on both
// sides because a backend takes a new setting between two messages: one
// that went from '*' to a name while the COMMIT waited is '*' before it.
// Reading the walsenders costs about 70 µs of the server's CPU (measured
// on PostgreSQL 15), more than the rest of a lone write's second round
// trip, so it is left to the rare server under '*'. The local flush
// position after the COMMIT is past the commit's record (flushed before
// the COMMIT waited) and is never past what a walsender may have sent.
const (
	StarBefore      = `SELECT ` + star
	CommitOnStandby = `SELECT pg_current_wal_flush_lsn()::text, ` + star
	star            = `(` + namesStar + ` OR ` + namesEmpty + `)`
	namesStar       = `position('*' IN current_setting('synchronous_standby_names')) > 0`
	namesEmpty      = `current_setting('synchronous_standby_names') = ''`
)

// FlushedNames reads the local flush position and whether
// synchronous_standby_names holds '*' and whether it is empty, apart:
// the shard mover waits for a physical standby under '*' whatever the
// database, and under an empty setting only where the database has
// several hosts (shard/move, standbyHas).
const FlushedNames = `SELECT pg_current_wal_flush_lsn()::text, ` + namesStar + `, ` + namesEmpty

// StandbyFlushed is how far a physical synchronous standby (one a
// failover under synchronous replication promotes) has flushed the WAL,
// NULL without one: the standbys the server reports as synchronous, and
// under '*' every physical one, since a physical standby behind a
// logical walsender in the server's array is a candidate there that the
// server reports as "potential". An acknowledged write (Flushed) and the
// change feed's published events both wait for it.
const StandbyFlushed = `(SELECT max(flush_lsn) FROM ` + StandbyReplication + ` standbys
	WHERE sync_state IN ('sync', 'quorum') OR sync_priority > 0 AND ` + namesStar + `)`

// Flushed reads whether a physical synchronous standby has flushed the
// WAL up to $1 (StandbyFlushed).
const Flushed = `SELECT COALESCE($1::pg_lsn <= ` + StandbyFlushed + `, false)`

// probeSQL reads, on the server a pooled connection reaches, whether it is
// a standby or read-only, and its synchronous standbys. Without
// pg_read_all_stats (pg_monitor) a role sees the rows of
// pg_stat_replication but not their state: hidden counts those.
const probeSQL = `SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on',
	current_setting('synchronous_commit'),
	count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
	count(*) FILTER (WHERE state IS NULL)
FROM ` + StandbyReplication + ` standbys`

// RequireSynchronousStandby makes Writable refuse writes to a Guarded
// database whose last probe found no synchronous standby in sync
// (require_synchronous_standby). Call it before serving.
func (r *Router) RequireSynchronousStandby() { r.requireSync = true }

// RequiresStandby tells whether a write to database i is acknowledged
// only once a physical synchronous standby has it (CommitOnStandby):
// it is Guarded and a synchronous standby is required.
func (r *Router) RequiresStandby(i int) bool { return r.requireSync && r.Guarded(i) }

// Guarded tells whether the probe of database i checks its synchronous
// standby: it has several hosts, so coffer follows a failover.
func (r *Router) Guarded(i int) bool { return len(r.config.databases[i].Config.Hosts) > 1 }

// Probe checks database i through its pool: it reaches a server, that
// server accepts writes, and, when Guarded, it has a synchronous standby
// in sync. It records the outcome: a failed connection marks the database
// down; a connection that reached a standby or a read-only server makes
// the pool reconnect; a missing synchronous standby, when required,
// makes Writable refuse writes until a probe finds one again.
func (r *Router) Probe(ctx context.Context, i int) (Primary, error) {
	conn, err := r.pools[i].Acquire(ctx)
	if err != nil {
		r.MarkDown(i)
		return Primary{}, err
	}
	defer conn.Release()
	var p Primary
	var recovery, readOnly bool
	var hidden int
	if err := conn.QueryRow(ctx, probeSQL).Scan(&recovery, &readOnly, &p.SynchronousCommit, &p.SynchronousStandbys, &hidden); err != nil {
		r.MarkDown(i)
		return p, err
	}
	r.MarkUp(i)
	p.Host = r.hostOf(i, conn.Conn().PgConn().Conn().RemoteAddr())
	if recovery || readOnly {
		r.Reconnect(i)
		return p, fmt.Errorf("%s: connected to %s, which does not accept writes (a standby, or read-only); reconnecting", r.config.databases[i].Label(), p.Host)
	}
	if !r.Guarded(i) {
		return p, nil
	}
	r.dbs[i].unsynced.Store(r.RequiresStandby(i) && !p.Synchronous())
	if hidden > 0 {
		return p, fmt.Errorf("%s: cannot see the state of the standbys of %s: grant pg_monitor to user %q", r.config.databases[i].Label(), p.Host, r.config.databases[i].Config.User)
	}
	return p, nil
}

// Reconnect closes database i's connections (those in use when they are
// released), so that the next request connects anew and finds the server
// that accepts writes now. Call it when a connection turns out to reach a
// standby.
func (r *Router) Reconnect(i int) { r.pools[i].Reset() }

// hostOf names the configured address of database i that addr is.
func (r *Router) hostOf(i int, addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	for _, a := range r.config.databases[i].Config.addresses() {
		host, port, err := net.SplitHostPort(a)
		if err != nil || port != fmt.Sprint(tcp.Port) {
			continue
		}
		if ip := net.ParseIP(host); ip != nil {
			if ip.Equal(tcp.IP) {
				return a
			}
			continue
		}
		if ips, err := net.LookupIP(host); err == nil && slices.ContainsFunc(ips, tcp.IP.Equal) {
			return a
		}
	}
	return tcp.String()
}
