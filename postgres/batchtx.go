package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// settle runs the writes of one database as one batch and answers each
// (see docs/architecture.md): one PostgreSQL transaction, two round trips
// (the players' locks and state; the rows and COMMIT), whatever the number
// of writes. A write refused by its plan (insufficient_funds, a conflict)
// is answered so and fails no other. A batch that fails as a whole is run
// again, up to RetriesMax times, when it lost a race or its connection;
// split by player (and a player's writes one by one) when the failure may
// come from some of its writes only; so that each write gets the answer it
// would have got alone. After a COMMIT whose answer was lost, the next
// attempt reads whether it was applied, from m (batch_mark). Each
// attempt's ending is told to the Observer. The writes an attempt left
// unplanned when its time ran short (attempt) are left unanswered: the
// committer runs them in a later batch.
func (s *Store) settle(db int, m *mark, reqs []*request) {
	var a, unknown *attempt
	for try := 0; ; try++ {
		// Before every attempt but one that reads whether a cut COMMIT
		// was applied (its answers are that attempt's, write for write).
		if unknown == nil {
			if reqs = live(reqs); len(reqs) == 0 {
				return
			}
		}
		if err := s.router.Writable(db); err != nil {
			a = &attempt{err: &coffer.Error{Code: coffer.CodeUnavailable, Message: "the player's database is unavailable", Err: err}}
			if unknown == nil {
				s.observe(db, AttemptNotRun)
				failWrites(reqs, a.err)
				return
			}
			break
		}
		a = s.attempt(db, m, reqs, unknown)
		if a.err == nil {
			for i := range a.plans {
				reqs[i].plan = &a.plans[i]
			}
			s.observe(db, AttemptCommitted)
			return
		}
		switch {
		case a.uncertain:
			unknown = a
		case a.unapplied:
			unknown = nil // a failure of its own may be split again
		}
		if _, connFailed := classify(0, a.err); try == s.opts.RetriesMax || !connFailed && !a.uncertain && !retryable(a.err) {
			break
		}
		s.observe(db, AttemptRetried)
	}
	s.failed(db, a.err)
	if unknown != nil {
		s.observe(db, AttemptCut)
		failWrites(reqs, &coffer.Error{Code: coffer.CodeUnavailable,
			Message: "the batch's commit was cut off and its outcome could not be read; retry with the same key", Err: a.err})
		return
	}
	parts := split(reqs, a.err)
	if parts == nil {
		s.observe(db, AttemptFailed)
		for _, r := range reqs {
			r.err, _ = classify(s.router.Map().ShardOf(r.scope.PlayerID), a.err)
		}
		return
	}
	s.observe(db, AttemptSplit)
	for _, part := range parts {
		s.settle(db, m, part)
	}
}

// mark is a committer's row in batch_mark (the baseline's V0001): each batch
// it commits sets the row's token in its own transaction, so that the
// next attempt of a batch whose COMMIT's answer was lost reads whether
// that COMMIT was applied. A committer runs one batch at a time, a
// batch's attempts one after the other, and its tokens only grow: the row
// holds the greatest token of its committer's COMMITs applied.
type mark struct {
	committer, token int64
}

// settler is what runs one committer goroutine's batches of writes, with
// a mark of its own.
func (s *Store) settler() func(db int, reqs []*request) {
	m := &mark{committer: rand.Int64()}
	return func(db int, reqs []*request) { s.settle(db, m, reqs) }
}

// live answers the writes whose caller is gone and returns the others:
// a batch does not run what nobody waits for.
func live(reqs []*request) []*request {
	out := reqs[:0:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.err = &coffer.Error{Code: coffer.CodeUnavailable, Message: "the call ended before its batch ran", Err: err}
			continue
		}
		out = append(out, r)
	}
	return out
}

