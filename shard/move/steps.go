package move

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// moveLockKey and the shard id are the advisory lock a mover holds on
// both databases of a move for the whole run ("comv").
const moveLockKey = 0x636f6d76

// cutTriesMax bounds the cut-over's tries to take the shard's tables.
const cutTriesMax = 5

// poll paces the waits for the copy and for the catch-up.
const poll = 10 * time.Millisecond

// name is the move's publication, replication slot and subscription.
func (s *session) name() string { return "coffer_move_" + strconv.Itoa(int(s.mv.Shard)) }

// moved is what the cut-over renames a table or sequence of the old copy
// to: from then on no statement finds it by its name.
func moved(table string) string { return table + "_moved" }

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// connect opens the run's connections to the move's databases and takes
// the shard's move lock on both. The latest move of the shard must still
// be expect, read before the locks were held: another run may have gone
// on meanwhile.
func (m *Mover) connect(ctx context.Context, mv, expect shard.Move) (*session, error) {
	s := &session{m: m, mv: mv}
	var err error
	if s.src, err = m.dial(ctx, mv.Source); err == nil {
		s.dst, err = m.dial(ctx, mv.Target)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	for _, c := range []*pgx.Conn{s.src, s.dst} {
		var locked bool
		if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", moveLockKey, int32(mv.Shard)).Scan(&locked); err != nil {
			s.close()
			return nil, err
		}
		if !locked {
			s.close()
			return nil, fmt.Errorf("another coffer shard move is working on shard %d", mv.Shard)
		}
	}
	if _, err := m.refresh(ctx, mv.Shard); err != nil {
		s.close()
		return nil, err
	}
	if now, _ := m.Router.Map().Move(mv.Shard); now != expect {
		s.close()
		return nil, fmt.Errorf("shard %d's move changed while this run began (another coffer shard move?): run again", mv.Shard)
	}
	return s, nil
}

// resume connects to the databases of mv, the shard's latest move, and
// reads the tables it copies.
func (m *Mover) resume(ctx context.Context, mv shard.Move) (*session, error) {
	s, err := m.connect(ctx, mv, mv)
	if err != nil {
		return nil, err
	}
	err = s.src.QueryRow(ctx, "SELECT tables, sequences FROM shard_move WHERE shard_id = $1 AND epoch = $2", mv.Shard, mv.Epoch).
		Scan(&s.tables, &s.sequences)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("shard %d: read the move on %s: %w", mv.Shard, mv.Source, err)
	}
	return s, nil
}

// dial connects to the database named name, its times read in UTC (the
// checksums read rows as text).
func (m *Mover) dial(ctx context.Context, name string) (*pgx.Conn, error) {
	mp := m.Router.Map()
	i := mp.Index(name)
	if i < 0 {
		return nil, fmt.Errorf("database %s is not in the config", name)
	}
	timeout := m.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	db := mp.Databases()[i]
	cfg, err := pgx.ParseConfig(db.Config.ConnString(int(timeout / time.Second)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", db.Label(), err)
	}
	cfg.RuntimeParams["application_name"] = "coffer shard move"
	cfg.RuntimeParams["timezone"] = "UTC"
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", db.Label(), err)
	}
	return conn, nil
}

// begin checks the target and records a new move on both databases.
func (s *session) begin(ctx context.Context) error {
	srcV, err := s.m.Engine.Applied(ctx, s.src)
	if err != nil {
		return fmt.Errorf("%s: %w", s.mv.Source, err)
	}
	dstV, err := s.m.Engine.Applied(ctx, s.dst)
	if err != nil {
		return fmt.Errorf("%s: %w", s.mv.Target, err)
	}
	switch {
	case len(dstV) == 0:
		return fmt.Errorf("%s holds no coffer schema: run coffer migrate -c CONFIG first; nothing was changed", s.mv.Target)
	case !slices.Equal(srcV, dstV):
		return fmt.Errorf("%s is at schema version %d but %s at %d: run coffer migrate -c CONFIG first; nothing was changed",
			s.mv.Target, dstV[len(dstV)-1], s.mv.Source, srcV[len(srcV)-1])
	}
	if err := s.discover(ctx); err != nil {
		return err
	}
	var found []string
	if err := s.dst.QueryRow(ctx, "SELECT COALESCE(array_agg(t), '{}') FROM unnest($1::text[]) t WHERE to_regclass(quote_ident(t)) IS NOT NULL",
		append(slices.Clone(s.tables), s.sequences...)).Scan(&found); err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("%s holds %s of shard %d already; nothing was changed", s.mv.Target, strings.Join(found, ", "), s.mv.Shard)
	}
	if err := s.record(ctx, s.src, s.dst); err != nil {
		return err
	}
	return s.step(StepBegun)
}

