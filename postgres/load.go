package postgres

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// load is the first round trip: BEGIN, and for each shard the players'
// rows and ids, their lots, their trx under the batch's keys and the
// orders their refunds name; then, if check is set, its token (0 without
// a row). It makes each player's coffer.Player. A careful batch takes
// the players' locks as it reads their rows (batchSQL.lock) and reads
// their unread keys too. Any other reads at one snapshot (REPEATABLE
// READ), without the locks (batchSQL.peek): the writes' statement takes
// them, and fails (raced) where another transaction changed a player
// since (docs/adr/0026-batch-snapshot.md); it leaves the unread keys
// unread (batchTx.fresh).
func (t *batchTx) load(players []*batchPlayer, check *mark, careful bool) (token int64, err error) {
	byKey := make(map[playerKey]*batchPlayer, len(players))
	rowsOf, lots, keys, orders := perShard{}, perShard{}, perShard{}, perShard{}
	for _, p := range players {
		byKey[p.key] = p
		ns, id := int32(p.key.ns), int64(p.key.id)
		rowsOf.add(p.shard, ns, id, int32(p.needs.IDs))
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
		if careful {
			for _, k := range p.unread() {
				keys.add(p.shard, ns, id, int32(k.Emitter), k.IdempotencyKey)
			}
		}
		for _, o := range p.needs.Orders {
			orders.add(p.shard, ns, id, o.Store, o.OrderID)
			p.state.Orders = append(p.state.Orders, &coffer.OrderState{Key: o})
		}
	}
	l := &loading{s: t.s, byKey: byKey}
	b := &pgx.Batch{}
	if careful {
		b.Queue("BEGIN")
	} else {
		b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ")
	}
	// Shard after shard, so that the locks are taken in one order.
	for _, id := range rowsOf.shards() {
		q := &t.s.q(id).batch
		t.s.queue(b, q.players(careful), rowsOf[id]).Query(l.players)
		if lots[id] != nil {
			t.s.queue(b, q.lots, lots[id]).Query(l.lots)
		}
		if keys[id] != nil {
			t.s.queue(b, q.trx, keys[id]).Query(l.trx)
		}
		if orders[id] != nil {
			t.s.queue(b, q.orders, orders[id]).Query(l.orders)
			t.s.queue(b, q.exchanges, orders[id]).Query(l.exchanges)
		}
	}
	// After the locks: a careful cut attempt held them until it ended,
	// so the mark is read once its COMMIT has run or never will; one that
	// read at its snapshot held the mark from its last statement on, or
	// fails on it once this attempt commits (readMark).
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
		if !p.read {
			return 0, fmt.Errorf("player %d/%d: its row was not read", p.key.ns, p.key.id)
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

// players reads the players' rows as the lock or peek returns them, and
// their ids.
func (l *loading) players(rows pgx.Rows) error {
	for rows.Next() {
		var k playerKey
		var version, pos int64
		var last, now time.Time
		var ids []int64
		if err := rows.Scan(&k.ns, &k.id, &version, &pos, &last, &now, &ids); err != nil {
			return err
		}
		if p := l.byKey[k]; p != nil {
			p.read, p.ids = true, ids
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
		if err == nil {
			err = l.s.withBegin(st)
		}
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

// errKeyStored is an attempt's failure when a write's own key, left
// unread, has a trx: the write was sent again. settle runs the batch
// again, careful.
var errKeyStored = errors.New("a write's own key has a trx")

// raced tells whether an attempt that read at its snapshot met another
// transaction: one that changed a player since (serialization_failure,
// playerTable), or one that holds a lock the attempt needs
// (lock_not_available: such an attempt waits for none, batchSQL.peek).
func raced(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == sqlstateSerializationFailure || pg.Code == sqlstateLockNotAvailable)
}

// keyStored tells whether an attempt failed because a write's own key it
// did not read has a trx: the key's read (errKeyStored), or the insert of
// the write's trx (trx_N_idempotency).
func keyStored(err error) bool { return errors.Is(err, errKeyStored) || idempotencyViolation(err) }

// fresh proves new, after an attempt that did not read them (load), the
// players' own keys: one that a plan stores a trx under needs nothing
// more, since trx_N_idempotency refuses the insert if the key has one;
// the others (answered as a replay of another in the batch, or not
// planned in time; a write refused fails the attempt before this,
// errRefusedAtSnapshot) are read in one more round trip, at the batch's
// snapshot. Cost: none for a batch whose writes all store their trx;
// else a round trip and a statement per shard of such writes. Any trx
// found fails the attempt (errKeyStored).
func (t *batchTx) fresh(players []*batchPlayer, of []int, plans []coffer.Plan) error {
	stored := map[playerKey][]coffer.TrxKey{}
	for i, plan := range plans {
		for _, row := range plan.Inserts {
			k := players[of[i]].key
			stored[k] = append(stored[k], coffer.TrxKey{Emitter: row.Emitter, IdempotencyKey: row.IdempotencyKey})
		}
	}
	keys := perShard{}
	for _, p := range players {
		for _, k := range p.unread() {
			if !slices.Contains(stored[p.key], k) {
				keys.add(p.shard, int32(p.key.ns), int64(p.key.id), int32(k.Emitter), k.IdempotencyKey)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	found := false
	b := &pgx.Batch{}
	for _, id := range keys.shards() {
		t.s.queue(b, t.s.q(id).batch.trx, keys[id]).Query(func(rows pgx.Rows) error {
			found = found || rows.Next()
			rows.Close()
			return rows.Err()
		})
	}
	if err := t.conn.SendBatch(t.ctx, b).Close(); err != nil {
		return err
	}
	if found {
		return errKeyStored
	}
	return nil
}

// unread are the player's own keys (coffer.Needs.Own) that load reads
// only when careful: those its writes do not also name.
func (p *batchPlayer) unread() []coffer.TrxKey {
	var out []coffer.TrxKey
	for _, k := range p.needs.Own {
		if !slices.Contains(p.needs.Keys, k) {
			out = append(out, k)
		}
	}
	return out
}
