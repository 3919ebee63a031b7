package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Observer is told what the relays do, for metrics. Its methods are
// called from several goroutines.
type Observer interface {
	// Delivered counts an event delivered by sink: duplicate tells that
	// the receiving end had it already; lag is from its commit.
	Delivered(database, sink string, duplicate bool, lag time.Duration)
	// Slot reports the state of a relay's slot.
	Slot(database string, st SlotState)
	// SessionEnded counts the end of a relay's session; err is its cause.
	SessionEnded(database string, err error)
	// Held reports how long a relay's stream has been held so far for
	// the old home of a shard that moved to its database; 0 once it goes
	// on.
	Held(database string, held time.Duration)
}

// Relay reads one database's slot and delivers the events of what it
// decodes to its sinks, in commit order. It confirms the slot's position
// only once every sink delivered every event up to it, so that a relay
// restarted or killed delivers again what may not have been delivered:
// at least once, and the event ids make the duplicates recognisable.
//
// A Relay runs sessions: one replication connection and one delivery per
// sink. Any failure ends the session, and the next, after a pause,
// starts again from the slot's confirmed position.
type Relay struct {
	// Database names the database in logs and metrics.
	Database string
	// ConnString is the database's libpq connection string; its user
	// needs the REPLICATION attribute (or to be a superuser) and to own
	// the shard tables, or the publication made beforehand.
	ConnString         string
	Catalog            *coffer.Catalog
	Slot, Publication  string
	Sinks              []Sink
	Logger             *slog.Logger
	Observer           Observer
	StatusInterval     time.Duration
	PauseMin, PauseMax time.Duration
	SlotCheckInterval  time.Duration
	// RequireStandby publishes a transaction only once a synchronous
	// standby has flushed it, even while the server waits for none (a
	// standby gone, a Patroni agent demoting it): set it where coffer
	// serve's require_synchronous_standby is.
	RequireStandby bool
	// Sources are the config's databases by name (shard.Database.Name):
	// where a shard that moved here may have come from. The events of a
	// shard that moved here wait for its old home's relay to pass the
	// cut-over (holdMoved); a source not listed has nothing to wait for.
	Sources map[string]Source

	// arrivals are, by relation (a trx_N table), the move that brought
	// the shard of its stay here, nil for a stay no move began. They
	// outlive sessions: Run's goroutine alone uses them.
	arrivals map[uint32]*arrival
}

// Run runs sessions until ctx ends; it returns nil then. It returns an
// error only for what a new session cannot mend: the slot invalidated,
// wal_level not logical.
func (r *Relay) Run(ctx context.Context) error {
	pause := r.PauseMin
	go r.watchSlot(ctx)
	for ctx.Err() == nil {
		start := time.Now()
		err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if r.Observer != nil {
			r.Observer.SessionEnded(r.Database, err)
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return err
		}
		if time.Since(start) > r.PauseMax {
			pause = r.PauseMin
		}
		if sqlState(err) == objectInUse {
			r.Logger.Info("feed: the slot is read by another relay; waiting", "database", r.Database, "slot", r.Slot)
			pause = r.PauseMax
		} else {
			r.Logger.Warn("feed: session ended", "database", r.Database, "err", err, "retry_in", pause)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, r.PauseMax)
	}
	return nil
}

// fatalError is a failure no new session mends.
type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }
func (f *fatalError) Unwrap() error { return f.err }

