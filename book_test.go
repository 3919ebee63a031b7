package coffer

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestRateExchangeRounding(t *testing.T) {
	cases := []struct {
		rate                Rate
		consumed, paid      Amount
		toPaid              bool
		wantTotal, wantPaid Amount
	}{
		{Rate{100, 1}, 3, 1, true, 300, 100},
		{Rate{1, 10}, 19, 19, true, 1, 1},
		{Rate{1, 10}, 19, 9, true, 1, 0}, // paid share rounds down, remainder free
		{Rate{1, 10}, 19, 19, false, 1, 0},
		{Rate{3, 7}, 10, 5, true, 4, 2},
		{Rate{1, 10}, 9, 9, true, 0, 0},
	}
	for _, c := range cases {
		total, paid, ok := c.rate.Exchange(c.consumed, c.paid, c.toPaid)
		if !ok || total != c.wantTotal || paid != c.wantPaid || paid > total {
			t.Errorf("%v.Exchange(%d, %d, %v) = %d, %d, %v; want %d, %d", c.rate, c.consumed, c.paid, c.toPaid, total, paid, ok, c.wantTotal, c.wantPaid)
		}
	}
	if _, _, ok := (Rate{math.MaxInt64, 1}).Exchange(2, 0, false); ok {
		t.Error("overflowing exchange reported ok")
	}
}

// newBook loads lots into a Book, as the store does.
func newBook(t *testing.T, lots ...*BookLot) *Book {
	t.Helper()
	next := int64(100)
	b := &Book{Now: time.Now(), NewID: func() int64 { next++; return next }}
	for _, l := range lots {
		if err := b.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

var gold = &Currency{ID: 1, Code: "gold", Paid: true, SpendOrder: DefaultSpendOrder}

// goldHeld is the gold balance a read would answer of b's lots, at b's
// time.
func goldHeld(t *testing.T, b *Book) Amount {
	t.Helper()
	c := mustCatalog(t, *gold)
	var lots []BookLot
	for _, l := range b.Lots() {
		lots = append(lots, *l)
	}
	bal, err := c.CurrentBalances(BalanceQuery{Currency: gold.Code}, 0, lots, b.Now)
	if err != nil {
		t.Fatal(err)
	}
	return bal.Balances[0].Total
}

func TestBookGrantOverflow(t *testing.T) {
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Amount: BalanceMax - 5})
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 6}, CauseChange); ErrorCode(err) != CodeInvalid {
		t.Fatalf("grant past BalanceMax: %v", err)
	}
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 5}, CauseChange); err != nil {
		t.Fatalf("grant to exactly BalanceMax: %v", err)
	}
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Amount: math.MaxInt64 - 5})
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 6}, CauseChange); ErrorCode(err) != CodeInvalid {
		t.Fatalf("grant past int64: %v", err)
	}
}

// TestBookRollbacksCannotOverflow: holds that reserve a full balance,
// refilled after each, must not add up past BalanceMax when they are all
// rolled back: the refill is refused, since what pending holds reserve
// counts towards the bound.
func TestBookRollbacksCannotOverflow(t *testing.T) {
	half := BalanceMax/2 + 1
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Amount: half})
	if _, _, err := b.Consume(gold, half, CauseChange, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: half}, CauseChange); ErrorCode(err) != CodeInvalid {
		t.Fatalf("refill while a hold reserves the balance: %v", err)
	}
	ops, err := b.Release(1, half, 0)
	if err != nil || len(ops) != 1 || ops[0].BalanceAfter != half || b.Lots()[0].Reserved != 0 {
		t.Fatalf("release: %+v %v", ops, err)
	}
	// A stored reservation past the bound (written before it) still
	// returns, as long as int64 holds it; one past int64 is refused, not
	// wrapped.
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Amount: math.MaxInt64 - 10, Reserved: 10})
	if _, err := b.Release(1, 10, 0); err != nil {
		t.Fatalf("release to exactly int64: %v", err)
	}
	if err := (&Book{}).Add(&BookLot{ID: 1, Currency: 1, Amount: math.MaxInt64, Reserved: 1}); ErrorCode(err) != CodeInternal {
		t.Fatalf("lots past int64 loaded: %v", err)
	}
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Amount: math.MaxInt64})
	if err := b.Add(&BookLot{ID: 2, Currency: 1, Amount: 1}); ErrorCode(err) != CodeInternal {
		t.Fatalf("a second lot past int64 loaded: %v", err)
	}
}