// split parts writes that failed together with err into batches to run
// one after the other: one per player, or, for one player, one per write.
// It returns nil when parting cannot help: err is not one that some
// writes only may cause (isolable), or a player's lock timed out (its
// writes all wait for it).
func split(reqs []*request, err error) [][]*request {
	if len(reqs) < 2 || !isolable(err) {
		return nil
	}
	var parts [][]*request
	at := map[playerKey]int{}
	for _, r := range reqs {
		k := playerKey{r.scope.Namespace, r.scope.PlayerID}
		i, ok := at[k]
		if !ok {
			i = len(parts)
			at[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], r)
	}
	if len(parts) > 1 {
		return parts
	}
	if lockTimedOut(err) {
		return nil
	}
	parts = parts[:0]
	for _, r := range reqs {
		parts = append(parts, []*request{r})
	}
	return parts
}

type playerKey struct {
	ns coffer.Namespace
	id coffer.PlayerID
}

// batchPlayer is one player of a batch: what the batch loads for it, and
// the coffer.Player that plans its writes.
type batchPlayer struct {
	key   playerKey
	shard coffer.ShardID
	// needs is what the player's writes read, and the ids they take.
	needs  coffer.Needs
	writes int

	locked bool
	state  coffer.PlayerState
	ids    []int64
	player *coffer.Player
	// err answers the player's writes when its state is damaged.
	err error
}

// writesFailure is an attempt's error that comes from some of its
// writes, not from the batch: a plan that panicked (request.planOn), or
// the damaged state (a lot that does not add up, a trx that does not
// decode) of a player with several writes in the batch, which, alone,
// each load only what they read. isolable splits the batch on it, so
// that each write answers as it would alone.
type writesFailure struct{ err error }

func (f *writesFailure) Error() string { return f.err.Error() }
func (f *writesFailure) Unwrap() error { return f.err }

// attempt is one run of a batch: the plans, in the order of the writes
// (of the first writes only, when its time ran short), and the token its
// COMMIT sets in its committer's mark, or the error that stopped it. uncertain tells the error cut off the second round trip,
// which holds the COMMIT: the batch may have been applied. unapplied
// tells the attempt read that the earlier one it was given, uncertain,
// was not applied.
type attempt struct {
	plans     []coffer.Plan
	token     int64
	err       error
	uncertain bool
	unapplied bool
}

// batchTx is a batch's transaction on one connection of its database.
type batchTx struct {
	s    *Store
	conn *pgxpool.Conn
	ctx  context.Context
	open bool
}

// attempt runs the batch once. unknown is an earlier attempt whose
// COMMIT may have been applied: if the mark, read under the players'
// locks, holds its token, it was, and its plans are the answers, as new
// writes (they are not replays of another request). It plans the writes
// in order, the first always, each next one only while half of Timeout
// is left (planLate): the writes past that are not planned, and the
// plans made so far are persisted, so that a batch too long to plan
// commits what it planned in time instead of failing as a whole.
func (s *Store) attempt(db int, m *mark, reqs []*request, unknown *attempt) *attempt {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	players, of := s.batchPlayers(reqs)
	conn, err := s.router.Database(db).Acquire(ctx)
	if err != nil {
		return &attempt{err: err}
	}
	t := &batchTx{s: s, conn: conn, ctx: ctx}
	defer t.end()
	if err := t.setSession(); err != nil {
		return &attempt{err: err}
	}
	var check *mark
	if unknown != nil {
		check = m
	}
	token, err := t.load(players, check)
	if err != nil {
		return &attempt{err: err}
	}
	if unknown != nil && token == unknown.token {
		return &attempt{plans: unknown.plans}
	}
	a := &attempt{plans: make([]coffer.Plan, 0, len(reqs)), unapplied: unknown != nil}
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
	if !slices.ContainsFunc(a.plans, coffer.Plan.Writes) {
		return a // nothing to write: end rolls back
	}
	m.token++
	a.token = m.token
	if err := t.persist(players, of, a.plans, m); err != nil {
		a.err, a.uncertain = err, uncertain(err)
	}
	return a
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
	return time.Until(deadline) < s.opts.Timeout/2
}

