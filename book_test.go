package coffer

import (
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

func newBook(lots ...*BookLot) *Book {
	next := int64(100)
	return &Book{Lots: lots, Now: time.Now(), NewID: func() int64 { next++; return next }}
}

func TestBookGrantOverflow(t *testing.T) {
	b := newBook(&BookLot{ID: 1, Currency: 1, Amount: math.MaxInt64 - 5})
	if _, err := b.Grant(1, 6, false, nil, 0, nil, CauseChange); ErrorCode(err) != CodeInvalid {
		t.Fatalf("overflow grant: %v", err)
	}
	if _, err := b.Grant(1, 5, false, nil, 0, nil, CauseChange); err != nil {
		t.Fatalf("grant to exactly MaxInt64: %v", err)
	}
}

func TestBookConsumeAllOrNothing(t *testing.T) {
	cur := &Currency{ID: 1, Code: "gold", SpendOrder: DefaultSpendOrder}
	b := newBook(&BookLot{ID: 1, Currency: 1, Amount: 3}, &BookLot{ID: 2, Currency: 1, Amount: 4, Paid: true})
	if _, _, err := b.Consume(cur, 8, CauseChange); ErrorCode(err) != CodeInsufficientFunds {
		t.Fatalf("consume 8 of 7: %v", err)
	}
	if b.Lots[0].Amount != 3 || b.Lots[1].Amount != 4 {
		t.Fatal("a rejected consume changed lots")
	}
	ops, paid, err := b.Consume(cur, 5, CauseChange)
	if err != nil || paid != 2 || len(ops) != 2 || ops[1].BalanceAfter != 2 || ops[1].PaidAfter != 2 {
		t.Fatalf("consume 5: %+v %d %v", ops, paid, err)
	}
}

func TestBookExpireFirst(t *testing.T) {
	past := time.Now().Add(-time.Second)
	b := newBook(&BookLot{ID: 1, Currency: 1, Amount: 3, ExpiresAt: &past}, &BookLot{ID: 2, Currency: 1, Amount: 4})
	ops := b.Expire()
	if len(ops) != 1 || ops[0].Amount != -3 || ops[0].BalanceAfter != 4 {
		t.Fatalf("expire = %+v", ops)
	}
	if total, _ := b.Totals(1); total != 4 {
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
	cat, _ := NewCatalog([]Currency{{ID: 1, Code: "gold"}}, time.Minute, time.Hour)
	req := ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "k"}, Ops: []OpRequest{{Currency: "gold", Amount: 1}}, Meta: []byte(`{"a": 1}`)}
	a, err := cat.ValidateChange(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req.Meta = []byte(`{"a":1}`)
	b, _ := cat.ValidateChange(req, time.Now())
	req.Ops[0].Amount = 2
	c, _ := cat.ValidateChange(req, time.Now())
	if string(a.Hash) != string(b.Hash) || string(a.Hash) == string(c.Hash) {
		t.Fatal("hash must ignore JSON whitespace and see the amount")
	}
}