func TestBookSettleAndRelease(t *testing.T) {
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Amount: 10})
	if _, _, err := b.Consume(gold, 7, CauseChange, true); err != nil {
		t.Fatal(err)
	}
	if l := b.Lots()[0]; l.Amount != 3 || l.Reserved != 7 {
		t.Fatalf("reserved lot = %+v", l)
	}
	if _, err := b.Release(1, 8, 0); ErrorCode(err) != CodeInternal {
		t.Fatalf("release of more than reserved: %v", err)
	}
	if err := b.Settle(1, 7, 0); err != nil || b.Lots()[0].Reserved != 0 || b.Lots()[0].Amount != 3 {
		t.Fatalf("settle: %+v %v", b.Lots()[0], err)
	}
	if _, err := b.Release(1, 7, 0); ErrorCode(err) != CodeInternal {
		t.Fatalf("release after settle: %v", err)
	}
}

// TestBookOwed: what a lot owes a refund goes to the refund when its hold
// rolls back (a second op, cause refund_held, with its share of the
// value); a commit lessens it only as far as the lot then reserves less;
// a lot owes at most what it reserves, and one loaded owing more is
// refused.
func TestBookOwed(t *testing.T) {
	partly := newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 30, Owed: 10})
	if err := partly.Settle(1, 15, 0); err != nil || partly.Lots()[0].Owed != 10 {
		t.Fatalf("a commit of 15 of 30 reserved, 10 owed: %+v %v", partly.Lots()[0], err)
	}
	if err := partly.Settle(1, 10, 0); err != nil || partly.Lots()[0].Owed != 5 {
		t.Fatalf("a commit that leaves 5 reserved: %+v %v", partly.Lots()[0], err)
	}
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Paid: true, Amount: 5, Reserved: 30, ValueReserved: 300, Worth: Worth{Fiat: "USD", Value: 50}})
	if got := b.owe(1, 20); got != 20 {
		t.Fatalf("owed %d of 20", got)
	}
	if got := b.owe(1, 20); got != 10 {
		t.Fatalf("owed %d more: the lot reserves 30", got)
	}
	if err := b.Settle(1, 5, 50); err != nil || b.Lots()[0].Owed != 25 {
		t.Fatalf("settle: %+v %v", b.Lots()[0], err)
	}
	ops, err := b.Release(1, 25, 250)
	want := []BookOp{
		{Currency: 1, LotID: 1, Kind: OpGrant, Cause: CauseRelease, Amount: 25, Paid: true, BalanceAfter: 30, PaidAfter: 30, Value: 250, Fiat: "USD"},
		{Currency: 1, LotID: 1, Kind: OpConsume, Cause: CauseRefundHeld, Amount: -25, Paid: true, BalanceAfter: 5, PaidAfter: 5, Value: -250, Fiat: "USD"},
	}
	if err != nil || fmt.Sprint(ops) != fmt.Sprint(want) {
		t.Fatalf("release: %v\n%+v\nwant\n%+v", err, ops, want)
	}
	if l := b.Lots()[0]; l.Amount != 5 || l.Value != 50 || l.Reserved != 0 || l.Owed != 0 || l.ValueReserved != 0 {
		t.Fatalf("lot after the rollback = %+v", l)
	}
	// A rollback of part of what the lot owes gives the refund that part.
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 30, Owed: 30})
	if ops, err := b.Release(1, 10, 0); err != nil || len(ops) != 2 || ops[1].Amount != -10 || b.Lots()[0].Owed != 20 || b.Lots()[0].Amount != 0 {
		t.Fatalf("release of 10 of 30 owed: %+v %v; lot %+v", ops, err, *b.Lots()[0])
	}
	for _, owed := range []Amount{2, -1} {
		if err := (&Book{}).Add(&BookLot{ID: 1, Currency: 1, Reserved: 1, Owed: owed}); ErrorCode(err) != CodeInternal {
			t.Fatalf("a lot reserving 1 and owing %d loaded: %v", owed, err)
		}
	}
}