// uncertain tells whether err, from the round trip that ends with COMMIT,
// leaves the outcome unknown: the connection failed or the call timed out
// (the COMMIT may have run), rather than the database refusing a
// statement (the transaction is then aborted, and nothing applied) or
// the error coming before anything was sent (a time that ran out before
// the round trip began: the COMMIT was never sent).
func uncertain(err error) bool {
	if pgconn.SafeToRetry(err) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		class := pg.Code[:2]
		return class == classConnectionException || class == classOperatorIntervention
	}
	return true
}

// batchPlayers groups the writes by player, in the order players first
// appear, and tells each write's player (of).
func (s *Store) batchPlayers(reqs []*request) (players []*batchPlayer, of []int) {
	at := map[playerKey]int{}
	of = make([]int, len(reqs))
	for i, r := range reqs {
		k := playerKey{r.scope.Namespace, r.scope.PlayerID}
		j, ok := at[k]
		if !ok {
			j = len(players)
			at[k] = j
			players = append(players, &batchPlayer{key: k, shard: s.router.Map().ShardOf(k.id)})
		}
		of[i] = j
		p := players[j]
		p.writes++
		p.needs.Add(r.write.Needs())
	}
	return players, of
}

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

// setSession sets, once per connection (one round trip, before its first
// batch), the session's lock_timeout to LockTimeout and its
// idle_in_transaction_session_timeout to Timeout (Store.session): set
// inside a batch's transaction they would cost a statement per batch, and
// a batch that rolls back would undo them. The second ends on the server
// a batch's transaction whose coffer is gone without a word (a network
// partition: no FIN arrives) within Timeout, the longest a batch runs,
// instead of leaving it holding its players' locks and its committer's
// mark until TCP gives up, hours later.
func (t *batchTx) setSession() error {
	data := t.conn.Conn().PgConn().CustomData()
	if data["coffer.session"] == t.s.session {
		return nil
	}
	if _, err := t.conn.Exec(t.ctx, "SELECT set_config('lock_timeout', $1, false), set_config('idle_in_transaction_session_timeout', $2, false)",
		t.s.session.lockTimeout, t.s.session.idleInTransaction); err != nil {
		return err
	}
	data["coffer.session"] = t.s.session
	return nil
}

// load is the first round trip: BEGIN, and for each
// shard the players' locks and ids (batchSQL.lock), their lots, their
// trx under the batch's keys and the orders their refunds name; then, if
// check is set, its token (0 without a row). It makes each player's
// coffer.Player.
func (t *batchTx) load(players []*batchPlayer, check *mark) (token int64, err error) {
	byKey := make(map[playerKey]*batchPlayer, len(players))
	lock, lots, keys, orders := perShard{}, perShard{}, perShard{}, perShard{}
	for _, p := range players {
		byKey[p.key] = p
		ns, id := int32(p.key.ns), int64(p.key.id)
		lock.add(p.shard, ns, id, int32(p.needs.IDs))
		if p.needs.AllLots {
			lots.add(p.shard, ns, id, int32(0))
		} else {
			for _, c := range p.needs.Currencies {
				lots.add(p.shard, ns, id, int32(c))
			}
		}
		for _, k := range p.needs.Keys {
			keys.add(p.shard, ns, id, int32(k.Emitter), k.IdempotencyKey)
		}
		for _, o := range p.needs.Orders {
			orders.add(p.shard, ns, id, o.Store, o.OrderID)
			p.state.Orders = append(p.state.Orders, &coffer.OrderState{Key: o})
		}
	}
	l := &loading{s: t.s, byKey: byKey}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(keyedJoins)
	// Shard after shard, so that the locks are taken in one order.
	for _, id := range lock.shards() {
		q := &t.s.q(id).batch
		b.Queue(q.lock, lock[id].args()...).Query(l.locks)
		if lots[id] != nil {
			b.Queue(q.lots, lots[id].args()...).Query(l.lots)
		}
		if keys[id] != nil {
			b.Queue(q.trx, keys[id].args()...).Query(l.trx)
		}
		if orders[id] != nil {
			b.Queue(q.orders, orders[id].args()...).Query(l.orders)
			b.Queue(q.exchanges, orders[id].args()...).Query(l.exchanges)
		}
	}
	// After the locks: the cut attempt held them until it ended, so the
	// mark is read once its COMMIT has run or never will.
	if check != nil {
		b.Queue(readMark, check.committer).Query(func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{&token}, func() error { return nil })
			return err
		})
	}
	t.open = true
	if err := t.conn.SendBatch(t.ctx, b).Close(); err != nil {
		return 0, err
	}
	for _, p := range players {
		if !p.locked {
			return 0, fmt.Errorf("player %d/%d: not locked", p.key.ns, p.key.id)
		}
		if p.err == nil {
			p.player, p.err = coffer.NewPlayer(t.s.catalog, p.state, p.ids)
		}
	}
	return token, nil
}

