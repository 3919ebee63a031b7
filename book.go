package coffer

import (
	"cmp"
	"iter"
	"math/bits"
	"slices"
	"time"
)

// OpCause tells what moved an amount, for the revenue report.
type OpCause string

// Causes: a plain change (purchase, reward, spend), a hold's reservation
// returned to its lot, either side of an exchange that carries paid value
// over, a refund taking a purchase back (not revenue: the money went
// back), or a refund taking back, when a hold rolls back, coins of its
// order the hold reserved when it was refunded (BookLot.Owed).
const (
	CauseChange     OpCause = "change"
	CauseRelease    OpCause = "release"
	CauseExchange   OpCause = "exchange"
	CauseRefund     OpCause = "refund"
	CauseRefundHeld OpCause = "refund_held"
)

// BookLot is a lot as the Book sees it while it plans a trx.
type BookLot struct {
	ID       int64
	Currency CurrencyID
	Paid     bool
	Amount   Amount
	// Reserved is what pending holds took from the lot: a rollback
	// returns it, a commit settles it.
	Reserved Amount
	// Owed is what of Reserved a refund of the lot's order could not take
	// and counted short: a rollback returns it to the refund, not to the
	// player; a commit spends it. At most Reserved.
	Owed      Amount
	ExpiresAt *time.Time
	Priority  int32
	CreatedAt time.Time
	// TrxID is the trx whose grant created the lot.
	TrxID int64
	// Exchanged: an exchange made the lot, of a paid lot it consumed. Its
	// coins count in its order's currency through the exchange's ratio,
	// not one for one as the order's own lots do (orderLots).
	Exchanged bool
	// Worth is what the lot's coins cost: its origin and value.
	Worth
	// ValueReserved is what the Reserved coins cost, in minor units of
	// Fiat: what a rollback returns to Value, or a commit recognises.
	ValueReserved Amount
	// New lots are inserted; Changed ones updated.
	New, Changed bool
}

// Worth is the real money behind paid coins. Store and OrderID name the
// store order they were bought by: a paid grant's purchase, or, for a lot
// an exchange made, the order of the paid lot it consumed — the lineage a
// refund follows. Value is what the coins cost, in minor units of Fiat
// (an ISO 4217 code). Free coins have no Fiat and no Value.
type Worth struct {
	Store, OrderID, Fiat string
	Value                Amount
}

// ValueShare is the value that k coins take out of n coins worth v (0 ≤
// k ≤ n, v ≥ 0): v×k/n rounded to the nearest minor unit, a half down,
// and all of v when k = n, so that the last coin out of a lot takes what
// is left and the parts of a lot's value add up to its price exactly.
// It is computed on 128 bits: v×k never overflows.
func ValueShare(v, k, n Amount) Amount {
	switch {
	case k >= n:
		return v
	case k <= 0 || v <= 0:
		return 0
	}
	q, r := mulDiv(v, k, n) // k < n
	if r > uint64(n)-r {
		q++
	}
	return Amount(q)
}

// mulDiv is v×k/n, rounded down, and its remainder, for v, k ≥ 0 and
// n > 0, with v < n or k < n: computed on 128 bits, v×k never overflows,
// and the quotient, under the other factor, fits 64 bits.
func mulDiv(v, k, n Amount) (q, r uint64) {
	hi, lo := bits.Mul64(uint64(v), uint64(k))
	return bits.Div64(hi, lo, uint64(n)) // v×k < n×2⁶⁴, so hi < n: no overflow
}

// held tells whether the lot counts towards LotsMax: it has an amount, or
// a reservation a rollback may return to it.
func (l *BookLot) held() bool { return l.Amount > 0 || l.Reserved > 0 }

// BookOp is a planned op.
type BookOp struct {
	Currency     CurrencyID
	LotID        int64
	Kind         OpKind
	Cause        OpCause
	Amount       Amount
	Paid         bool
	BalanceAfter Amount
	PaidAfter    Amount
	Purchase     *Purchase
	// Value is what the op moved of its lot's value, in minor units of
	// Fiat, signed as Amount; Fiat is the lot's, empty for a lot without
	// value.
	Value Amount
	Fiat  string
}