// TestBookOwedMovesOnlyBetweenAnOrdersOwnLots: under claw_back a debt
// may sit on any of an order's own lots of the currency: a commit moves
// what its lot can no longer owe to them, and a rollback takes what they
// owe. Never to or from another order's lot, nor a lot an exchange made.
func TestBookOwedMovesOnlyBetweenAnOrdersOwnLots(t *testing.T) {
	// Under claw_back, what a commit leaves a lot unable to owe goes to
	// the order's own other lots of the currency, not to another order's
	// (lot 2, of another store), nor to one an exchange made (lot 5).
	o := Worth{Store: "steam", OrderID: "o"}
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 30, Owed: 30, Worth: o}, &BookLot{ID: 2, Currency: 1, Reserved: 5, Worth: Worth{Store: "apple", OrderID: "o"}},
		&BookLot{ID: 3, Currency: 1, Reserved: 20, Owed: 5, Worth: o}, &BookLot{ID: 4, Currency: 1, Reserved: 40, Worth: o},
		&BookLot{ID: 5, Currency: 1, Reserved: 40, Worth: o, Exchanged: true})
	if err := b.Settle(1, 30, 0); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(b.Lots()[0].Owed, b.Lots()[1].Owed, b.Lots()[2].Owed, b.Lots()[3].Owed, b.Lots()[4].Owed); got != "0 0 20 15 0" {
		t.Fatalf("owed after the commit: %s, want 0 0 20 15 0", got)
	}
	if ops, err := b.Release(5, 40, 0); err != nil || len(ops) != 1 {
		t.Fatalf("release of lot 5, which an exchange made: %+v %v", ops, err)
	}
	// And a rollback gives the refund what the order's other lots owe,
	// beyond what its own lot does.
	ops, err := b.Release(4, 40, 0)
	if err != nil || len(ops) != 2 || ops[1].Amount != -35 || b.Lots()[3].Amount != 5 || b.Lots()[2].Owed != 0 {
		t.Fatalf("release of lot 4: %+v %v; lots %+v %+v", ops, err, *b.Lots()[2], *b.Lots()[3])
	}
	if ops, err = b.Release(3, 20, 0); err != nil || len(ops) != 1 {
		t.Fatalf("release of lot 3, which owes nothing now: %+v %v", ops, err)
	}
	// What the other lots owe is taken only up to what returns.
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 10, Owed: 5, Worth: o}, &BookLot{ID: 2, Currency: 1, Reserved: 20, Owed: 20, Worth: o})
	if ops, err = b.Release(1, 10, 0); err != nil || len(ops) != 2 || ops[1].Amount != -10 || b.Lots()[1].Owed != 15 {
		t.Fatalf("release of 10, 5 owed there and 20 on the other lot: %+v %v; lot 2 %+v", ops, err, *b.Lots()[1])
	}
	// What a lot an exchange made owes moves nowhere: not to the order's
	// own lot (1), nor to another lot an exchange made (3).
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 20, Owed: 5, Worth: o}, &BookLot{ID: 2, Currency: 1, Reserved: 30, Owed: 30, Worth: o, Exchanged: true},
		&BookLot{ID: 3, Currency: 1, Reserved: 30, Owed: 10, Worth: o, Exchanged: true})
	if err := b.Settle(2, 30, 0); err != nil || b.Lots()[0].Owed != 5 || b.Lots()[2].Owed != 10 {
		t.Fatalf("commit on a lot an exchange made: %v; lots %+v %+v", err, *b.Lots()[0], *b.Lots()[2])
	}
	if ops, err = b.Release(3, 30, 0); err != nil || len(ops) != 2 || ops[1].Amount != -10 {
		t.Fatalf("rollback on a lot an exchange made, owing 10: %+v %v", ops, err)
	}
	// Nor does what an order's own lot owes move to one an exchange made.
	b = newBook(t, &BookLot{ID: 1, Currency: 1, Reserved: 10, Owed: 10, Worth: o}, &BookLot{ID: 2, Currency: 1, Reserved: 30, Worth: o, Exchanged: true})
	if err := b.Settle(1, 10, 0); err != nil || b.Lots()[1].Owed != 0 {
		t.Fatalf("commit on the order's own lot: %v; the exchanged lot %+v", err, *b.Lots()[1])
	}
}

// TestBookLotsMax: a grant that needs a lot of its own beyond LotsMax is
// refused; a lot a pending hold reserves from counts, since a rollback
// brings it back; a free grant joining a lot is not refused.
func TestBookLotsMax(t *testing.T) {
	var lots []*BookLot
	for i := range LotsMax - 1 {
		lots = append(lots, &BookLot{ID: int64(i + 1), Currency: 1, Paid: true, Amount: 1})
	}
	lots = append(lots, &BookLot{ID: LotsMax, Currency: 1, Reserved: 1})
	b := newBook(t, lots...)
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 1, Paid: true}, CauseChange); ErrorCode(err) != CodeTooManyLots {
		t.Fatalf("grant of lot %d: %v", LotsMax+1, err)
	}
	if op, err := b.Grant(ValidOp{Currency: gold, Amount: 1}, CauseChange); err != nil || op.LotID != LotsMax {
		t.Fatalf("free grant joining the reserved free lot: %+v %v", op, err)
	}
	// The free lot first (it stays held: it reserves), then a paid one,
	// emptied.
	if _, _, err := b.Consume(gold, 2, CauseChange, false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 1, Paid: true}, CauseChange); err != nil {
		t.Fatalf("grant after a lot was spent: %v", err)
	}
}