// watchSlot reports the slot's state every SlotCheckInterval, on a
// connection of its own: the WAL the slot retains grows while no session
// runs (the broker down), which is when it matters.
func (r *Relay) watchSlot(ctx context.Context) {
	if r.Observer == nil {
		return
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	for {
		if conn == nil || conn.IsClosed() {
			conn, _ = pgx.Connect(ctx, r.ConnString)
		}
		if conn != nil {
			qctx, cancel := context.WithTimeout(ctx, r.SlotCheckInterval)
			st, found, err := slotState(qctx, conn, r.Slot)
			cancel()
			if err != nil {
				_ = conn.Close(context.Background())
				conn = nil
			} else if found {
				r.Observer.Slot(r.Database, st)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.SlotCheckInterval):
		}
	}
}

// session prepares the database, opens a delivery per sink and streams
// the slot into them until something fails or ctx ends.
func (r *Relay) session(ctx context.Context) error {
	if err := r.Prepare(ctx); err != nil {
		return err
	}
	var deliveries []delivery
	defer func() {
		for _, d := range deliveries {
			d.close()
		}
	}()
	for _, s := range r.Sinks {
		d, err := s.open(ctx, r.Database)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
		deliveries = append(deliveries, d)
	}
	plain, err := pgx.Connect(ctx, r.ConnString)
	if err != nil {
		return err
	}
	defer plain.Close(context.Background())
	conn, err := r.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := sameServer(ctx, plain, conn); err != nil {
		return err
	}
	err = pglogrepl.StartReplication(ctx, conn, r.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.Publication + "'"}})
	if sqlState(err) == objectNotInPrerequisiteState {
		return &fatalError{fmt.Errorf("slot %s can no longer give its changes (invalidated past max_slot_wal_keep_size?): %w; see docs/events.md", r.Slot, err)}
	}
	if err != nil {
		return err
	}
	return r.stream(ctx, conn, plain, deliveries)
}

// Prepare makes the database's publication and slot, if missing: the
// feed holds every trx committed after. Run prepares at every session;
// calling it before lets writes that follow be sure to be in the feed.
// Errors: the database cannot be reached, or cannot be decoded
// (wal_level).
func (r *Relay) Prepare(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.ConnString)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return prepare(ctx, conn, r.Publication, r.Slot)
}

// serverIdentity names the server a connection reached: a primary and
// its standby, a copy, share the rest of their identity.
const serverIdentity = "SELECT pg_postmaster_start_time()::text || ' ' || inet_server_port()"

// sameServer checks that the session's two connections reached one
// server: with several hosts, in a failover, two may accept writes for a
// while, and the durable position must be that of the server whose WAL
// the slot decodes.
func sameServer(ctx context.Context, plain *pgx.Conn, repl *pgconn.PgConn) error {
	var a string
	if err := plain.QueryRow(ctx, serverIdentity).Scan(&a); err != nil {
		return err
	}
	res, err := repl.Exec(ctx, serverIdentity).ReadAll()
	if err != nil {
		return err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != a {
		return errors.New("the relay's connections reached two servers (a failover under way?)")
	}
	return nil
}

// replicationConn opens a logical replication connection. Times come in
// UTC and ISO: the text pgoutput sends is the session's.
func (r *Relay) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(r.ConnString)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "coffer-feed"
	cfg.RuntimeParams["timezone"] = "UTC"
	cfg.RuntimeParams["datestyle"] = "ISO"
	return pgconn.ConnectConfig(ctx, cfg)
}

// statusGapMin is the least time between two status updates that only
// move the confirmed position.
const statusGapMin = 100 * time.Millisecond

// stream receives the slot's messages, hands each committed transaction's
// events to every delivery once it is durable and after those of the old
// homes of the shards that moved here (holdMoved), and confirms what all
// delivered, never past what is durable. plain is an ordinary connection
// to the server the slot is on.
func (r *Relay) stream(ctx context.Context, conn *pgconn.PgConn, plain *pgx.Conn, deliveries []delivery) error {
	st := &streaming{r: r, conn: conn, plain: plain, deliveries: deliveries, dec: newDecoder(),
		dur: &durable{conn: plain, standby: r.RequireStandby}, lastStatus: time.Now()}
	defer func() {
		// What was delivered is confirmed now, not by the next session.
		_ = pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: st.confirmed})
	}()
	for {
		done, err := st.delivered()
		if err != nil {
			return err
		}
		st.confirmed = max(st.confirmed, done)
		if err := st.confirm(ctx, false); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, r.StatusInterval)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) && ctx.Err() == nil {
				continue
			}
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyData:
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				if err := st.keepalive(ctx, msg.Data[1:], done); err != nil {
					return err
				}
			case pglogrepl.XLogDataByteID:
				end, err := r.xlog(ctx, st.dec, msg.Data[1:], deliveries, func(t decoded) error { return st.ready(ctx, t) })
				if err != nil {
					return err
				}
				st.handed = max(st.handed, end)
			}
		}
	}
}