// loading files what the first round trip reads under its player.
type loading struct {
	s     *Store
	byKey map[playerKey]*batchPlayer
}

// locks reads the players' rows as the lock returns them, and their ids.
func (l *loading) locks(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		var version, pos int64
		var last, now time.Time
		var ids []int64
		if err := rows.Scan(&k.ns, &k.id, &version, &pos, &last, &now, &ids); err != nil {
			return err
		}
		if p := l.byKey[k]; p != nil {
			p.locked, p.ids = true, ids
			p.state.Namespace, p.state.PlayerID, p.state.Version, p.state.Pos, p.state.LastWrite, p.state.At = k.ns, k.id, version, pos, last, now
		}
	}
	return rows.Err()
}

func (l *loading) lots(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		lot, err := scanLot(rows, &k.ns, &k.id)
		if err != nil {
			return err
		}
		if p := l.byKey[k]; p != nil {
			p.state.Lots = append(p.state.Lots, lot)
		}
	}
	return rows.Err()
}

func (l *loading) trx(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		st, err := l.s.scanTrx(rows, &k.ns, &k.id)
		var bad *undecodable
		switch p := l.byKey[k]; {
		case errors.As(err, &bad) && p != nil:
			// The player's writes answer it; the batch's others go on.
			p.err = &coffer.Error{Code: coffer.CodeInternal, Message: "a stored trx of the player does not decode: its row is damaged", Err: err}
		case err != nil:
			return err
		case p != nil:
			p.state.Trx = append(p.state.Trx, &st.StoredTrx)
		}
	}
	return rows.Err()
}

// orders reads the orders' lots and refunds (batchSQL.orders).
func (l *loading) orders(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		var order coffer.PurchaseKey
		var lot coffer.OrderLot
		var refundedBy, pos int64
		if err := rows.Scan(&k.ns, &k.id, &order.Store, &order.OrderID, &lot.LotID, &lot.Currency, &lot.Share, &lot.ShareValue, &refundedBy, &pos); err != nil {
			return err
		}
		p := l.byKey[k]
		if p == nil {
			continue
		}
		order.Namespace = k.ns
		for _, o := range p.state.Orders {
			switch {
			case o.Key != order:
			case refundedBy != 0:
				o.RefundedBy = refundedBy
			default:
				o.Lots = append(o.Lots, lot)
			}
		}
	}
	return rows.Err()
}