// TestBookTrxOpsMax: a consume that would move more than TrxOpsMax lots
// is refused with nothing changed; one that moves exactly that many is
// planned, each op's balance_after from the running totals.
func TestBookTrxOpsMax(t *testing.T) {
	var lots []*BookLot
	for i := range TrxOpsMax + 1 {
		lots = append(lots, &BookLot{ID: int64(i + 1), Currency: 1, Amount: 2})
	}
	b := newBook(t, lots...)
	if _, _, err := b.Consume(gold, 2*TrxOpsMax+1, CauseChange, false); ErrorCode(err) != CodeTooManyLots {
		t.Fatalf("consume over %d lots: %v", TrxOpsMax+1, err)
	}
	if total := goldHeld(t, b); total != 2*(TrxOpsMax+1) {
		t.Fatalf("a refused consume changed the book: total %d", total)
	}
	ops, _, err := b.Consume(gold, 2*TrxOpsMax, CauseChange, false)
	if err != nil || len(ops) != TrxOpsMax {
		t.Fatalf("consume over %d lots: %d ops, %v", TrxOpsMax, len(ops), err)
	}
	for i, op := range ops {
		if want := Amount(2 * (TrxOpsMax - i)); op.BalanceAfter != want {
			t.Fatalf("op %d: balance_after %d, want %d", i, op.BalanceAfter, want)
		}
	}
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: 1}, CauseChange); ErrorCode(err) != CodeTooManyLots {
		t.Fatalf("an op past TrxOpsMax: %v", err)
	}
}

func TestBookConsumeAllOrNothing(t *testing.T) {
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Amount: 3}, &BookLot{ID: 2, Currency: 1, Amount: 4, Paid: true})
	if _, _, err := b.Consume(gold, 8, CauseChange, false); ErrorCode(err) != CodeInsufficientFunds {
		t.Fatalf("consume 8 of 7: %v", err)
	}
	if b.Lots()[0].Amount != 3 || b.Lots()[1].Amount != 4 {
		t.Fatal("a rejected consume changed lots")
	}
	ops, paid, err := b.Consume(gold, 5, CauseChange, false)
	if err != nil || paid != 2 || len(ops) != 2 || ops[1].BalanceAfter != 2 || ops[1].PaidAfter != 2 {
		t.Fatalf("consume 5: %+v %d %v", ops, paid, err)
	}
}

func TestBookExpireFirst(t *testing.T) {
	past := time.Now().Add(-time.Second)
	b := newBook(t, &BookLot{ID: 1, Currency: 1, Amount: 3, ExpiresAt: &past}, &BookLot{ID: 2, Currency: 1, Amount: 4})
	ops := b.Expire(nil)
	if len(ops) != 1 || ops[0].Amount != -3 || ops[0].BalanceAfter != 4 {
		t.Fatalf("expire = %+v", ops)
	}
	if total := goldHeld(t, b); total != 4 {
		t.Fatalf("total after expiry %d", total)
	}
}

func TestSortForSpend(t *testing.T) {
	soon, later := time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	lots := []SpendLot{{ID: 1, Paid: true}, {ID: 2}, {ID: 3, ExpiresAt: &later}, {ID: 4, ExpiresAt: &soon}, {ID: 5, Priority: 1, Paid: true}}
	SortForSpend(lots, DefaultSpendOrder)
	var got []int64
	for _, l := range lots {
		got = append(got, l.ID)
	}
	if want := []int64{5, 4, 3, 2, 1}; !equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// Age is the time of the write that created a lot, then its id: ids
	// come from sequence blocks cached per session, so a younger lot may
	// have the smaller id.
	t0 := time.Now()
	lots = []SpendLot{{ID: 9, CreatedAt: t0}, {ID: 3, CreatedAt: t0.Add(time.Microsecond)}, {ID: 7, CreatedAt: t0}}
	SortForSpend(lots, DefaultSpendOrder)
	got = got[:0]
	for _, l := range lots {
		got = append(got, l.ID)
	}
	if want := []int64{7, 9, 3}; !equal(got, want) {
		t.Fatalf("oldest first: %v, want %v", got, want)
	}
	SortForSpend(lots, []SpendKey{SpendNewest})
	if lots[0].ID != 3 {
		t.Fatalf("newest first: %+v", lots)
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRequestHashIgnoresMetaWhitespace(t *testing.T) {
	cat := mustCatalog(t, Currency{ID: 1, Code: "gold"})
	req := ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "k"}, Ops: []OpRequest{{Currency: "gold", Amount: 1}}, Meta: []byte(`{"a": 1}`)}
	a, err := cat.ValidateChange(req)
	if err != nil {
		t.Fatal(err)
	}
	req.Meta = []byte(`{"a":1}`)
	b, _ := cat.ValidateChange(req)
	req.Ops[0].Amount = 2
	c, _ := cat.ValidateChange(req)
	if string(a.Hash.Sum) != string(b.Hash.Sum) || string(a.Hash.Sum) == string(c.Hash.Sum) {
		t.Fatal("hash must ignore JSON whitespace and see the amount")
	}
}