// Book plans the ops of one trx on one player's lots, in memory, under the
// player's lock. It enforces the invariants before anything is written: no
// lot below zero; in each currency, the balance plus what pending holds
// reserve at most BalanceMax, so that no rollback can overflow; at most
// LotsMax held lots per currency and TrxOpsMax ops per write (a refund,
// bounded by the lots held, excepted); consumes in spend order. Its sums
// are running totals, checked against int64 overflow. A Book is used by
// one goroutine.
type Book struct {
	Now   time.Time
	NewID func() int64
	// TrxID is the trx being planned: the lots its grants create are its.
	TrxID int64

	lots []*BookLot
	byID map[int64]*BookLot
	cur  map[CurrencyID]*bookCurrency
	// planned counts the ops planned, for TrxOpsMax: Grant and Consume
	// are bounded by it, Take and ClawBack (refunds) count but are not.
	planned int
}

// bookCurrency is the running state of one currency: the sums over its
// lots, expired or not (the op chain's running balance, before expiries
// are recorded), and how many lots are held.
type bookCurrency struct {
	lots                  []*BookLot
	total, paid, reserved Amount
	held                  int
}

// Add loads a stored lot. Errors: internal, when the lot is negative or
// the currency's sums would pass int64 (a damaged ledger: the audit says
// where).
func (b *Book) Add(l *BookLot) error {
	if l.Amount < 0 || l.Reserved < 0 || l.Value < 0 || l.ValueReserved < 0 || l.Owed < 0 || l.Owed > l.Reserved {
		return Errorf(CodeInternal, "lot %d has amount %d worth %d and reserves %d worth %d, %d of it owed to a refund",
			l.ID, l.Amount, l.Value, l.Reserved, l.ValueReserved, l.Owed)
	}
	amount, reserved := l.Amount, l.Reserved
	l.Amount, l.Reserved = 0, 0
	b.keep(l)
	return b.set(l, amount, reserved)
}

// keep files a lot under its currency and id.
func (b *Book) keep(l *BookLot) {
	if b.byID == nil {
		b.byID = map[int64]*BookLot{}
	}
	c := b.currency(l.Currency)
	b.lots, c.lots = append(b.lots, l), append(c.lots, l)
	b.byID[l.ID] = l
}

// Lots lists the lots the Book holds, in the order they were added or
// created. The slice is the Book's own: read it, do not change it.
func (b *Book) Lots() []*BookLot { return b.lots }

// clone is a copy of the Book that shares nothing with it, with no ops
// planned: a trx is planned on a clone, which replaces the Book only if
// the whole trx is accepted, so that a refused trx changes nothing.
func (b *Book) clone() *Book {
	c := &Book{Now: b.Now, NewID: b.NewID, TrxID: b.TrxID, lots: make([]*BookLot, 0, len(b.lots)),
		byID: make(map[int64]*BookLot, len(b.lots)), cur: make(map[CurrencyID]*bookCurrency, len(b.cur))}
	for _, l := range b.lots {
		copied := *l
		c.keep(&copied)
	}
	for id, bc := range b.cur {
		cc := c.currency(id)
		cc.total, cc.paid, cc.reserved, cc.held = bc.total, bc.paid, bc.reserved, bc.held
	}
	return c
}

func (b *Book) currency(id CurrencyID) *bookCurrency {
	if b.cur == nil {
		b.cur = map[CurrencyID]*bookCurrency{}
	}
	c := b.cur[id]
	if c == nil {
		c = &bookCurrency{}
		b.cur[id] = c
	}
	return c
}

