package postgres

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
)

// storedTrx is a trx row read back, with its position in its player's
// order (the finlog's cursor).
type storedTrx struct {
	coffer.StoredTrx
	pos int64
	// beginVersion and begun are a finished hold's begin version and
	// ops, from which withBegin rebuilds its first answer.
	beginVersion *int64
	begun        []coffer.BookOp
}

// pendingGrant is a hold's grant as trx.pending_grants stores it.
type pendingGrant struct {
	Currency  coffer.CurrencyID `json:"c"`
	Amount    coffer.Amount     `json:"a"`
	Paid      bool              `json:"p,omitempty"`
	ExpiresAt *time.Time        `json:"e,omitempty"`
	Priority  int32             `json:"r,omitempty"`
	Purchase  *coffer.Purchase  `json:"u,omitempty"`
}

// pendingJSON is a hold's grants as stored: JSON, or NULL for a trx
// without.
func pendingJSON(grants []coffer.PendingGrant) []byte {
	if len(grants) == 0 {
		return nil
	}
	out := make([]pendingGrant, len(grants))
	for i, g := range grants {
		out[i] = pendingGrant(g)
	}
	raw, _ := json.Marshal(out)
	return raw
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
	Fiat         string            `json:"x"`
	Value        coffer.Amount     `json:"v"`
	// Last tells the op was written by the trx's last step: its start,
	// or the finish of a hold.
	Last bool `json:"f"`
}

// undecodable is the error of a trx row read whole whose JSON columns do
// not decode, or that lacks what its kind needs: damage of that row, not
// a failure of the statement that read it, whose other rows still read.
type undecodable struct{ err error }

func (u *undecodable) Error() string { return "a stored trx does not decode: " + u.err.Error() }
func (u *undecodable) Unwrap() error { return u.err }

// decodeStored decodes a JSON column of a trx row into v.
func decodeStored(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return &undecodable{err}
	}
	return nil
}

// scanTrx reads one row of trxColumns, after the columns in head. The
// answer is rebuilt as the write answered it: its ops, the balances its
// last step left, and a pending hold's grants. A row whose JSON does not
// decode is *undecodable.
func (s *Store) scanTrx(row pgx.Row, head ...any) (*storedTrx, error) {
	var t storedTrx
	var meta, pending, refund, ops []byte
	err := row.Scan(append(head, &t.ID, &t.Emitter, &t.IdempotencyKey, &t.Kind, &t.Status, &t.Reason, &meta, &t.CreatedAt,
		&t.HoldExpiresAt, &pending, &t.Hash, &t.Version, &t.beginVersion, &t.pos, &refund, &t.FinishedBy, &ops)...)
	if err != nil {
		return nil, err
	}
	if len(refund) > 0 {
		var r coffer.RefundRow
		if err := decodeStored(refund, &r); err != nil {
			return nil, err
		}
		t.Refund = s.catalog.Refund(&r)
	}
	if len(meta) > 0 {
		t.Meta = json.RawMessage(meta)
	}
	var sops []storedOp
	if err := decodeStored(ops, &sops); err != nil {
		return nil, err
	}
	all := make([]coffer.BookOp, len(sops))
	// A trx has one step, or two (a hold's begin and its finish): the
	// ops not of its last step are its begin's.
	var last []coffer.BookOp
	for i, o := range sops {
		all[i] = coffer.BookOp{Currency: o.Currency, LotID: o.LotID, Kind: o.Kind, Cause: o.Cause, Amount: o.Amount,
			Paid: o.Paid, BalanceAfter: o.BalanceAfter, PaidAfter: o.PaidAfter, Purchase: o.Purchase, Fiat: o.Fiat, Value: o.Value}
		if o.Last {
			last = append(last, all[i])
		} else {
			t.begun = append(t.begun, all[i])
		}
	}
	t.Ops = s.catalog.Ops(all)
	t.Balances = s.catalog.BalancesAfter(last)
	if len(pending) > 0 {
		var grants []pendingGrant
		if err := decodeStored(pending, &grants); err != nil {
			return nil, err
		}
		for _, g := range grants {
			t.PendingGrants = append(t.PendingGrants, coffer.PendingGrant(g))
		}
		t.Ops = append(t.Ops, s.catalog.PendingOps(t.Status, t.PendingGrants)...)
	}
	return &t, nil
}

// withBegin rebuilds a finished hold's first answer, as its begin gave
// it, for a replay of the begin (coffer.StoredTrx.Begin). Only a write's
// load needs it: reads answer the trx as it is now. A finished hold
// without its begin's version is *undecodable.
func (s *Store) withBegin(t *storedTrx) error {
	if t.Kind != coffer.TrxHold || t.Status == coffer.StatusPending {
		return nil
	}
	if t.beginVersion == nil {
		return &undecodable{fmt.Errorf("finished hold %d has no begin_version", t.ID)}
	}
	begin := s.catalog.BeginAnswer(t.Trx, *t.beginVersion, t.begun, t.PendingGrants)
	t.Begin = &begin
	return nil
}

// scanLot reads one row of lotColumns, after the columns in head.
func scanLot(rows pgx.Rows, head ...any) (*coffer.BookLot, error) {
	l := &coffer.BookLot{}
	err := rows.Scan(append(head, &l.ID, &l.Currency, &l.Paid, &l.Amount, &l.Reserved, &l.ExpiresAt, &l.Priority, &l.CreatedAt,
		&l.Store, &l.OrderID, &l.Fiat, &l.Value, &l.ValueReserved, &l.Owed, &l.Exchanged, &l.TrxID)...)
	return l, err
}

// purchaseJSON is an op's purchase as stored: JSON, or NULL.
func purchaseJSON(p *coffer.Purchase) []byte {
	if p == nil {
		return nil
	}
	raw, _ := json.Marshal(p)
	return raw
}

// refundJSON is a refund trx's order, kind and shortfall as stored: JSON
// (trx_N_refund indexes its store and order_id), or NULL for other trx.
func refundJSON(r *coffer.RefundRow) []byte {
	if r == nil {
		return nil
	}
	raw, _ := json.Marshal(r)
	return raw
}

// metaText is a trx's meta as stored: its canonical text, the bytes
// every answer carries, or NULL when there is none.
func metaText(meta json.RawMessage) *string {
	if len(meta) == 0 {
		return nil
	}
	text := string(meta)
	return &text
}
