package coffer

import "slices"

// A refund or chargeback takes a store order's currency back from the
// player it was credited to (docs/ledger.md, Refunds): what is left of
// each lot the order's grants created and of each lot exchanges made from
// them, then, for what the player spent, the currency's RefundPolicy. An order is refunded at most once: its
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

// ValidRefund is a RefundRequest checked, with the order it names and the
// hash of its payload.
type ValidRefund struct {
	RefundRequest
	Order PurchaseKey
	Hash  RequestHash
}

// Refund is what a refund trx records besides its ops: the order, why,
// in each currency of the order what the coins it took back from lots
// the order's exchanges made count for (Exchanged), and what it could not
// take back (its shortfall: spent under write_off, or beyond what the
// player held under claw_back).
type Refund struct {
	Store     string         `json:"store"`
	OrderID   string         `json:"order_id"`
	Kind      RefundKind     `json:"kind"`
	Exchanged []RefundAmount `json:"exchanged,omitempty"`
	Shortfall []RefundAmount `json:"shortfall,omitempty"`
}

// RefundAmount is an amount of a currency, as a refund's answer names it.
// Value, in a shortfall only, is what Amount of the order cost, in minor
// units of the order's fiat (RefundBalance.Value): the revenue the refund
// could not take back.
type RefundAmount struct {
	Currency string `json:"currency"`
	Amount   Amount `json:"amount"`
	Value    Amount `json:"value,omitempty"`
}

// RefundBalance is an amount of a currency, as a refund trx stores it.
type RefundBalance struct {
	Currency CurrencyID `json:"currency"`
	Amount   Amount     `json:"amount"`
	// Value is what Amount of the order cost, in minor units of the
	// order's fiat: for a shortfall, what the coins the refund could not
	// take back cost (spent, expired, reserved or exchanged away; the
	// revenue report's refund_shortfall_value).
	Value Amount `json:"value,omitempty"`
}

// RefundRow is a refund as its trx row stores it. Exchanged is, per
// currency of the order, what the coins taken back from lots its
// exchanges made count for in that currency (the audit adds it to the
// coins taken back there).
type RefundRow struct {
	Store     string          `json:"store"`
	OrderID   string          `json:"order_id"`
	Kind      RefundKind      `json:"kind"`
	Exchanged []RefundBalance `json:"exchanged,omitempty"`
	Shortfall []RefundBalance `json:"shortfall,omitempty"`
}

// Refund is a stored refund as a trx answers it.
func (c *Catalog) Refund(r *RefundRow) *Refund {
	if r == nil {
		return nil
	}
	return &Refund{Store: r.Store, OrderID: r.OrderID, Kind: r.Kind, Exchanged: c.refundAmounts(r.Exchanged), Shortfall: c.refundAmounts(r.Shortfall)}
}

func (c *Catalog) refundAmounts(in []RefundBalance) []RefundAmount {
	var out []RefundAmount
	for _, s := range in {
		out = append(out, RefundAmount{Currency: c.CurrencyOf(s.Currency).Code, Amount: s.Amount, Value: s.Value})
	}
	return out
}

// OrderState is a store order as the player's ledger holds it, for its
// refund: the lots its grants created, the exchanges that made lots of
// its coins, and the trx that refunded it.
type OrderState struct {
	Key PurchaseKey
	// Lots are the order's lots, each with what of the order it took in.
	Lots []OrderLot
	// Exchanges are the ops of the exchanges that made lots carrying the
	// order (Worth: a lot an exchange makes from a paid lot carries its
	// order), in the player's order: a refund follows the order's coins
	// through them. A store lists at least the paid ops with the cause
	// exchange of those exchanges, each exchange's ops together; ops of
	// other orders are ignored.
	Exchanges []ExchangeOp
	// RefundedBy is the trx that refunded the order, or 0.
	RefundedBy int64
}

// ExchangeOp is an op of an exchange, as a refund reads it to follow an
// order's coins from the lot the exchange consumed to the lot it made.
type ExchangeOp struct {
	TrxID    int64
	LotID    int64
	Currency CurrencyID
	Kind     OpKind
	Cause    OpCause
	Paid     bool
	Amount   Amount
}

// OrderLot is a lot that holds coins of an order: Share is what the
// order put in it (the grant), what a refund takes back from it at most.
// A store lists them in the order of the grants that created them.
type OrderLot struct {
	LotID    int64
	Currency CurrencyID
	Share    Amount
	// ShareValue is what the share cost: the grant's value (its price).
	ShareValue Amount
}

