package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// batchPlayer is one player of a batch: what the batch loads for it, and
// the coffer.Player that plans its writes.
type batchPlayer struct {
	key   playerKey
	shard coffer.ShardID
	// needs is what the player's writes read, and the ids they take.
	needs  coffer.Needs
	writes int

	read   bool
	state  coffer.PlayerState
	ids    []int64
	player *coffer.Player
	// err answers the player's writes when its state is damaged.
	err error
}

// attempt is one run of a batch: the plans, in the order of the writes
// (of the first writes only, when its time ran short), and the token its
// COMMIT sets in its committer's mark, or the error that stopped it.
// uncertain tells the error cut off the second round trip, which holds
// the COMMIT: the batch may have been applied. unapplied tells the
// attempt proved that the earlier one it was given, uncertain, was not
// applied: by reading the mark after the players' locks the earlier one
// took in its first round trip, if it was careful; else once its own
// COMMIT let go of the mark it read (readMark). careful tells the attempt
// took the players' locks as it read them (load).
type attempt struct {
	plans     []coffer.Plan
	token     int64
	err       error
	uncertain bool
	unapplied bool
	careful   bool
}

// batchTx is a batch's transaction on one connection of its database.
type batchTx struct {
	s    *Store
	db   int
	conn *pgxpool.Conn
	ctx  context.Context
	open bool
}

// attempt runs the batch once: unless careful (or reading whether
// unknown was applied), at one snapshot without the players' locks and
// without reading the writes' own keys (load), which the attempt then
// proves new (batchTx.fresh) or fails (keyStored); such an attempt fails
// too where it refuses a write (errRefusedAtSnapshot). unknown is an earlier
// attempt whose COMMIT may have been applied: if the mark, read under
// the players' locks and locked itself (readMark), holds its token, it
// was, and its plans are the answers, as new writes (they are not
// replays of another request). It plans the writes
// in order, the first always, each next one only while half of Timeout
// is left (planLate): the writes past that are not planned, and the
// plans made so far are persisted, so that a batch too long to plan
// commits what it planned in time instead of failing as a whole.
func (s *Store) attempt(ctx context.Context, db int, m *mark, reqs []*request, unknown *attempt, careful bool) *attempt {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	players, of := s.batchPlayers(reqs)
	conn, err := s.batchPools[db].Acquire(ctx)
	if err != nil {
		return &attempt{err: err}
	}
	t := &batchTx{s: s, db: db, conn: conn, ctx: ctx}
	defer t.end()
	var check *mark
	if unknown != nil {
		check, careful = m, true
	}
	token, err := t.load(players, check, careful)
	if err != nil {
		return &attempt{err: err}
	}
	// An earlier attempt that set no token (it wrote nothing but its
	// mark's time: it refused every write, or read a cut attempt's
	// mark) is planned again: a mark without a row reads 0 too, and
	// nothing of it matters but what it locked, which this attempt locks
	// and commits again.
	if unknown != nil && unknown.token != 0 && token == unknown.token {
		// Applied here, but maybe here only: a COMMIT cut off while it
		// waited for the synchronous standby is completed on the
		// primary alone (PostgreSQL does so when the wait is cancelled,
		// which pgx asks as it closes a connection that failed, or when
		// the backend is terminated). Its answer waits for a COMMIT that
		// does wait for the standby, which then has it too.
		if err := t.commitWith(touchMark, m.committer); err != nil {
			return &attempt{plans: unknown.plans, token: unknown.token, err: err, uncertain: true, careful: true}
		}
		return &attempt{plans: unknown.plans}
	}
	// A check attempt's locks prove only what a careful attempt did: a
	// cut one that read at its snapshot held none before its write.
	a := &attempt{plans: make([]coffer.Plan, 0, len(reqs)), unapplied: unknown != nil && unknown.careful,
		careful: careful && (unknown == nil || unknown.careful)}
	for i, r := range reqs {
		if i > 0 && s.planLate(ctx) {
			break
		}
		p := players[of[i]]
		if p.err != nil {
			if p.writes > 1 {
				a.err = &writesFailure{p.err}
				return a
			}
			a.plans = append(a.plans, coffer.Plan{Err: p.err})
			continue
		}
		plan, err := t.plan(r, p)
		if err != nil {
			a.err = err
			return a
		}
		a.plans = append(a.plans, plan)
	}
	if !careful && slices.ContainsFunc(a.plans, refused) {
		a.err = errRefusedAtSnapshot
		return a
	}
	if !careful {
		if err := t.fresh(players, of, a.plans); err != nil {
			a.err = err
			return a
		}
	}
	if check == nil && !slices.ContainsFunc(a.plans, coffer.Plan.Writes) && !slices.ContainsFunc(a.plans, replayed) && !slices.ContainsFunc(a.plans, refused) {
		return a // nothing to write: end rolls back
	}
	if err := t.commitPlans(a, players, of, m); err != nil {
		a.err, a.uncertain = err, uncertain(err)
		return a
	}
	a.unapplied = unknown != nil
	return a
}

