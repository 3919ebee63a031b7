package postgres

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// storedTrx is a trx row read back, with what only the store needs.
type storedTrx struct {
	coffer.Trx
	hash          []byte
	pendingGrants []pendingGrant
	// pos is the trx's position in its player's order.
	pos int64
}

// pendingGrant is a hold's grant, kept in trx.pending_grants until commit.
type pendingGrant struct {
	Currency  coffer.CurrencyID `json:"c"`
	Amount    coffer.Amount     `json:"a"`
	Paid      bool              `json:"p,omitempty"`
	ExpiresAt *time.Time        `json:"e,omitempty"`
	Priority  int32             `json:"r,omitempty"`
	Purchase  *coffer.Purchase  `json:"u,omitempty"`
}

// storedOp is an op as trxColumns aggregates it.
type storedOp struct {
	Currency     coffer.CurrencyID `json:"c"`
	Amount       coffer.Amount     `json:"a"`
	Kind         coffer.OpKind     `json:"k"`
	Paid         bool              `json:"p"`
	LotID        int64             `json:"l"`
	BalanceAfter coffer.Amount     `json:"b"`
	PaidAfter    coffer.Amount     `json:"q"`
	Purchase     *coffer.Purchase  `json:"u"`
	Cause        coffer.OpCause    `json:"z"`
	// Last tells the op was written by the trx's last step: its start,
	// or the finish of a hold.
	Last bool `json:"f"`
}

func (s *Store) code(id coffer.CurrencyID) string { return s.currency(id).Code }

// currency is the configured currency of id, or one named "unknown" for a
// currency the configuration no longer lists: rows in it stay readable,
// and a pending hold in it can still finish.
func (s *Store) currency(id coffer.CurrencyID) *coffer.Currency {
	if c, ok := s.catalog.CurrencyByID(id); ok {
		return c
	}
	return &coffer.Currency{ID: id, Code: "unknown", SpendOrder: coffer.DefaultSpendOrder}
}

// scanTrx reads one row of trxColumns.
func (s *Store) scanTrx(row pgx.Row) (*storedTrx, error) {
	var t storedTrx
	var meta, metaJSONB, pending, ops []byte
	err := row.Scan(&t.ID, &t.IdempotencyKey, &t.Kind, &t.Status, &t.Reason, &meta, &metaJSONB, &t.CreatedAt,
		&t.HoldExpiresAt, &pending, &t.hash, &t.Version, &t.pos, &ops)
	if err != nil {
		return nil, err
	}
	switch {
	case len(meta) > 0:
		t.Meta = json.RawMessage(meta)
	case len(metaJSONB) > 0:
		t.Meta = coffer.StoredMeta(metaJSONB)
	}
	var sops []storedOp
	if err := json.Unmarshal(ops, &sops); err != nil {
		return nil, err
	}
	t.Ops = make([]coffer.Op, 0, len(sops))
	var last []coffer.BookOp
	for _, o := range sops {
		t.Ops = append(t.Ops, coffer.Op{Currency: s.code(o.Currency), Amount: o.Amount, Kind: o.Kind, Paid: o.Paid,
			LotID: o.LotID, BalanceAfter: o.BalanceAfter, Purchase: o.Purchase})
		if o.Last {
			last = append(last, coffer.BookOp{Currency: o.Currency, BalanceAfter: o.BalanceAfter, PaidAfter: o.PaidAfter})
		}
	}
	t.Balances = s.balancesAfter(last)
	if len(pending) > 0 {
		if err := json.Unmarshal(pending, &t.pendingGrants); err != nil {
			return nil, err
		}
		if t.Status == coffer.StatusPending {
			for _, g := range t.pendingGrants {
				t.Ops = append(t.Ops, coffer.Op{Currency: s.code(g.Currency), Amount: g.Amount, Kind: coffer.OpGrant,
					Paid: g.Paid, Pending: true, Purchase: g.Purchase})
			}
		}
	}
	t.CreatedAt = t.CreatedAt.UTC()
	if t.HoldExpiresAt != nil {
		u := t.HoldExpiresAt.UTC()
		t.HoldExpiresAt = &u
	}
	return &t, nil
}