func TestRevenueLineAddNeverWraps(t *testing.T) {
	l := RevenueLine{Currency: "gold", Deposited: 5, Deferred: math.MaxInt64 - 1}
	if err := l.Add(RevenueLine{Deposited: 7, Deferred: 1}); err != nil || l.Deposited != 12 || l.Deferred != math.MaxInt64 {
		t.Fatalf("add: %+v %v", l, err)
	}
	if err := l.Add(RevenueLine{Deposited: 1, Deferred: 1}); ErrorCode(err) != CodeInternal || l.Deposited != 12 {
		t.Fatalf("add past int64: %+v %v; want internal, the line unchanged", l, err)
	}
}

// TestValueShare: v×k/n to the nearest minor unit, a half down, all of v
// for the last coin, on 128 bits.
func TestValueShare(t *testing.T) {
	for _, c := range []struct{ v, k, n, want Amount }{
		{100, 1, 3, 33}, {67, 1, 2, 33}, {34, 1, 1, 34}, // a 3-coin lot priced 100, spent a coin at a time
		{200, 1, 3, 67}, {133, 1, 2, 66}, // 66.7 up, 66.5 down
		{1, 1, 2, 0}, {3, 1, 2, 1}, {5, 1, 3, 2}, {1, 1, 3, 0},
		{100, 3, 3, 100}, {0, 2, 3, 0}, {100, 0, 3, 0},
		{7, 5, 5, 7}, {499, 100, 500, 100}, // 99.8
		{math.MaxInt64, BalanceMax - 1, BalanceMax, math.MaxInt64 - 9}, // 9.22e18 × (1 − 1e-18): no overflow
		{math.MaxInt64, 1, BalanceMax, 9},
	} {
		if got := ValueShare(c.v, c.k, c.n); got != c.want {
			t.Errorf("ValueShare(%d, %d, %d) = %d, want %d", c.v, c.k, c.n, got, c.want)
		}
	}
}

// TestRevenueLineReconciles: opening + deposited + converted_in =
// recognised + converted_out + expired + refunded + deferred, in coins
// and in value, exactly, also near int64.
func TestRevenueLineReconciles(t *testing.T) {
	ok := RevenueLine{Opening: 1, Deposited: 10, ConvertedIn: 5, Recognised: 3, ConvertedOut: 2, Expired: 4, Refunded: 1, Deferred: 6,
		OpeningValue: 34, DepositedValue: 100, ConvertedInValue: 30, RecognisedValue: 33, ConvertedOutValue: 30, ExpiredValue: 67,
		RefundedValue: 0, DeferredValue: 34, RefundShortfall: 99, RefundShortfallValue: 99}
	for _, c := range []struct {
		name  string
		bend  func(*RevenueLine)
		valid bool
	}{
		{"reconciles; the shortfall is not part of it", func(*RevenueLine) {}, true},
		{"a coin deferred too many", func(l *RevenueLine) { l.Deferred++ }, false},
		{"a cent recognised too few", func(l *RevenueLine) { l.RecognisedValue-- }, false},
		{"figures past int64 in sum", func(l *RevenueLine) {
			*l = RevenueLine{Deposited: math.MaxInt64, ConvertedIn: math.MaxInt64, Recognised: math.MaxInt64, Deferred: math.MaxInt64}
		}, true},
		{"a wrapped figure", func(l *RevenueLine) {
			*l = RevenueLine{Deposited: math.MaxInt64, ConvertedIn: 1, Deferred: math.MinInt64}
		}, false},
	} {
		l := ok
		c.bend(&l)
		if err := l.Reconciles(); (err == nil) != c.valid {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	l := ok
	if err := l.Add(RevenueLine{DeferredValue: math.MaxInt64}); ErrorCode(err) != CodeInternal || l != ok {
		t.Fatalf("a value past int64 added: %+v %v", l, err)
	}
}
