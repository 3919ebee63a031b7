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
// are running totals, checked against int64 overflow. Its cost follows
// the work, not the lots held: each currency's lots are sorted in spend
// order once, at its first consume, and kept so (a consume walks the
// lots it takes from), and a write is taken back by undoing what it
// changed (begin). A Book is used by one goroutine.
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
	// writing tells that a write is being planned (begin): every change
	// to a lot is journaled in saved, and created is how many lots the
	// Book held before it, so that undo can take the write back.
	writing bool
	saved   []savedLot
	created int
}

// bookCurrency is the running state of one currency: its lots, in the
// order they were added or created, and the sums over them.
type bookCurrency struct {
	bookSums
	lots []*BookLot
	// spend is, once a consume asked for it (spendable), the currency's
	// lots that have an amount, in the spend order spendOrder. It is kept
	// as lots gain or lose their amount (track), so that a consume does
	// not sort every lot the player holds.
	spend      []*BookLot
	spendOrder []SpendKey
}

// bookSums are a currency's sums over its lots, expired or not (the op
// chain's running balance, before expiries are recorded), and how many
// lots are held.
type bookSums struct {
	total, paid, reserved Amount
	held                  int
}

// savedLot is a lot and its currency's sums as they were before a change
// of the write being planned.
type savedLot struct {
	lot  *BookLot
	was  BookLot
	sums bookSums
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

// begin starts planning a write at now, with no ops planned. Until
// keepWrite, every change is journaled; a write begun before and not kept
// (refused) is taken back first (undo), so that a refused write changes
// nothing.
func (b *Book) begin(now time.Time) {
	b.undo()
	b.writing, b.created, b.Now, b.planned = true, len(b.lots), now, 0
}

// keepWrite makes the write being planned the Book's.
func (b *Book) keepWrite() {
	b.writing, b.saved = false, b.saved[:0]
}

// undo takes back the write being planned, if any: each saved lot and
// sums as they were, newest first, then the lots it created. Its cost is
// what the write changed.
func (b *Book) undo() {
	if !b.writing {
		return
	}
	for i := len(b.saved) - 1; i >= 0; i-- {
		s := b.saved[i]
		c := b.currency(s.lot.Currency)
		before := s.lot.Amount
		*s.lot, c.bookSums = s.was, s.sums
		c.track(s.lot, before)
	}
	for _, l := range slices.Backward(b.lots[b.created:]) {
		c := b.currency(l.Currency)
		c.lots = c.lots[:len(c.lots)-1] // l: lots are created at the end
		delete(b.byID, l.ID)
	}
	b.lots = b.lots[:b.created]
	b.keepWrite()
}

// touch journals lot l and its currency's sums before the write being
// planned changes them.
func (b *Book) touch(l *BookLot) {
	if b.writing {
		b.saved = append(b.saved, savedLot{lot: l, was: *l, sums: b.currency(l.Currency).bookSums})
	}
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
	b.touch(l)
	before, was := l.held(), l.Amount
	l.Amount, l.Reserved = amount, reserved
	c.total, c.paid, c.reserved = total, paid, res
	switch after := l.held(); {
	case after && !before:
		c.held++
	case before && !after:
		c.held--
	}
	c.track(l, was)
	return nil
}

// spendable is the currency's lots with an amount, in the currency's
// spend order: sorted at the first consume of the currency (or of
// another spend order), kept so since (track). The slice is the Book's:
// a change of a lot's amount may change it.
func (b *Book) spendable(cur *Currency) []*BookLot {
	c := b.currency(cur.ID)
	if c.spendOrder == nil || !slices.Equal(c.spendOrder, cur.SpendOrder) {
		c.spendOrder = append([]SpendKey{}, cur.SpendOrder...)
		c.spend = c.spend[:0]
		for _, l := range c.lots {
			if l.Amount > 0 {
				c.spend = append(c.spend, l)
			}
		}
		slices.SortFunc(c.spend, c.compare)
	}
	return c.spend
}

// compare orders two lots of the currency in its spend order.
func (c *bookCurrency) compare(a, b *BookLot) int {
	return compareForSpend(c.spendOrder, a.spendLot(), b.spendLot())
}

// track keeps lot l's place in the spend order, once there is one, after
// its amount changed from before: a lot is in it while it has an amount.
// A lot's place depends on what never changes (paid, expiry, priority,
// age), so a binary search finds it.
func (c *bookCurrency) track(l *BookLot, before Amount) {
	if c.spendOrder == nil || (before > 0) == (l.Amount > 0) {
		return
	}
	i, found := slices.BinarySearchFunc(c.spend, l, c.compare)
	switch {
	case l.Amount > 0 && !found:
		c.spend = slices.Insert(c.spend, i, l)
	case l.Amount == 0 && found:
		c.spend = slices.Delete(c.spend, i, i+1)
	}
}

func (l *BookLot) spendLot() SpendLot {
	return SpendLot{ID: l.ID, Paid: l.Paid, ExpiresAt: l.ExpiresAt, Priority: l.Priority, CreatedAt: l.CreatedAt}
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

// Grant adds g, a grant (Amount > 0): a paid one (or one carrying a purchase) is a lot of
// its own; a free one joins the live free lot with the same expiry and
// priority that still holds coins or a reservation, so that rewards do
// not pile up lots. A lot spent to nothing is not joined: stores load
// only lots that hold something, so a grant gets the same lot whether an
// earlier write of its batch emptied one or not. Errors: invalid_argument
// when the balance plus what pending holds reserve would pass BalanceMax;
// too_many_lots when it needs a lot beyond LotsMax, or the trx an op
// beyond TrxOpsMax. Nothing is changed on an error. A purchase's lot is
// worth its price, in its fiat (Worth).
func (b *Book) Grant(g ValidOp, cause OpCause) (BookOp, error) {
	var w Worth
	if p := g.Purchase; p != nil {
		w = Worth{Store: p.Store, OrderID: p.OrderID, Fiat: p.Fiat, Value: Amount(p.Price)}
	}
	op, err := b.grant(g, w, cause)
	op.Purchase = g.Purchase
	return op, err
}

// grant is Grant of coins worth w (nothing, for free coins).
func (b *Book) grant(g ValidOp, w Worth, cause OpCause) (BookOp, error) {
	cur, amount, paid, expiresAt, priority := g.Currency, g.Amount, g.Paid, g.ExpiresAt, g.Priority
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
	lots, have := b.from(nil, b.spendable(cur), amount, func(*BookLot) bool { return true })
	if have < amount {
		return nil, 0, Errorf(CodeInsufficientFunds, "%s: balance %d, %d needed", cur.Code, have, amount)
	}
	if b.planned+len(lots) > TrxOpsMax {
		return nil, 0, tooManyOps()
	}
	ops, paidTaken, _, err := b.spend(lots, amount, cause, reserve)
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
	// The spend order with paid first: its paid lots, then its free ones.
	spendable := b.spendable(cur)
	lots, have := b.from(nil, spendable, amount, func(l *BookLot) bool { return l.Paid })
	if have < amount {
		var free Amount
		lots, free = b.from(lots, spendable, amount-have, func(l *BookLot) bool { return !l.Paid })
		have += free // at most the currency's total: no overflow
	}
	ops, _, taken, err := b.spend(lots, min(amount, have), cause, false)
	return ops, taken, err
}

// from appends to dst the first live lots of lots, in their order, that
// keep tells to take and together hold amount (all of them if they hold
// less): those a spend of amount takes from. It returns them and what
// they hold. It walks only as far as it takes: lots keeps only lots with
// an amount, so those it passes are expired ones not yet recorded, or
// those keep leaves.
func (b *Book) from(dst, lots []*BookLot, amount Amount, keep func(*BookLot) bool) ([]*BookLot, Amount) {
	var have Amount
	for _, l := range lots {
		if have >= amount {
			break
		}
		if b.live(l) && keep(l) {
			dst = append(dst, l)
			have += l.Amount // at most the currency's total: no overflow
		}
	}
	return dst, have
}

// spend takes amount, at most what the lots hold, from lots in their
// order (from's), and returns the ops, the paid part and the whole taken.
func (b *Book) spend(lots []*BookLot, amount Amount, cause OpCause, reserve bool) ([]BookOp, Amount, Amount, error) {
	ops := make([]BookOp, 0, len(lots))
	var paidTaken, taken Amount
	for _, l := range lots {
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
			b.touch(o)
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
		b.touch(l)
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