// discover lists the shard's tables and sequences on the source: every
// one of coffer's schema named <kind>_<shard>, whatever migration made it.
func (s *session) discover(ctx context.Context) error {
	rows, _ := s.src.Query(ctx, `SELECT c.relname, c.relkind = 'S' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S') AND c.relname ~ $1 ORDER BY c.relname`,
		"^[a-z][a-z_]*_"+strconv.Itoa(int(s.mv.Shard))+"$")
	var name string
	var sequence bool
	_, err := pgx.ForEachRow(rows, []any{&name, &sequence}, func() error {
		if sequence {
			s.sequences = append(s.sequences, name)
		} else {
			s.tables = append(s.tables, name)
		}
		return nil
	})
	if err == nil && len(s.tables) == 0 {
		err = fmt.Errorf("%s holds no table of shard %d", s.mv.Source, s.mv.Shard)
	}
	return err
}

// record writes the move, as the session holds it, on each of conns.
func (s *session) record(ctx context.Context, conns ...interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	var pauseMs *int64
	if s.mv.Pause > 0 {
		ms := s.mv.Pause.Milliseconds()
		pauseMs = &ms
	}
	for _, c := range conns {
		_, err := c.Exec(ctx, `INSERT INTO shard_move (shard_id, epoch, source, target, state, tables, sequences, pause_ms)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (shard_id) DO UPDATE SET epoch = EXCLUDED.epoch, source = EXCLUDED.source, target = EXCLUDED.target,
				state = EXCLUDED.state, tables = EXCLUDED.tables, sequences = EXCLUDED.sequences, pause_ms = EXCLUDED.pause_ms, updated_at = now()`,
			s.mv.Shard, s.mv.Epoch, s.mv.Source, s.mv.Target, string(s.mv.State), s.tables, s.sequences, pauseMs)
		if err != nil {
			return fmt.Errorf("record the move: %w", err)
		}
	}
	return nil
}

// exists tells whether sql, given the move's name, finds a row.
func (s *session) exists(ctx context.Context, conn *pgx.Conn, sql string) (bool, error) {
	var found bool
	err := conn.QueryRow(ctx, "SELECT EXISTS ("+sql+")", s.name()).Scan(&found)
	return found, err
}

const (
	publicationSQL  = "SELECT 1 FROM pg_publication WHERE pubname = $1"
	slotSQL         = "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1"
	subscriptionSQL = "SELECT 1 FROM pg_subscription WHERE subname = $1 AND subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
)

// publish publishes the shard's tables on the source and creates the
// replication slot the subscription streams from. The publication comes
// first: a change decoded from the slot is published if its publication
// existed when the change was made.
func (s *session) publish(ctx context.Context) error {
	if ok, err := s.exists(ctx, s.src, publicationSQL); err != nil || !ok {
		if err != nil {
			return err
		}
		var list []string
		for _, t := range s.tables {
			list = append(list, ident(t))
		}
		if _, err := s.src.Exec(ctx, "CREATE PUBLICATION "+ident(s.name())+" FOR TABLE "+strings.Join(list, ", ")); err != nil {
			return err
		}
	}
	// The slot is made here, not by CREATE SUBSCRIPTION: that waits for
	// itself when both databases are on one server.
	if ok, err := s.exists(ctx, s.src, slotSQL); err != nil || ok {
		return err
	}
	// A slot made now would stream from now on: to a subscription that
	// streamed from the lost one, what the source wrote in between would
	// be missing from the copy.
	if ok, err := s.exists(ctx, s.dst, subscriptionSQL); err != nil || ok {
		if err == nil {
			err = s.slotGone()
		}
		return err
	}
	_, err := s.src.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.name())
	return err
}

// slotGone is why a move that subscribed cannot go on once the source
// lost its slot.
func (s *session) slotGone() error {
	return fmt.Errorf("the replication slot %s is gone from %s (a failover? slots do not follow it) while %s subscribes to it: "+
		"the copy would miss what the source took since; abort the move (--abort) and begin it again", s.name(), s.mv.Source, s.mv.Target)
}