// set changes a lot's amount and reservation and the running sums with
// them. Errors: internal, when a sum would pass int64 or go below zero;
// nothing is changed then.
func (b *Book) set(l *BookLot, amount, reserved Amount) error {
	c := b.currency(l.Currency)
	total, ok1 := c.total.Add(amount - l.Amount)
	paid, ok2 := c.paid, true
	if l.Paid {
		paid, ok2 = c.paid.Add(amount - l.Amount)
	}
	res, ok3 := c.reserved.Add(reserved - l.Reserved)
	_, ok4 := total.Add(res)
	if !ok1 || !ok2 || !ok3 || !ok4 || amount < 0 || reserved < 0 || total < 0 || paid < 0 || res < 0 {
		return Errorf(CodeInternal, "currency %d: lot %d to %d reserving %d leaves the sums out of range", l.Currency, l.ID, amount, reserved)
	}
	before := l.held()
	l.Amount, l.Reserved = amount, reserved
	c.total, c.paid, c.reserved = total, paid, res
	switch after := l.held(); {
	case after && !before:
		c.held++
	case before && !after:
		c.held--
	}
	return nil
}

func (b *Book) live(l *BookLot) bool { return l.liveAt(b.Now) }

// liveAt tells whether the lot's coins count at now: it has some, and has
// not expired.
func (l *BookLot) liveAt(now time.Time) bool {
	return l.Amount > 0 && (l.ExpiresAt == nil || l.ExpiresAt.After(now))
}

// op is an op that moved amount, worth value, on lot l.
func (b *Book) op(l *BookLot, kind OpKind, cause OpCause, amount, value Amount) BookOp {
	c := b.currency(l.Currency)
	return BookOp{Currency: l.Currency, LotID: l.ID, Kind: kind, Cause: cause, Amount: amount,
		Paid: l.Paid, BalanceAfter: c.total, PaidAfter: c.paid, Value: value, Fiat: l.Fiat}
}