// queueTrxByKey reads the trx of a scope into *out (nil if none).
func (s *Store) queueTrxByKey(b *pgx.Batch, t *playerTx, sc coffer.Scope, out **storedTrx) {
	b.Queue(t.q.trxByKey, sc.Namespace, sc.PlayerID, sc.Emitter, sc.IdempotencyKey).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		if rows.Next() {
			st, err := s.scanTrx(rows)
			if err != nil {
				return err
			}
			*out = st
		}
		return rows.Err()
	})
}

// queueLots reads the player's lots with an amount into the book: all of
// them, or only those in currencies when it is not nil.
func queueLots(b *pgx.Batch, t *playerTx, book *coffer.Book, currencies []int32) {
	scan := func(rows pgx.Rows) error { return scanLots(rows, book) }
	if currencies == nil {
		b.Queue(t.q.lots, t.ns, t.player).Query(scan)
		return
	}
	b.Queue(t.q.lotsIn, t.ns, t.player, currencies).Query(scan)
}

func scanLots(rows pgx.Rows, book *coffer.Book) error {
	defer rows.Close()
	for rows.Next() {
		l := &coffer.BookLot{}
		if err := rows.Scan(&l.ID, &l.Currency, &l.Paid, &l.Amount, &l.Reserved, &l.ExpiresAt, &l.Priority, &l.CreatedAt); err != nil {
			return err
		}
		if err := book.Add(l); err != nil {
			return err
		}
	}
	return rows.Err()
}

// replay answers a write whose key was seen before: the original result if
// the payload is the same, idempotency_conflict otherwise.
func replay(st *storedTrx, hash coffer.RequestHash) (coffer.Trx, bool, error) {
	if !hash.Same(st.hash) {
		return coffer.Trx{}, false, coffer.Errorf(coffer.CodeIdempotencyConflict,
			"idempotency_key %q was used for another request (trx %d)", st.IdempotencyKey, st.ID)
	}
	return st.Trx, true, nil
}

// balancesAfter is the player's balances right after a trx, as its ops
// leave them: in each currency the ops touch, in order of first touch, the
// last op's balance_after. A replay rebuilds them from the stored ops the
// same way, so the answer is the same.
func (s *Store) balancesAfter(ops []coffer.BookOp) []coffer.Balance {
	var out []coffer.Balance
	at := map[coffer.CurrencyID]int{}
	for _, op := range ops {
		i, ok := at[op.Currency]
		if !ok {
			i = len(out)
			at[op.Currency] = i
			out = append(out, coffer.Balance{Currency: s.code(op.Currency)})
		}
		out[i].Total, out[i].Paid, out[i].Free = op.BalanceAfter, op.PaidAfter, op.BalanceAfter-op.PaidAfter
	}
	return out
}

// apiOps turns planned ops into the response's ops.
func (s *Store) apiOps(ops []coffer.BookOp) []coffer.Op {
	out := make([]coffer.Op, 0, len(ops))
	for _, o := range ops {
		out = append(out, coffer.Op{Currency: s.code(o.Currency), Amount: o.Amount, Kind: o.Kind, Paid: o.Paid,
			LotID: o.LotID, BalanceAfter: o.BalanceAfter, Purchase: o.Purchase})
	}
	return out
}

// queueOps inserts ops of trxID numbered from seq, at the write's time,
// each at the next position of the player's order.
func queueOps(b *pgx.Batch, t *playerTx, trxID int64, seq int32, ops []coffer.BookOp) {
	n := len(ops)
	switch n {
	case 0:
		return
	case 1:
		o := ops[0]
		b.Queue(t.q.insertOp, t.ns, t.player, t.now, trxID, seq, int32(o.Currency), o.LotID, string(o.Kind), string(o.Cause),
			int64(o.Amount), o.Paid, int64(o.BalanceAfter), int64(o.PaidAfter), purchaseJSON(o.Purchase), t.nextPos())
		return
	}
	trxIDs, seqs, pos := make([]int64, n), make([]int32, n), make([]int64, n)
	cur, lots := make([]int32, n), make([]int64, n)
	kinds, causes := make([]string, n), make([]string, n)
	amounts, after, paidAfter := make([]int64, n), make([]int64, n), make([]int64, n)
	paid, purchases := make([]bool, n), make([][]byte, n)
	for i, o := range ops {
		trxIDs[i], seqs[i], pos[i] = trxID, seq+int32(i), t.nextPos()
		cur[i], lots[i] = int32(o.Currency), o.LotID
		kinds[i], causes[i] = string(o.Kind), string(o.Cause)
		amounts[i], after[i], paidAfter[i] = int64(o.Amount), int64(o.BalanceAfter), int64(o.PaidAfter)
		paid[i], purchases[i] = o.Paid, purchaseJSON(o.Purchase)
	}
	b.Queue(t.q.insertOps, t.ns, t.player, t.now, trxIDs, seqs, cur, lots, kinds, causes, amounts, paid, after, paidAfter, purchases, pos)
}