// streaming is one stream's state: what it handed to the deliveries, what
// the slot may confirm, and what it last told the server.
type streaming struct {
	r                       *Relay
	conn                    *pgconn.PgConn
	plain                   *pgx.Conn
	deliveries              []delivery
	dec                     *decoder
	dur                     *durable
	sent, confirmed, handed pglogrepl.LSN
	lastStatus              time.Time
}

// confirm tells the server what the slot may confirm: when forced, every
// StatusInterval, and when it moved, at most every statusGapMin (not at
// every message).
func (st *streaming) confirm(ctx context.Context, force bool) error {
	since := time.Since(st.lastStatus)
	if !force && since < st.r.StatusInterval && (st.confirmed == st.sent || since < statusGapMin) {
		return nil
	}
	st.sent, st.lastStatus = st.confirmed, time.Now()
	return pglogrepl.SendStandbyStatusUpdate(ctx, st.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: st.confirmed})
}

// delivered is how far every delivery delivered what was handed to it;
// an error is a delivery's failure.
func (st *streaming) delivered() (pglogrepl.LSN, error) {
	done := st.handed
	for _, d := range st.deliveries {
		if err := d.err(); err != nil {
			return 0, err
		}
		done = min(done, d.delivered())
	}
	return done, nil
}

// ready returns once a transaction's events may be handed on.
func (st *streaming) ready(ctx context.Context, t decoded) error {
	idle := func() error { return st.confirm(ctx, true) }
	if err := st.dur.wait(ctx, t.end, st.r.StatusInterval, idle); err != nil {
		return err
	}
	return st.r.holdMoved(ctx, st.plain, st.dec, t, func() error {
		// Once what came before is delivered, the slot may confirm up
		// to the held transaction's commit (a new session decodes it
		// again): the relay this one may hold in turn, where a shard
		// moved back, sees it pass its own cut-over.
		done, err := st.delivered()
		if err != nil {
			return err
		}
		if done == st.handed {
			st.confirmed = max(st.confirmed, t.commit)
		}
		return idle()
	})
}

// keepalive handles a primary keepalive message (data), done being how
// far everything handed was delivered. Everything sent before it was
// received: when all of it is delivered, the slot may confirm up to the
// keepalive's position, past WAL that holds no event (the other
// databases' of the server). handed stays the last transaction's end: a
// later keepalive finds it delivered again.
func (st *streaming) keepalive(ctx context.Context, data []byte, done pglogrepl.LSN) error {
	ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data)
	if err != nil {
		return err
	}
	if done == st.handed && ka.ServerWALEnd > st.confirmed {
		if err := st.dur.refresh(ctx); err != nil {
			return err
		}
		st.confirmed = max(st.confirmed, min(ka.ServerWALEnd, st.dur.upTo))
	}
	if ka.ReplyRequested {
		return st.confirm(ctx, true)
	}
	return nil
}

// xlog decodes one message of WAL data; on a commit it hands the
// transaction's events to every delivery, once ready returns, and
// returns its end.
func (r *Relay) xlog(ctx context.Context, dec *decoder, data []byte, deliveries []delivery, ready func(decoded) error) (pglogrepl.LSN, error) {
	xld, err := pglogrepl.ParseXLogData(data)
	if err != nil {
		return 0, err
	}
	m, err := pglogrepl.Parse(xld.WALData)
	if err != nil {
		return 0, err
	}
	got, err := dec.message(m)
	if err != nil || got.txn == nil {
		return 0, err
	}
	evs, err := events(r.Catalog, got.txn)
	if err != nil {
		return 0, &fatalError{fmt.Errorf("transaction ending at %s: %w", got.end, err)}
	}
	if len(evs) > 0 {
		if err := ready(got); err != nil {
			return 0, err
		}
	}
	for _, d := range deliveries {
		if err := d.send(ctx, evs, got.end); err != nil {
			return 0, err
		}
	}
	return got.end, nil
}
