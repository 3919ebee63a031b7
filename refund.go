package coffer

import "slices"

// A refund or chargeback takes a store order's currency back from the
// player it was credited to (docs/ledger.md, Refunds): what is left of
// each lot the order's grants created, then, for what the player spent,
// the currency's RefundPolicy. An order is refunded at most once: its
// refund is a trx on the player's shard, found under the player's lock by
// the order (docs/adr/0014-refunds.md). This file holds the rules;
// postgres/ loads the order's lots and stores the plan.

// RefundKind tells why the money of a store order went back.
type RefundKind string

// Refund kinds: the store refunded the order (the player asked, or
// support did), or the payer's bank reversed the payment.
const (
	RefundRefund     RefundKind = "refund"
	RefundChargeback RefundKind = "chargeback"
)

// RefundPolicy is what a refund does, in a currency, with what the player
// already spent of a refunded purchase.
type RefundPolicy string

// Refund policies. WriteOff, the default, takes nothing but what is left
// of the purchase's own lots. ClawBack also takes the rest from the
// player's other lots of the currency, paid first, as far as they go.
const (
	RefundWriteOff RefundPolicy = "write_off"
	RefundClawBack RefundPolicy = "claw_back"
)

// RefundRequest refunds (or charges back) the store order Store/OrderID,
// credited to the scope's player.
type RefundRequest struct {
	Scope
	Store, OrderID string
	Kind           RefundKind
	Reason         string
}

// RefundBody is the JSON body of a refund over HTTP.
type RefundBody struct {
	IdempotencyKey string     `json:"idempotency_key"`
	Store          string     `json:"store"`
	OrderID        string     `json:"order_id"`
	Kind           RefundKind `json:"kind"`
	Reason         string     `json:"reason,omitempty"`
}

// ValidRefund is a RefundRequest checked, with the order it names and the
// hash of its payload.
type ValidRefund struct {
	RefundRequest
	Order PurchaseKey
	Hash  RequestHash
}

// Refund is what a refund trx records besides its ops: the order, why,
// and in each currency what it could not take back (its shortfall: spent
// under write_off, or beyond what the player held under claw_back).
type Refund struct {
	Store     string         `json:"store"`
	OrderID   string         `json:"order_id"`
	Kind      RefundKind     `json:"kind"`
	Shortfall []RefundAmount `json:"shortfall,omitempty"`
}

// RefundAmount is an amount of a currency, as a refund's answer names it.
type RefundAmount struct {
	Currency string `json:"currency"`
	Amount   Amount `json:"amount"`
}

// RefundBalance is an amount of a currency, as a refund trx stores it.
type RefundBalance struct {
	Currency CurrencyID `json:"currency"`
	Amount   Amount     `json:"amount"`
	// Value is what Amount of the order cost, in minor units of the
	// order's fiat: for a shortfall, revenue recognised that the refund
	// could not take back (the revenue report's refund_shortfall_value).
	Value Amount `json:"value,omitempty"`
}

// RefundRow is a refund as its trx row stores it.
type RefundRow struct {
	Store     string          `json:"store"`
	OrderID   string          `json:"order_id"`
	Kind      RefundKind      `json:"kind"`
	Shortfall []RefundBalance `json:"shortfall,omitempty"`
}

// Refund is a stored refund as a trx answers it.
func (c *Catalog) Refund(r *RefundRow) *Refund {
	if r == nil {
		return nil
	}
	out := &Refund{Store: r.Store, OrderID: r.OrderID, Kind: r.Kind}
	for _, s := range r.Shortfall {
		out.Shortfall = append(out.Shortfall, RefundAmount{Currency: c.CurrencyOf(s.Currency).Code, Amount: s.Amount})
	}
	return out
}

// OrderState is a store order as the player's ledger holds it, for its
// refund: the lots its grants created, and the trx that refunded it.
type OrderState struct {
	Key PurchaseKey
	// Lots are the order's lots, each with what of the order it took in.
	Lots []OrderLot
	// RefundedBy is the trx that refunded the order, or 0.
	RefundedBy int64
}

// OrderLot is a lot that holds coins of an order: Share is what the
// order put in it (the grant), what a refund takes back from it at most.
// A store lists them in the order of the grants that created them.
type OrderLot struct {
	LotID    int64
	Currency CurrencyID
	Share    Amount
	// ShareValue is what the share cost: the grant's value (its price;
	// 0 for a grant from before V0015).
	ShareValue Amount
}

// ValidateRefund checks a refund: the scope, the order (store 1–64 bytes,
// order id 1–128, as a purchase names them), the kind and the reason.
// Errors are CodeInvalid.
func (c *Catalog) ValidateRefund(req RefundRequest) (ValidRefund, error) {
	if err := req.Scope.Validate(); err != nil {
		return ValidRefund{}, err
	}
	if checkText("store", req.Store, 1, 64) != nil || checkText("order_id", req.OrderID, 1, 128) != nil {
		return ValidRefund{}, Errorf(CodeInvalid, "store (1–64 bytes) and order_id (1–128 bytes) are required, UTF-8 without NUL")
	}
	if req.Kind != RefundRefund && req.Kind != RefundChargeback {
		return ValidRefund{}, Errorf(CodeInvalid, "kind: must be refund or chargeback")
	}
	if err := checkText("reason", req.Reason, 0, ReasonLenMax); err != nil {
		return ValidRefund{}, err
	}
	v := ValidRefund{RefundRequest: req, Order: PurchaseKey{Namespace: req.Namespace, Store: req.Store, OrderID: req.OrderID}}
	v.Hash = RequestHash{Sum: hashPayload("refund", refundPayload{Store: req.Store, OrderID: req.OrderID, Kind: req.Kind, Reason: req.Reason})}
	return v, nil
}