// commitPlans ends an attempt's transaction with a COMMIT, and the next
// token of m for the attempt, but for a mark only touched:
//   - of the rows its plans write (persist);
//   - of its mark alone when it answers replays only: the trx they answer
//     may be on the primary alone (a COMMIT cut off while it waited for
//     the standby, Store.attempt), so they too are answered after a
//     COMMIT that waits for it;
//   - of its mark touched when it writes nothing but read a cut attempt's
//     mark, which stays locked until this COMMIT, so that a cut attempt
//     yet to run its write fails on it (readMark); or when it refused a
//     write: its players' rows, written again by their locks, are then
//     changed for an earlier copy of the write that read at its snapshot
//     and has yet to write, which then fails on them and applies nothing
//     (errRefusedAtSnapshot).
func (t *batchTx) commitPlans(a *attempt, players []*batchPlayer, of []int, m *mark) error {
	switch {
	case slices.ContainsFunc(a.plans, coffer.Plan.Writes):
		m.token++
		a.token = m.token
		return t.persist(players, of, a.plans, m)
	case slices.ContainsFunc(a.plans, replayed):
		m.token++
		a.token = m.token
		return t.commitWith("WITH "+markParts("$1", "$2")+" SELECT 1", m.committer, m.token)
	default:
		return t.commitWith(touchMark, m.committer)
	}
}

// plan plans r on its player p. A plan that lacks ids gets them
// (moreIDs) and is made again, once: then it has what it asked.
func (t *batchTx) plan(r *request, p *batchPlayer) (coffer.Plan, error) {
	plan, err := r.planOn(p.player)
	if err != nil || plan.IDsShort == 0 {
		return plan, err
	}
	short := plan.IDsShort
	if err := t.moreIDs(p, short); err != nil {
		return coffer.Plan{}, err
	}
	if plan, err = r.planOn(p.player); err == nil && plan.IDsShort > 0 {
		err = coffer.Errorf(coffer.CodeInternal, "a write given the %d ids it lacked lacks %d more", short, plan.IDsShort)
	}
	return plan, err
}

// planLate tells whether an attempt whose time ends with ctx is too late
// to plan another write: less than half of Timeout is left, which is for
// persisting the plans made. A write's plan is bounded (OpsMax ops,
// TrxOpsMax lots, a Book whose cost follows the work), so one more never
// takes much of it.
func (s *Store) planLate(ctx context.Context) bool {
	deadline, _ := ctx.Deadline()
	return deadline.Sub(s.now()) < s.opts.Timeout/2
}

// batchPlayers groups the writes by player, in the order players first
// appear, and tells each write's player (of).
func (s *Store) batchPlayers(reqs []*request) (players []*batchPlayer, of []int) {
	keys, of := byPlayer(reqs)
	players = make([]*batchPlayer, len(keys))
	for j, k := range keys {
		players[j] = &batchPlayer{key: k, shard: s.router.Map().ShardOf(k.id)}
	}
	for i, r := range reqs {
		p := players[of[i]]
		p.writes++
		p.needs.Add(r.write.Needs())
	}
	return players, of
}

