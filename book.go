package coffer

import (
	"math"
	"slices"
	"time"
)

// OpCause tells what moved an amount, for the revenue report.
type OpCause string

// Causes: a plain change (purchase, reward, spend), a hold's reservation
// returned to its lot, or either side of an exchange that carries paid
// value over.
const (
	CauseChange   OpCause = "change"
	CauseRelease  OpCause = "release"
	CauseExchange OpCause = "exchange"
)

// BookLot is a lot as the Book sees it while it plans a trx.
type BookLot struct {
	ID        int64
	Currency  CurrencyID
	Paid      bool
	Amount    Amount
	ExpiresAt *time.Time
	Priority  int32
	// New lots are inserted; Changed ones updated.
	New, Changed bool
}

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
}

// Book plans the ops of one trx on one player's lots, in memory, under the
// player's lock. It enforces the invariants before anything is written: no
// lot below zero, no balance above int64, consumes in spend order. A Book is
// used by one goroutine.
type Book struct {
	Lots  []*BookLot
	Now   time.Time
	NewID func() int64
}

func (b *Book) live(l *BookLot) bool {
	return l.Amount > 0 && (l.ExpiresAt == nil || l.ExpiresAt.After(b.Now))
}

// Totals is the live total and paid part of a currency.
func (b *Book) Totals(cur CurrencyID) (total, paid Amount) {
	for _, l := range b.Lots {
		if l.Currency == cur && b.live(l) {
			total += l.Amount
			if l.Paid {
				paid += l.Amount
			}
		}
	}
	return total, paid
}

// sum is the total of all lots of a currency with an amount, expired or
// not: the running balance of the op chain before expiries are recorded.
func (b *Book) sum(cur CurrencyID) (total, paid Amount) {
	for _, l := range b.Lots {
		if l.Currency == cur {
			total += l.Amount
			if l.Paid {
				paid += l.Amount
			}
		}
	}
	return total, paid
}

func (b *Book) op(l *BookLot, kind OpKind, cause OpCause, amount Amount) BookOp {
	total, paid := b.sum(l.Currency)
	return BookOp{Currency: l.Currency, LotID: l.ID, Kind: kind, Cause: cause, Amount: amount,
		Paid: l.Paid, BalanceAfter: total, PaidAfter: paid}
}

// Expire empties every expired lot that still has an amount, in expiry
// order, and returns the expire ops. Writes call it first, so that the
// balance_after chain of each currency includes every expiry before the
// ops that follow it.
func (b *Book) Expire() []BookOp {
	var expired []*BookLot
	for _, l := range b.Lots {
		if l.Amount > 0 && l.ExpiresAt != nil && !l.ExpiresAt.After(b.Now) {
			expired = append(expired, l)
		}
	}
	slices.SortStableFunc(expired, func(a, b *BookLot) int { return a.ExpiresAt.Compare(*b.ExpiresAt) })
	var ops []BookOp
	for _, l := range expired {
		amount := l.Amount
		l.Amount, l.Changed = 0, true
		ops = append(ops, b.op(l, OpExpire, CauseChange, -amount))
	}
	return ops
}

// Grant adds a grant: a paid grant (or one carrying a purchase) is a lot of
// its own; a free one joins a live free lot with the same expiry and
// priority, so that rewards do not pile up lots. Errors: invalid_argument
// when the balance would overflow.
func (b *Book) Grant(cur CurrencyID, amount Amount, paid bool, expiresAt *time.Time, priority int32, purchase *Purchase, cause OpCause) (BookOp, error) {
	total, _ := b.sum(cur)
	if amount > math.MaxInt64-total {
		return BookOp{}, Errorf(CodeInvalid, "the balance would overflow")
	}
	var lot *BookLot
	if !paid {
		for _, l := range b.Lots {
			if l.Currency == cur && !l.Paid && l.Priority == priority && sameTime(l.ExpiresAt, expiresAt) && (l.ExpiresAt == nil || l.ExpiresAt.After(b.Now)) {
				lot = l
				break
			}
		}
	}
	if lot == nil {
		lot = &BookLot{ID: b.NewID(), Currency: cur, Paid: paid, ExpiresAt: expiresAt, Priority: priority, New: true}
		b.Lots = append(b.Lots, lot)
	}
	lot.Amount += amount
	lot.Changed = true
	op := b.op(lot, OpGrant, cause, amount)
	op.Purchase = purchase
	return op, nil
}

// Consume takes amount from live lots in spend order. It returns the ops
// and the paid part taken. Errors: insufficient_funds, with nothing changed.
func (b *Book) Consume(cur *Currency, amount Amount, cause OpCause) ([]BookOp, Amount, error) {
	var spendable []SpendLot
	byID := map[int64]*BookLot{}
	var have Amount
	for _, l := range b.Lots {
		if l.Currency == cur.ID && b.live(l) {
			spendable = append(spendable, SpendLot{ID: l.ID, Paid: l.Paid, ExpiresAt: l.ExpiresAt, Priority: l.Priority})
			byID[l.ID] = l
			have += l.Amount
		}
	}
	if have < amount {
		return nil, 0, Errorf(CodeInsufficientFunds, "%s: balance %d, %d needed", cur.Code, have, amount)
	}
	SortForSpend(spendable, cur.SpendOrder)
	var ops []BookOp
	var paidTaken Amount
	left := amount
	for _, s := range spendable {
		if left == 0 {
			break
		}
		l := byID[s.ID]
		take := min(l.Amount, left)
		l.Amount -= take
		l.Changed = true
		left -= take
		if l.Paid {
			paidTaken += take
		}
		ops = append(ops, b.op(l, OpConsume, cause, -take))
	}
	return ops, paidTaken, nil
}

// Release returns amount to the lot it was reserved from (a hold rolled
// back or expired). The lot may have expired meanwhile; the amount then
// expires with it.
func (b *Book) Release(lotID int64, amount Amount) (BookOp, error) {
	for _, l := range b.Lots {
		if l.ID == lotID {
			l.Amount += amount
			l.Changed = true
			return b.op(l, OpGrant, CauseRelease, amount), nil
		}
	}
	return BookOp{}, Errorf(CodeInternal, "lot %d of a hold is missing", lotID)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