// exchanges reads the exchanges that made lots of the orders
// (batchSQL.exchanges).
func (l *loading) exchanges(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		var order coffer.PurchaseKey
		var op coffer.ExchangeOp
		var kind, cause string
		if err := rows.Scan(&k.ns, &k.id, &order.Store, &order.OrderID, &op.TrxID, &op.LotID, &op.Currency, &kind, &cause, &op.Paid, &op.Amount); err != nil {
			return err
		}
		p := l.byKey[k]
		if p == nil {
			continue
		}
		order.Namespace = k.ns
		op.Kind, op.Cause = coffer.OpKind(kind), coffer.OpCause(cause)
		for _, o := range p.state.Orders {
			if o.Key == order {
				o.Exchanges = append(o.Exchanges, op)
			}
		}
	}
	return rows.Err()
}

// moreIDs draws n more ids of p's shard (one more round trip), for a
// plan that lacked them (coffer.Plan.IDsShort), and hands them to p's
// player.
func (t *batchTx) moreIDs(p *batchPlayer, n int) error {
	rows, err := t.conn.Query(t.ctx, t.s.q(p.shard).nextIDs, n)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	p.player.GiveIDs(ids)
	return nil
}

// persist is the second round trip: per shard, one statement that
// writes every row the plans make there (writeSQL: the batch's trx, ops,
// new and changed lots, finished holds and players' rows, each table's
// set-based); m's token; and COMMIT.
func (t *batchTx) persist(players []*batchPlayer, of []int, plans []coffer.Plan, m *mark) error {
	// tables[i] holds the rows of writeBranches[i], per shard.
	tables := make([]perShard, len(writeBranches))
	for i := range tables {
		tables[i] = perShard{}
	}
	trx, ops, newLots, lots, finished, rows := tables[0], tables[1], tables[2], tables[3], tables[4], tables[5]
	inserted := finishedInBatch(players, of, plans)
	for i, plan := range plans {
		p := players[of[i]]
		ns, id := int32(p.key.ns), int64(p.key.id)
		for _, r := range plan.Inserts {
			var finishedAt *time.Time
			var beginVersion *int64
			if f := inserted[trxOf{p.key, r.ID}]; f != nil {
				r.Status, r.Version, finishedAt, beginVersion = f.Status, f.Version, &f.FinishedAt, &f.BeginVersion
			}
			trx.add(p.shard, ns, id, r.CreatedAt, r.ID, int32(r.Emitter), r.IdempotencyKey, r.Hash, string(r.Kind), string(r.Status),
				r.Reason, metaText(r.Meta), r.HoldExpiresAt, pendingJSON(r.PendingGrants), r.Version, r.Pos, finishedAt, refundJSON(r.Refund), beginVersion)
		}
		for _, o := range plan.Ops {
			ops.add(p.shard, ns, id, o.CreatedAt, o.TrxID, o.Seq, int32(o.Currency), o.LotID, string(o.Kind), string(o.Cause),
				int64(o.Amount), o.Paid, int64(o.BalanceAfter), int64(o.PaidAfter), purchaseJSON(o.Purchase), o.Pos, o.Fiat, int64(o.Value))
		}
		if f := plan.Finish; f != nil && inserted[trxOf{p.key, f.ID}] == nil {
			finished.add(p.shard, ns, id, f.CreatedAt, f.ID, string(f.Status), f.Version, f.FinishedAt, f.BeginVersion)
		}
	}
	for _, p := range players {
		if p.player == nil {
			continue
		}
		ns, id := int32(p.key.ns), int64(p.key.id)
		for _, l := range p.player.Lots() {
			switch {
			case l.New:
				newLots.add(p.shard, ns, id, l.ID, int32(l.Currency), l.Paid, int64(l.Amount), int64(l.Reserved), l.ExpiresAt, l.Priority, l.CreatedAt, l.TrxID,
					l.Store, l.OrderID, l.Fiat, int64(l.Value), int64(l.ValueReserved), int64(l.Owed), l.Exchanged)
			case l.Changed:
				lots.add(p.shard, ns, id, int32(l.Currency), l.ID, int64(l.Amount), int64(l.Reserved), int64(l.Value), int64(l.ValueReserved), int64(l.Owed))
			}
		}
		if version, pos, at, ok := p.player.Written(); ok {
			rows.add(p.shard, ns, id, version, pos, at)
		}
	}
	b := &pgx.Batch{}
	for _, id := range rows.shards() {
		var parts uint
		var args []any
		for i, table := range tables {
			if table[id] != nil {
				parts |= 1 << i
				args = append(args, table[id].args()...)
			}
		}
		b.Queue(t.s.writeSQL(id, parts), args...)
	}
	b.Queue(setMark, m.committer, m.token)
	b.Queue("COMMIT")
	if err := t.conn.SendBatch(t.ctx, b).Close(); err != nil {
		return err
	}
	t.open = false
	return nil
}