// touchMark writes a committer's mark row again, its token unchanged: a
// write, whose COMMIT waits for the synchronous standby, that changes
// nothing a later attempt reads.
const touchMark = `UPDATE batch_mark SET marked_at = now() WHERE committer = $1`

// commitWith commits the batch's transaction after a statement that
// writes (sql), so that the COMMIT, as a batch's, returns once the
// synchronous standby, if the database has one, has every earlier
// COMMIT too.
func (t *batchTx) commitWith(sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return t.commit(b)
}

// commit sends b's statements and COMMIT in one round trip. Where an
// acknowledged write must be on a physical standby (RequiresStandby), the
// round trip also reads whether a logical walsender may have confirmed
// the COMMIT (shard.CommitOnStandby), and commit then waits until the
// commit is on a physical standby: an error once the COMMIT succeeded
// leaves the batch uncertain.
func (t *batchTx) commit(b *pgx.Batch) error {
	var upTo string
	var starBefore, starAfter bool
	guarded := t.s.router.RequiresStandby(t.db)
	if guarded {
		b.Queue(shard.StarBefore).QueryRow(func(row pgx.Row) error { return row.Scan(&starBefore) })
	}
	b.Queue("COMMIT").Exec(func(pgconn.CommandTag) error {
		t.open = false
		return nil
	})
	if guarded {
		b.Queue(shard.CommitOnStandby).QueryRow(func(row pgx.Row) error { return row.Scan(&upTo, &starAfter) })
	}
	err := t.conn.SendBatch(t.ctx, b).Close()
	if err == nil && (starBefore || starAfter) {
		err = awaitStandby(t.ctx, t.conn.Conn(), upTo)
	}
	if err != nil && !t.open {
		return &commitUnproven{err}
	}
	return err
}

// awaitStandby asks on conn until a physical standby has flushed the
// WAL up to upTo (shard.Flushed), or ctx ends.
func awaitStandby(ctx context.Context, conn *pgx.Conn, upTo string) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var on bool
		if err := conn.QueryRow(ctx, shard.Flushed, upTo).Scan(&on); err != nil || on {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no physical synchronous standby has the WAL up to %s yet: %w", upTo, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// commitUnproven is an error met after a batch's COMMIT succeeded: the
// batch was applied, on the primary at least, and is answered as a COMMIT
// cut off (uncertain).
type commitUnproven struct{ err error }

func (e *commitUnproven) Error() string { return "after the COMMIT: " + e.err.Error() }

// replayed tells whether a plan answers a write applied before.
func replayed(p coffer.Plan) bool { return p.Replay && p.Err == nil }

// refused tells whether a plan answers its write with an error: the
// write is not applied.
func refused(p coffer.Plan) bool { return p.Err != nil }

// errRefusedAtSnapshot is an attempt's failure when it read at its
// snapshot and its plans refuse a write: settle runs it again careful.
// A refusal writes nothing and so locks nothing at a snapshot, and an
// earlier copy of the write (its call ended, "retry with the same key")
// may still be on its way to the server, to apply after the refusal was
// answered. A careful attempt waits for the locks that copy holds, and
// its COMMIT (commitPlans) changes the rows that copy must write
// unchanged (docs/adr/0026-batch-snapshot.md, "Refusals").
var errRefusedAtSnapshot = errors.New("a write refused at the batch's snapshot")

// end rolls back a transaction still open. It runs on its own short
// deadline, so that a batch whose time ran out still releases its locks;
// a connection that cannot roll back is closed rather than handed to
// the next batch.
func (t *batchTx) end() {
	if t.open {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
			_ = t.conn.Conn().Close(ctx)
		}
	}
	t.conn.Release()
}