// refundPayload is what identifies a refund: the request less its scope.
type refundPayload struct {
	Store   string     `json:"store"`
	OrderID string     `json:"order_id"`
	Kind    RefundKind `json:"kind"`
	Reason  string     `json:"reason"`
}

// IDsMax is how many new ids a refund's plan may draw: its trx and a trx
// of expiries.
func (v ValidRefund) IDsMax() int { return 2 }

// Refund plans the refund of an order credited to the player. From each
// of the order's lots it takes what is left of the order's share: the
// lot's amount, not what pending holds reserve from it (those coins are
// the holds' until they commit or roll back). What it could not take, in
// each currency, follows the currency's policy: claw_back takes it from
// the player's other live lots of the currency, paid first, as far as they
// go; write_off takes nothing more. What is still missing is the refund's
// shortfall. Due expiries of the order's currencies are recorded first,
// so an expired lot gives nothing. A known key is a replay or
// idempotency_conflict. Errors: not_found (the order was not credited to
// the player: never, not yet — a hold's grant waits for its commit — or to
// someone else), already_refunded, too_many_lots (a claw back past
// TrxOpsMax), internal.
func (p *Player) Refund(v ValidRefund) Plan {
	if st := p.trx[v.Key()]; st != nil {
		return replay(st, v.Hash)
	}
	o := p.orders[v.Order]
	if o == nil || len(o.Lots) == 0 {
		return Plan{Err: Errorf(CodeNotFound, "store %q order %q was not credited to player %d", v.Store, v.OrderID, v.PlayerID)}
	}
	if o.RefundedBy != 0 {
		return Plan{Err: Errorf(CodeAlreadyRefunded, "store %q order %q was refunded already (trx %d); an order is refunded at most once",
			v.Store, v.OrderID, o.RefundedBy)}
	}
	w := p.begin()
	expired := w.book.Expire(o.currencies())
	id := w.book.NewID()
	w.book.TrxID = id
	ops, shortfall, err := refundOrder(w.book, p.catalog, o)
	if err != nil {
		return Plan{Err: err}
	}
	row := &RefundRow{Store: v.Store, OrderID: v.OrderID, Kind: v.Kind, Shortfall: shortfall}
	trx := w.answer(id, v.IdempotencyKey, TrxRefund, v.Reason, nil, ops)
	trx.Refund = p.catalog.Refund(row)
	w.expiries(expired)
	w.insert(TrxRow{ID: id, Emitter: v.Emitter, IdempotencyKey: v.IdempotencyKey, Hash: v.Hash.Sum, Kind: TrxRefund,
		Status: StatusCommitted, Reason: v.Reason, Refund: row}, ops)
	w.keep(trx, v.Emitter, v.Hash.Sum, nil)
	o.RefundedBy = id
	w.plan.Trx = trx
	return w.done()
}

// credited files the orders an accepted write's grants credit, so that
// a refund planned after it in the same batch finds them, as it would
// had it come alone after it.
func (p *Player) credited(ops []BookOp) {
	for _, op := range ops {
		if op.Kind != OpGrant || op.Purchase == nil {
			continue
		}
		k := PurchaseKey{Namespace: p.state.Namespace, Store: op.Purchase.Store, OrderID: op.Purchase.OrderID}
		o := p.orders[k]
		if o == nil {
			o = &OrderState{Key: k}
			p.orders[k] = o
		}
		o.Lots = append(o.Lots, OrderLot{LotID: op.LotID, Currency: op.Currency, Share: op.Amount, ShareValue: op.Value})
	}
}

// refundOrder plans a refund's ops on book: each of the order's lots
// gives what it has of its share, then, per currency in order of first
// lot, the policy decides about the rest. It returns the ops and the
// shortfall per currency (none where everything was taken back).
func refundOrder(book *Book, c *Catalog, o *OrderState) ([]BookOp, []RefundBalance, error) {
	var ops []BookOp
	var owed []RefundBalance
	for _, l := range o.Lots {
		i := slices.IndexFunc(owed, func(r RefundBalance) bool { return r.Currency == l.Currency })
		if i < 0 {
			i = len(owed)
			owed = append(owed, RefundBalance{Currency: l.Currency})
		}
		op, taken, err := book.Take(l.LotID, l.Share, CauseRefund)
		if err != nil {
			return nil, nil, err
		}
		if taken > 0 {
			ops = append(ops, op)
		}
		owed[i].Amount += l.Share - taken // at most the share: no overflow
		// What the share cost less what the coins taken back were worth
		// (their ValueShare of the lot, which never holds more than the
		// share cost): at least 0.
		owed[i].Value += l.ShareValue + op.Value
	}
	var shortfall []RefundBalance
	for _, r := range owed {
		cur := c.CurrencyOf(r.Currency)
		owedAmount := r.Amount
		if r.Amount > 0 && cur.RefundPolicy == RefundClawBack {
			taken, clawed, err := book.ClawBack(cur, r.Amount, CauseRefund)
			if err != nil {
				return nil, nil, err
			}
			ops = append(ops, taken...)
			r.Amount -= clawed
		}
		if r.Amount > 0 {
			// The coins not taken back carry their share of what the
			// missing coins cost, by the rule of every movement.
			r.Value = ValueShare(r.Value, r.Amount, owedAmount)
			shortfall = append(shortfall, r)
		}
	}
	return ops, shortfall, nil
}

// currencies are those of the order's lots.
func (o *OrderState) currencies() []CurrencyID {
	var out []CurrencyID
	for _, l := range o.Lots {
		if !slices.Contains(out, l.Currency) {
			out = append(out, l.Currency)
		}
	}
	return out
}