// ValidateRefund checks a refund: the scope, the order (its store and
// order id as a purchase names them: checkOrder), the kind and the reason.
// Errors are CodeInvalid.
func (c *Catalog) ValidateRefund(req RefundRequest) (ValidRefund, error) {
	if err := req.Scope.Validate(); err != nil {
		return ValidRefund{}, err
	}
	if err := checkOrder("", req.Store, req.OrderID); err != nil {
		return ValidRefund{}, err
	}
	if req.Kind != RefundRefund && req.Kind != RefundChargeback {
		return ValidRefund{}, Errorf(CodeInvalid, "kind: must be refund or chargeback")
	}
	if err := checkText("reason", req.Reason, 0, ReasonLenMax, inBytes); err != nil {
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

// Refund plans the refund of an order credited to the player. From each
// of the order's lots, and each lot exchanges made of its coins
// (follow), it takes what is left of the order's share: the lot's
// amount, not what pending holds reserve from it (those coins are the
// holds' until they commit or roll back). What it could not take, in
// each currency of the order (refundOrder counts the exchanged coins
// there), follows the currency's policy: claw_back takes it from
// the player's other live lots of the currency, paid first, as far as they
// go; write_off takes nothing more. What is still missing is the refund's
// shortfall. Due expiries of the order's currencies are recorded first,
// so an expired lot gives nothing. A known key is a replay or
// idempotency_conflict. Errors: not_found (the order was not credited to
// the player: never, not yet — a hold's grant waits for its commit — or to
// someone else), already_refunded, internal. No bound refuses a refund:
// it takes from lots the player holds, at most LotsMax per currency,
// however many exchanges spread the order's coins over.
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
	lots, err := o.follow()
	if err != nil {
		return Plan{Err: err}
	}
	w := p.begin()
	expired := w.p.book.Expire(currenciesOf(lots))
	id := w.p.book.NewID()
	w.p.book.TrxID = id
	ops, exchanged, shortfall, err := refundOrder(w.p.book, p.catalog, o, lots)
	if err != nil {
		return Plan{Err: err}
	}
	row := &RefundRow{Store: v.Store, OrderID: v.OrderID, Kind: v.Kind, Exchanged: exchanged, Shortfall: shortfall}
	trx := w.answer(id, v.Scope, TrxRefund, v.Reason, nil, ops)
	trx.Refund = p.catalog.Refund(row)
	w.expiries(expired)
	w.insert(TrxRow{ID: id, Emitter: v.Emitter, IdempotencyKey: v.IdempotencyKey, Hash: v.Hash.Sum, Kind: TrxRefund,
		Status: StatusCommitted, Reason: v.Reason, Refund: row}, ops)
	w.keep(trx, v.Hash.Sum, nil)
	o.RefundedBy = id
	w.plan.Trx = trx
	return w.done()
}

// credit files the orders an accepted write's grants credit, so that
// a refund planned after it in the same batch finds them, as it would
// had it come alone after it.
func (p *Player) credit(ops []BookOp) {
	for _, op := range ops {
		if op.Kind != OpGrant || op.Purchase == nil {
			continue
		}
		k := op.Purchase.Key(p.state.Namespace)
		o := p.orders[k]
		if o == nil {
			o = &OrderState{Key: k}
			p.orders[k] = o
		}
		o.Lots = append(o.Lots, OrderLot{LotID: op.LotID, Currency: op.Currency, Share: op.Amount, ShareValue: op.Value})
	}
}

// orderLot is a lot holding coins of an order, as a refund follows
// them: one of the order's own lots (parent −1), or one an exchange made
// from lot parent (an index into the same list, always before it) by
// consuming consumed coins there for the granted coins here. Root is the
// index of the order's own lot (OrderState.Lots) the coins came from;
// share is what the refund takes back from the lot at most.
type orderLot struct {
	id                int64
	currency          CurrencyID
	root, parent      int
	share             Amount
	consumed, granted Amount
}

// follow lists the lots holding the order's coins: its own lots, then
// every lot an exchange made from one of them, or from a lot made so, in
// the order the exchanges made them. Errors: internal, when an
// exchange's paid consumes and paid grants do not pair (a damaged
// ledger: the audit says where).
func (o *OrderState) follow() ([]orderLot, error) {
	lots := make([]orderLot, 0, len(o.Lots))
	at := make(map[int64]int, len(o.Lots))
	for i, l := range o.Lots {
		at[l.LotID] = len(lots)
		lots = append(lots, orderLot{id: l.LotID, currency: l.Currency, root: i, parent: -1, share: l.Share})
	}
	for ops := o.Exchanges; len(ops) > 0; {
		n := 1
		for n < len(ops) && ops[n].TrxID == ops[0].TrxID {
			n++
		}
		made, err := exchangeMade(ops[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range made {
			if i, ok := at[m.parent.LotID]; ok {
				at[m.lot.LotID] = len(lots)
				lots = append(lots, orderLot{id: m.lot.LotID, currency: m.lot.Currency, root: lots[i].root, parent: i,
					share: m.lot.Amount, consumed: -m.parent.Amount, granted: m.lot.Amount})
			}
		}
		ops = ops[n:]
	}
	return lots, nil
}

// madeLot is a paid lot an exchange made (its grant), and the consume of
// the paid lot it was made from.
type madeLot struct{ parent, lot ExchangeOp }

// exchangeMade pairs the ops of one exchange into the lots it made:
// exchangePaid makes one paid lot per paid lot it consumed with the cause
// exchange (one whose share rounds to nothing, and one into a currency
// that cannot be paid, is consumed with the cause change and makes no
// lot), in the order of the consumes. Errors: internal, when the counts
// differ.
func exchangeMade(ops []ExchangeOp) ([]madeLot, error) {
	var consumes, grants []ExchangeOp
	for _, op := range ops {
		switch {
		case !op.Paid || op.Cause != CauseExchange:
		case op.Kind == OpConsume:
			consumes = append(consumes, op)
		case op.Kind == OpGrant:
			grants = append(grants, op)
		}
	}
	if len(consumes) != len(grants) {
		return nil, Errorf(CodeInternal, "exchange %d consumed %d paid lots and made %d", ops[0].TrxID, len(consumes), len(grants))
	}
	made := make([]madeLot, len(grants))
	for i := range grants {
		made[i] = madeLot{parent: consumes[i], lot: grants[i]}
	}
	return made, nil
}

// exchanged files an accepted exchange's ops under the orders the
// player's refunds name, so that a refund planned after it in the same
// batch follows the coins it made, as it would had it come alone after
// it (follow ignores the lots of other orders).
func (p *Player) exchanged(trxID int64, ops []BookOp) {
	if len(p.orders) == 0 {
		return
	}
	xs := make([]ExchangeOp, len(ops))
	for i, op := range ops {
		xs[i] = ExchangeOp{TrxID: trxID, LotID: op.LotID, Currency: op.Currency, Kind: op.Kind, Cause: op.Cause, Paid: op.Paid, Amount: op.Amount}
	}
	for _, o := range p.orders {
		o.Exchanges = append(o.Exchanges, xs...)
	}
}

// refundOrder plans a refund's ops on book: each lot holding the order's
// coins gives what it has, up to its share; then the coins taken back
// from each lot an exchange made count, in the currency of the lot it
// was made from, for their ValueShare of what the exchange consumed there
// (its own ratio, rounded as value is: all of it when every coin it made
// came back), from the last lot made back to the order's own. Per
// currency of the order, in order of first lot, the policy decides about
// what did not come back. It returns the ops, what the exchanged coins
// counted for and the shortfall per currency (none where everything was
// taken back).
func refundOrder(book *Book, c *Catalog, o *OrderState, lots []orderLot) ([]BookOp, []RefundBalance, []RefundBalance, error) {
	var ops []BookOp
	back := make([]Amount, len(lots))
	own, valueBack := make([]Amount, len(o.Lots)), make([]Amount, len(o.Lots))
	for i, l := range lots {
		op, taken, err := book.Take(l.id, l.share, CauseRefund)
		if err != nil {
			return nil, nil, nil, err
		}
		if taken > 0 {
			ops = append(ops, op)
		}
		back[i] = taken
		if l.parent < 0 {
			own[l.root] = taken
		}
		valueBack[l.root] -= op.Value // what the coins taken back were worth
	}
	// What did not come back of each lot, from the last made: its own
	// coins and what exchanges made of it (all after it) counted back, at
	// most its share.
	short := make([]Amount, len(lots))
	for i := len(lots) - 1; i >= 0; i-- {
		l := lots[i]
		short[i] = l.share - min(back[i], l.share)
		if l.parent >= 0 {
			back[l.parent] += ValueShare(l.consumed, back[i], l.granted)
		}
	}
	var owed, exchanged []RefundBalance
	for i, l := range o.Lots {
		j := slices.IndexFunc(owed, func(r RefundBalance) bool { return r.Currency == l.Currency })
		if j < 0 {
			j = len(owed)
			owed = append(owed, RefundBalance{Currency: l.Currency})
			exchanged = append(exchanged, RefundBalance{Currency: l.Currency})
		}
		got := l.Share - short[i]
		owed[j].Amount += short[i]
		exchanged[j].Amount += got - own[i] // own ≤ got: taken from the lot, at most its share
		// What the share cost less what the coins taken back were worth
		// (their ValueShare of each lot, which never holds more than the
		// share cost): at least 0.
		owed[j].Value += l.ShareValue - valueBack[i]
	}
	shortfall, err := applyPolicy(book, c, owed, &ops)
	if err != nil {
		return nil, nil, nil, err
	}
	oweHeld(book, lots, short, shortfall)
	return ops, nonZero(exchanged), shortfall, nil
}

// oweHeld marks, on each lot holding the order's coins, what pending
// holds reserve there of the coins the refund counted short (short, per
// lot, in its currency): should a hold roll back, they go to the refund
// (Book.Release), not back to the player. What the lots owe counts in
// the currency of the order's lot their coins came from (worthAtMost),
// for at most that currency's shortfall, which claw_back may have
// covered: the most coins of a lot whose worth fits in what is left
// (coinsWorth), so that a refund never takes back more than it counted
// short. The order's own lots owe first.
func oweHeld(book *Book, lots []orderLot, short []Amount, shortfall []RefundBalance) {
	left := map[CurrencyID]Amount{}
	for _, s := range shortfall {
		left[s.Currency] = s.Amount
	}
	for i, l := range lots {
		cur := lots[l.root].currency
		owed := book.owe(l.id, min(short[i], coinsWorth(lots, i, left[cur])))
		left[cur] -= worthAtMost(lots, i, owed)
	}
}

// worthAtMost is what amount coins of lot i count for, at most, in the
// currency of the order's lot they came from: through each exchange back
// to it, k consumed for m made, k×amount/m rounded up (refundOrder counts
// coins taken back to the nearest; owing a coin counts it whole).
func worthAtMost(lots []orderLot, i int, amount Amount) Amount {
	for ; lots[i].parent >= 0; i = lots[i].parent {
		q, r := mulDiv(lots[i].consumed, amount, lots[i].granted) // amount ≤ granted
		if r > 0 {
			q++
		}
		amount = Amount(q)
	}
	return amount
}

// coinsWorth is the most coins of lot i (at most all it was made with)
// that worthAtMost counts for no more than worth: k×x/m rounded up is at
// most w exactly when x is at most w×m/k rounded down, taken from the
// order's lot down to lot i, each exchange's w the most of the lot it
// consumed.
func coinsWorth(lots []orderLot, i int, worth Amount) Amount {
	l := lots[i]
	if l.parent < 0 {
		return worth
	}
	w := coinsWorth(lots, l.parent, worth)
	if w >= l.consumed {
		return l.granted
	}
	q, _ := mulDiv(w, l.granted, l.consumed) // w < consumed
	return Amount(q)
}

// applyPolicy follows each currency's policy about what is owed (in
// order): claw_back takes it from the player's other live lots of the
// currency, paid first, as far as they go, and appends the ops to ops;
// write_off takes nothing more. It returns what is still missing, with
// its ValueShare of what the owed coins cost.
func applyPolicy(book *Book, c *Catalog, owed []RefundBalance, ops *[]BookOp) ([]RefundBalance, error) {
	var shortfall []RefundBalance
	for _, r := range owed {
		cur := c.CurrencyOf(r.Currency)
		owedAmount := r.Amount
		if r.Amount > 0 && cur.RefundPolicy == RefundClawBack {
			taken, clawed, err := book.ClawBack(cur, r.Amount, CauseRefund)
			if err != nil {
				return nil, err
			}
			*ops = append(*ops, taken...)
			r.Amount -= clawed
		}
		if r.Amount > 0 {
			// The coins not taken back carry their share of what the
			// missing coins cost, by the rule of every movement.
			r.Value = ValueShare(r.Value, r.Amount, owedAmount)
			shortfall = append(shortfall, r)
		}
	}
	return shortfall, nil
}

// nonZero is the balances with an amount.
func nonZero(in []RefundBalance) []RefundBalance {
	var out []RefundBalance
	for _, r := range in {
		if r.Amount != 0 {
			out = append(out, r)
		}
	}
	return out
}

// currenciesOf are those of the lots.
func currenciesOf(lots []orderLot) []CurrencyID {
	var out []CurrencyID
	for _, l := range lots {
		if !slices.Contains(out, l.currency) {
			out = append(out, l.currency)
		}
	}
	return out
}