// prepare creates the shard's tables on the target, empty, records the
// shard among the target's, and fences them: until the cut-over only the
// replication writes them. What an earlier run left of this, before it
// subscribed, is dropped first.
func (s *session) prepare(ctx context.Context) error {
	if ok, err := s.exists(ctx, s.dst, subscriptionSQL); err != nil || ok {
		return err
	}
	if err := s.dropCopy(ctx, s.dst, func(name string) string { return name }); err != nil {
		return err
	}
	if err := s.m.Engine.AddShard(ctx, s.dst, s.mv.Shard); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.dst, func(tx pgx.Tx) error {
		for _, t := range s.tables {
			// A SHARD migration may seed rows: the copy brings the source's.
			if _, err := tx.Exec(ctx, "TRUNCATE "+ident(t)); err != nil {
				return fmt.Errorf("the migrations do not make table %s on %s: %w", t, s.mv.Target, err)
			}
			if _, err := tx.Exec(ctx, "CREATE TRIGGER shard_move_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+ident(t)+
				" FOR EACH STATEMENT EXECUTE FUNCTION shard_move_fence('"+strconv.Itoa(int(s.mv.Shard))+"')"); err != nil {
				return err
			}
		}
		return nil
	})
}

// dropCopy drops the tables and sequences of a copy of the shard on
// conn, named by as.
func (s *session) dropCopy(ctx context.Context, conn *pgx.Conn, as func(string) string) error {
	for _, t := range s.tables {
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+ident(as(t))); err != nil {
			return err
		}
	}
	for _, q := range s.sequences {
		if _, err := conn.Exec(ctx, "DROP SEQUENCE IF EXISTS "+ident(as(q))); err != nil {
			return err
		}
	}
	return nil
}

// subscribe subscribes the target to the source's publication, from the
// slot, copying what the tables hold first. Its commits wait for the
// target's synchronous standby, if it has one (synchronous_commit on;
// a subscription's default is off): the slot's confirmed position, which
// the cut-over trusts, is what the target flushed, and must not pass
// what a failover of the target keeps.
func (s *session) subscribe(ctx context.Context) error {
	if ok, err := s.exists(ctx, s.dst, subscriptionSQL); err != nil || ok {
		return err
	}
	mp := s.m.Router.Map()
	conninfo := mp.Databases()[mp.Index(s.mv.Source)].Config.ConnString(10)
	_, err := s.dst.Exec(ctx, "CREATE SUBSCRIPTION "+ident(s.name())+" CONNECTION '"+strings.ReplaceAll(conninfo, "'", "''")+
		"' PUBLICATION "+ident(s.name())+" WITH (create_slot = false, slot_name = '"+s.name()+"', copy_data = true, synchronous_commit = on)")
	return err
}

// sync waits until every table is copied (ready in pg_subscription_rel),
// as long as the source keeps the slot, then until the target has
// applied what the source wrote until then, so that the cut-over waits
// little.
func (s *session) sync(ctx context.Context) error {
	last := time.Now()
	for {
		var ready int
		err := s.dst.QueryRow(ctx, `SELECT count(*) FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid
			WHERE s.subname = $1 AND r.srsubstate = 'r'`, s.name()).Scan(&ready)
		if err != nil {
			return err
		}
		if ready == len(s.tables) {
			break
		}
		// The copy streams from the slot: without it, it never ends.
		if ok, err := s.exists(ctx, s.src, slotSQL); err != nil || !ok {
			if err == nil {
				err = s.slotGone()
			}
			return err
		}
		if time.Since(last) > 5*time.Second {
			s.m.progress("shard %d: %d of %d tables copied", s.mv.Shard, ready, len(s.tables))
			last = time.Now()
		}
		if err := sleep(ctx, 10*poll); err != nil {
			return err
		}
	}
	var lsn string
	if err := s.src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	return s.caughtUp(ctx, lsn)
}

// caughtUp waits until the target has applied and flushed what the
// source wrote up to lsn: the slot's confirmed position passes it, within
// CatchUpTimeout.
func (s *session) caughtUp(ctx context.Context, lsn string) error {
	timeout := s.m.CatchUpTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		var done *bool
		if err := s.src.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1",
			s.name(), lsn).Scan(&done); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return &slotGone{slot: s.name(), source: s.mv.Source}
			}
			return err
		}
		if done != nil && *done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has not applied %s's changes up to %s within %s: see pg_stat_subscription there; run again to carry on",
				s.mv.Target, s.mv.Source, lsn, timeout)
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

// slotGone tells that the source no longer has the move's replication
// slot: a failover lost it (slots do not follow one), or it was dropped.
type slotGone struct{ slot, source string }

func (e *slotGone) Error() string {
	return fmt.Sprintf("the replication slot %s is gone from %s", e.slot, e.source)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