// purchaseJSON is an op's purchase as stored: JSON, or NULL.
func purchaseJSON(p *coffer.Purchase) []byte {
	if p == nil {
		return nil
	}
	raw, _ := json.Marshal(p)
	return raw
}

// queueLotWrites inserts the book's new lots and updates its changed ones.
func queueLotWrites(b *pgx.Batch, t *playerTx, book *coffer.Book, trxID int64) {
	var newIDs, newAmounts, updIDs, updAmounts, updReserved []int64
	var newCur, newPrio, updCur []int32
	var newPaid []bool
	var newExp []*time.Time
	for _, l := range book.Lots() {
		switch {
		case l.New:
			// A new lot reserves nothing (the column's default): it comes
			// from a grant, and a hold's begin, the one write that
			// reserves, grants nothing.
			newIDs, newAmounts = append(newIDs, l.ID), append(newAmounts, int64(l.Amount))
			newCur, newPrio = append(newCur, int32(l.Currency)), append(newPrio, l.Priority)
			newPaid, newExp = append(newPaid, l.Paid), append(newExp, l.ExpiresAt)
		case l.Changed:
			updCur, updIDs = append(updCur, int32(l.Currency)), append(updIDs, l.ID)
			updAmounts, updReserved = append(updAmounts, int64(l.Amount)), append(updReserved, int64(l.Reserved))
		}
	}
	switch len(newIDs) {
	case 0:
	case 1:
		b.Queue(t.q.insertLot, t.ns, t.player, t.now, trxID, newIDs[0], newCur[0], newPaid[0], newAmounts[0], newExp[0], newPrio[0])
	default:
		b.Queue(t.q.insertLots, t.ns, t.player, t.now, trxID, newIDs, newCur, newPaid, newAmounts, newExp, newPrio)
	}
	switch len(updIDs) {
	case 0:
	case 1:
		b.Queue(t.q.updateLot, t.ns, t.player, updCur[0], updIDs[0], updAmounts[0], updReserved[0])
	default:
		b.Queue(t.q.updateLots, t.ns, t.player, updCur, updIDs, updAmounts, updReserved)
	}
}

// queueExpireTrx records expire ops in a trx of their own (kind expire,
// emitter 0), so that the finlog shows when and why currency left. Queued
// before a write's own trx (the expiries due when it began) or after its
// ops (a hold's release or grant onto an expired lot), it takes its
// positions there in the player's order.
func (s *Store) queueExpireTrx(b *pgx.Batch, t *playerTx, ops []coffer.BookOp) {
	if len(ops) == 0 {
		return
	}
	id := t.nextID()
	queueTrxRow(b, t, coffer.Trx{ID: id, IdempotencyKey: "expire-" + strconv.FormatInt(id, 10), Kind: coffer.TrxExpire,
		Status: coffer.StatusCommitted, Reason: "expired", Version: t.version}, 0, []byte{}, nil)
	queueOps(b, t, id, 0, ops)
}

// queueTrxRow inserts a new trx at the write's time and the next position
// of the player's order.
func queueTrxRow(b *pgx.Batch, t *playerTx, trx coffer.Trx, emitter coffer.Emitter, hash, pending []byte) {
	b.Queue(t.q.insertTrx, t.ns, t.player, t.now, trx.ID, emitter, trx.IdempotencyKey, hash,
		trx.Kind, trx.Status, trx.Reason, metaText(trx.Meta), trx.HoldExpiresAt, pending, trx.Version, t.nextPos())
}

// nextID hands out an id fetched with the first batch, or fetches more
// when that guess was short. A failure is kept in t.idErr, for the caller to
// check once planning is done, and yields id 0, which is never written.
func (t *playerTx) nextID() int64 {
	if len(t.ids) == 0 && t.idErr == nil {
		rows, err := t.conn.Query(t.ctx, t.q.nextIDs, 8)
		if err == nil {
			t.ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		t.idErr = err
	}
	if len(t.ids) == 0 {
		return 0
	}
	id := t.ids[0]
	t.ids = t.ids[1:]
	return id
}