// Expire empties every expired lot that still has an amount, in the
// currencies only (all of them if only is nil), in expiry order, and
// returns the expire ops. Writes call it first, so that the balance_after
// chain of each currency includes every expiry before the ops that follow
// it. The lot's value expires with its amount (breakage). A reservation
// stays on its lot, with its value: a rollback returns it, and it
// expires then.
func (b *Book) Expire(only []CurrencyID) []BookOp {
	var expired []*BookLot
	for _, l := range b.lots {
		if only != nil && !slices.Contains(only, l.Currency) {
			continue
		}
		if l.Amount > 0 && l.ExpiresAt != nil && !l.ExpiresAt.After(b.Now) {
			expired = append(expired, l)
		}
	}
	slices.SortStableFunc(expired, func(a, b *BookLot) int {
		return cmp.Or(a.ExpiresAt.Compare(*b.ExpiresAt), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	var ops []BookOp
	for _, l := range expired {
		amount, value := l.Amount, l.Value
		_ = b.set(l, 0, l.Reserved) // takes away: no sum can overflow
		l.Value, l.Changed = 0, true
		ops = append(ops, b.op(l, OpExpire, CauseChange, -amount, -value))
	}
	return ops
}

// Grant adds a grant: a paid grant (or one carrying a purchase) is a lot of
// its own; a free one joins the live free lot with the same expiry and
// priority that still holds coins or a reservation, so that rewards do
// not pile up lots. A lot spent to nothing is not joined: stores load
// only lots that hold something, so a grant gets the same lot whether an
// earlier write of its batch emptied one or not. Errors: invalid_argument
// when the balance plus what pending holds reserve would pass BalanceMax;
// too_many_lots when it needs a lot beyond LotsMax, or the trx an op
// beyond TrxOpsMax. Nothing is changed on an error. A purchase's lot is
// worth its price, in its fiat (Worth).
func (b *Book) Grant(cur *Currency, amount Amount, paid bool, expiresAt *time.Time, priority int32, purchase *Purchase, cause OpCause) (BookOp, error) {
	var w Worth
	if purchase != nil {
		w = Worth{Store: purchase.Store, OrderID: purchase.OrderID, Fiat: purchase.Fiat, Value: Amount(purchase.Price)}
	}
	op, err := b.grant(cur, amount, paid, expiresAt, priority, w, cause)
	op.Purchase = purchase
	return op, err
}

// grant is Grant of coins worth w (nothing, for free coins).
func (b *Book) grant(cur *Currency, amount Amount, paid bool, expiresAt *time.Time, priority int32, w Worth, cause OpCause) (BookOp, error) {
	c := b.currency(cur.ID)
	if amount <= 0 || amount > BalanceMax || c.total+c.reserved > BalanceMax-amount {
		return BookOp{}, Errorf(CodeInvalid, "%s: the balance would overflow: %d, and %d reserved by pending holds, plus %d is more than %d",
			cur.Code, c.total, c.reserved, amount, BalanceMax)
	}
	if b.planned >= TrxOpsMax {
		return BookOp{}, tooManyOps()
	}
	var lot *BookLot
	if !paid {
		for _, l := range c.lots {
			if !l.Paid && l.Priority == priority && sameTime(l.ExpiresAt, expiresAt) && (l.ExpiresAt == nil || l.ExpiresAt.After(b.Now)) &&
				l.held() && (lot == nil || l.ID < lot.ID) {
				lot = l
			}
		}
	}
	if lot == nil {
		if c.held >= LotsMax {
			return BookOp{}, Errorf(CodeTooManyLots, "%s: the player holds %d lots, the most allowed; a grant that needs a lot of its own (paid, or with an expiry or priority no lot has) waits until some are spent or expire",
				cur.Code, c.held)
		}
		lot = &BookLot{ID: b.NewID(), Currency: cur.ID, Paid: paid, ExpiresAt: expiresAt, Priority: priority, CreatedAt: b.Now,
			TrxID: b.TrxID, Exchanged: paid && cause == CauseExchange, Worth: w, New: true}
		b.keep(lot)
	}
	if err := b.set(lot, lot.Amount+amount, lot.Reserved); err != nil {
		return BookOp{}, err
	}
	lot.Changed = true
	b.planned++
	return b.op(lot, OpGrant, cause, amount, w.Value), nil
}

func tooManyOps() error {
	return Errorf(CodeTooManyLots, "the trx would move more than %d lots; split it into smaller ones", TrxOpsMax)
}

// Consume takes amount from live lots in spend order, and from each lot
// its ValueShare of the lot's value. With reserve (a hold's begin) what
// it takes stays reserved on each lot, with its value, for a rollback to
// return or a commit to settle. It returns the ops and the paid part
// taken. Errors: insufficient_funds; too_many_lots when the trx would
// write more than TrxOpsMax ops. Nothing is changed on an error.
func (b *Book) Consume(cur *Currency, amount Amount, cause OpCause, reserve bool) ([]BookOp, Amount, error) {
	spendable, have := b.spendable(cur.ID)
	if have < amount {
		return nil, 0, Errorf(CodeInsufficientFunds, "%s: balance %d, %d needed", cur.Code, have, amount)
	}
	SortForSpend(spendable, cur.SpendOrder)
	spendable = b.from(spendable, amount)
	if b.planned+len(spendable) > TrxOpsMax {
		return nil, 0, tooManyOps()
	}
	ops, paidTaken, _, err := b.spend(spendable, amount, cause, reserve)
	return ops, paidTaken, err
}

// ClawBack takes up to amount from live lots, paid before free and then
// in the currency's spend order: what a refund under claw_back takes from
// the player's other lots for what was spent of the purchase. It returns
// the ops and what it took, which is less than amount when the player
// holds less. Like Take, it is not bounded by TrxOpsMax: a refund must
// fit in one trx whatever the player did with the order's coins, and the
// lots it takes from are bounded by LotsMax. Errors: internal (a damaged
// lot). Nothing is changed on an error.
func (b *Book) ClawBack(cur *Currency, amount Amount, cause OpCause) ([]BookOp, Amount, error) {
	spendable, have := b.spendable(cur.ID)
	SortForSpend(spendable, append([]SpendKey{SpendPaid}, cur.SpendOrder...))
	amount = min(amount, have)
	ops, _, taken, err := b.spend(b.from(spendable, amount), amount, cause, false)
	return ops, taken, err
}

// spendable lists the live lots of a currency and what they hold.
func (b *Book) spendable(cur CurrencyID) ([]SpendLot, Amount) {
	var out []SpendLot
	var have Amount
	for _, l := range b.currency(cur).lots {
		if b.live(l) {
			out = append(out, SpendLot{ID: l.ID, Paid: l.Paid, ExpiresAt: l.ExpiresAt, Priority: l.Priority, CreatedAt: l.CreatedAt})
			have += l.Amount // at most the currency's total: no overflow
		}
	}
	return out, have
}

// from is the first of lots, in their order, that together hold amount:
// those a spend of amount takes from.
func (b *Book) from(lots []SpendLot, amount Amount) []SpendLot {
	n := 0
	for left := amount; n < len(lots) && left > 0; n++ {
		left -= b.byID[lots[n].ID].Amount
	}
	return lots[:n]
}

// spend takes amount, at most what the lots hold, from lots in their
// order (from's), and returns the ops, the paid part and the whole taken.
func (b *Book) spend(lots []SpendLot, amount Amount, cause OpCause, reserve bool) ([]BookOp, Amount, Amount, error) {
	ops := make([]BookOp, 0, len(lots))
	var paidTaken, taken Amount
	for _, s := range lots {
		l := b.byID[s.ID]
		take := min(l.Amount, amount-taken)
		value := ValueShare(l.Value, take, l.Amount)
		reserved := l.Reserved
		if reserve {
			reserved += take // at most the lot's amount before: no overflow
		}
		if err := b.set(l, l.Amount-take, reserved); err != nil {
			return nil, 0, 0, err
		}
		l.Value -= value
		if reserve {
			l.ValueReserved += value // at most the lot's value before
		}
		l.Changed = true
		taken += take
		if l.Paid {
			paidTaken += take
		}
		ops = append(ops, b.op(l, OpConsume, cause, -take, -value))
	}
	b.planned += len(lots)
	return ops, paidTaken, taken, nil
}

// Take takes from lot lotID what it has, up to amount: a refund taking
// back what is left of a purchase from the purchase's own lot. What
// pending holds reserve from the lot is not its to give. A lot the Book
// does not hold (it has nothing left), or an expired one, gives nothing:
// taken is 0 and there is no op. The coins take their ValueShare of the
// lot's value. Take is not bounded by TrxOpsMax: an order's coins may sit
// in more lots than one write may move (exchanges make a lot per paid lot
// they consume, up to LotsMax in each currency), and its refund must
// still take them all back. Errors: internal (a damaged lot).
func (b *Book) Take(lotID int64, amount Amount, cause OpCause) (op BookOp, taken Amount, err error) {
	l := b.byID[lotID]
	if l == nil || !b.live(l) || amount <= 0 {
		return BookOp{}, 0, nil
	}
	taken = min(l.Amount, amount)
	value := ValueShare(l.Value, taken, l.Amount)
	if err := b.set(l, l.Amount-taken, l.Reserved); err != nil {
		return BookOp{}, 0, err
	}
	l.Value -= value
	l.Changed = true
	b.planned++
	return b.op(l, OpConsume, cause, -taken, -value), taken, nil
}

// Release returns amount, reserved by a hold, and value, what it was
// worth, to the lot it came from (a hold rolled back or expired). The lot may have expired meanwhile; the
// amount then expires with it. What of it the lot owes a refund (Owed),
// and beyond that what the order's other lots of the currency owe (under
// claw_back what is owed may sit on any of them: Settle), goes on to the
// refund: a second op takes it back, with its ValueShare of value, so
// that a refunded order's coins never return to the player.
// It cannot overflow: the reservation counted
// towards BalanceMax all along, and it is not bounded by TrxOpsMax, since
// a hold's begin was. Errors: internal, when the lot is not in the Book or
// does not reserve amount and value (a damaged ledger).
func (b *Book) Release(lotID int64, amount, value Amount) ([]BookOp, error) {
	l, err := b.reserving(lotID, amount, value)
	if err != nil {
		return nil, err
	}
	owed := min(l.Owed, amount)
	if err := b.set(l, l.Amount+amount, l.Reserved-amount); err != nil {
		return nil, err
	}
	// The lot's value was v − value when it reserved: no overflow.
	l.Value, l.ValueReserved, l.Owed, l.Changed = l.Value+value, l.ValueReserved-value, l.Owed-owed, true
	for o := range b.orderLots(l) {
		if owed == amount {
			break
		}
		if t := min(o.Owed, amount-owed); t > 0 {
			o.Owed, o.Changed, owed = o.Owed-t, true, owed+t
		}
	}
	ops := []BookOp{b.op(l, OpGrant, CauseRelease, amount, value)}
	if owed == 0 {
		return ops, nil
	}
	owedValue := ValueShare(value, owed, amount)
	if err := b.set(l, l.Amount-owed, l.Reserved); err != nil {
		return nil, err
	}
	l.Value -= owedValue
	return append(ops, b.op(l, OpConsume, CauseRefundHeld, -owed, -owedValue)), nil
}

// Settle ends amount of a lot's reservation, worth value, for good: the
// hold that took it is committed, and its value is recognised. The coins
// are spent: the refund's shortfall stands, and the lot owes it at most
// what it still reserves, no less. A lot may owe less than it reserves
// (claw_back found other coins; a lot an exchange made owes what fits
// in the shortfall), and what it still owes the refund takes from the
// coins another hold's rollback returns, as claw_back takes from any
// coins the player holds: what this lot can no longer owe goes to the
// order's own other lots of the currency (orderLots), as far as they
// reserve more than they owe. It writes no op (the consume was written
// at the begin).
// Errors: as Release.
func (b *Book) Settle(lotID int64, amount, value Amount) error {
	l, err := b.reserving(lotID, amount, value)
	if err != nil {
		return err
	}
	if err := b.set(l, l.Amount, l.Reserved-amount); err != nil {
		return err
	}
	owed := min(l.Owed, l.Reserved)
	if move := l.Owed - owed; move > 0 {
		for o := range b.orderLots(l) {
			if move -= b.owe(o.ID, move); move == 0 {
				break
			}
		}
	}
	l.ValueReserved, l.Owed, l.Changed = l.ValueReserved-value, owed, true
	return nil
}

// orderLots are the other lots of lot l's order in its currency that a
// refund's debt may move between: the order's own lots, all made by its
// purchase, each coin counting for one in the order's currency. A coin
// of a lot an exchange made may count for more or less than one of
// another lot, so a debt moved to or from it would take back more, or
// less, than the refund counted short: such a lot has none. Nor has a
// lot of no order (free coins), found without reading the player's
// other lots. They are yielded, not gathered: a rollback reads them for
// every paid lot it returns to, and almost always finds nothing owed.
func (b *Book) orderLots(l *BookLot) iter.Seq[*BookLot] {
	return func(yield func(*BookLot) bool) {
		if l.Store == "" || l.Exchanged {
			return
		}
		for _, o := range b.currency(l.Currency).lots {
			if o != l && !o.Exchanged && o.Store == l.Store && o.OrderID == l.OrderID && !yield(o) {
				return
			}
		}
	}
}

// owe marks up to amount of what pending holds reserve from lot lotID as
// owed to a refund (BookLot.Owed), beyond what the lot owes already, and
// returns what it marked: what a refund of the lot's order counts short
// while a hold reserves it. A lot the Book does not hold reserves
// nothing.
func (b *Book) owe(lotID int64, amount Amount) Amount {
	l := b.byID[lotID]
	if l == nil || amount <= 0 {
		return 0
	}
	owed := min(amount, l.Reserved-l.Owed)
	if owed > 0 {
		l.Owed += owed
		l.Changed = true
	}
	return owed
}

func (b *Book) reserving(lotID int64, amount, value Amount) (*BookLot, error) {
	l := b.byID[lotID]
	switch {
	case l == nil:
		return nil, Errorf(CodeInternal, "lot %d of a hold is missing", lotID)
	case amount <= 0 || l.Reserved < amount || value < 0 || l.ValueReserved < value:
		return nil, Errorf(CodeInternal, "lot %d reserves %d worth %d; a hold returns %d worth %d", lotID, l.Reserved, l.ValueReserved, amount, value)
	}
	return l, nil
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