// trxOf is a trx of a batch, by player: ids come from each shard's
// sequence, so two players of a batch on different shards may have trx of
// the same id.
type trxOf struct {
	player playerKey
	id     int64
}

// finishedInBatch maps each trx the plans insert to its finish when a
// later plan of the batch finishes it too (a hold begun and committed in
// one batch: one statement may not change a row twice, so it is inserted
// finished), else to nil.
func finishedInBatch(players []*batchPlayer, of []int, plans []coffer.Plan) map[trxOf]*coffer.TrxFinish {
	inserted := map[trxOf]*coffer.TrxFinish{}
	for i, plan := range plans {
		p := players[of[i]]
		for _, r := range plan.Inserts {
			inserted[trxOf{p.key, r.ID}] = nil
		}
		if f := plan.Finish; f != nil {
			if _, ok := inserted[trxOf{p.key, f.ID}]; ok {
				inserted[trxOf{p.key, f.ID}] = f
			}
		}
	}
	return inserted
}

// columns gathers rows column by column, for a statement that unnests
// one array per column: the first row fixes each column's type. A column
// is a typed slice (col), appended to by a type assertion: appending by
// reflection cost 6–8 % of coffer serve's CPU on writes.
type columns struct {
	n    int
	cols []column
}

func (c *columns) add(values ...any) {
	if c.cols == nil {
		c.cols = make([]column, len(values))
		for i, v := range values {
			c.cols[i] = newColumn(v)
		}
	}
	for i, v := range values {
		c.cols[i].append(v)
	}
	c.n++
}

// args are the columns as the statement's parameters.
func (c *columns) args() []any {
	out := make([]any, len(c.cols))
	for i, col := range c.cols {
		out[i] = col.values()
	}
	return out
}

// column is one column's values, as a slice of its type.
type column interface {
	append(v any)
	values() any
}

type col[T any] []T

func (c *col[T]) append(v any) { *c = append(*c, v.(T)) }
func (c *col[T]) values() any  { return []T(*c) }

// newColumn makes the column for values of v's type: the types the batch
// statements bind.
func newColumn(v any) column {
	switch v.(type) {
	case int32:
		return newCol[int32]()
	case int64:
		return newCol[int64]()
	case bool:
		return newCol[bool]()
	case string:
		return newCol[string]()
	case []byte:
		return newCol[[]byte]()
	case time.Time:
		return newCol[time.Time]()
	case *time.Time:
		return newCol[*time.Time]()
	case *int64:
		return newCol[*int64]()
	case *string:
		return newCol[*string]()
	}
	panic(fmt.Sprintf("postgres: no column for %T", v))
}

func newCol[T any]() column {
	c := make(col[T], 0, 8)
	return &c
}

// perShard gathers the rows of one statement per shard.
type perShard map[coffer.ShardID]*columns

func (p perShard) add(id coffer.ShardID, values ...any) {
	c := p[id]
	if c == nil {
		c = &columns{}
		p[id] = c
	}
	c.add(values...)
}

// shards are the shards with rows, in ascending order.
func (p perShard) shards() []coffer.ShardID {
	ids := make([]coffer.ShardID, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
