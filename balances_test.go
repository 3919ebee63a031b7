package coffer

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// TestCurrentBalances: what a read of current balances answers from the
// lots a store loaded: live lots only, paid and free apart, one balance
// per currency held in id order, a named currency alone (at 0 when not
// held), the lots behind each balance on request, and a sum past int64
// refused.
func TestCurrentBalances(t *testing.T) {
	c, err := NewCatalog([]Currency{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "silver"}, {ID: 3, Code: "gems"}}, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	soon, past := now.Add(time.Minute), now.Add(-time.Minute)
	lot := func(id int64, cur CurrencyID, paid bool, amount Amount, expires *time.Time) BookLot {
		return BookLot{ID: id, Currency: cur, Paid: paid, Amount: amount, ExpiresAt: expires, Priority: 1, CreatedAt: now.Add(-time.Hour)}
	}
	lots := []BookLot{
		lot(1, 2, false, 5, nil),
		lot(2, 1, true, 7, &soon),
		lot(3, 1, false, 3, nil),
		lot(4, 1, false, 100, &past), // expired, not yet swept
		lot(5, 1, false, 100, &now),  // expires at the read's time
		lot(6, 9, false, 11, nil),    // a currency no longer configured
		lot(7, 3, false, 0, nil),     // spent
	}
	for name, tc := range map[string]struct {
		q    BalanceQuery
		lots []BookLot
		want []Balance
		code Code
	}{
		"live lots, by currency id": {q: BalanceQuery{}, lots: lots,
			want: []Balance{{Currency: "gold", Total: 10, Paid: 7, Free: 3}, {Currency: "silver", Total: 5, Free: 5}}},
		"one currency": {q: BalanceQuery{Currency: "silver"}, lots: lots,
			want: []Balance{{Currency: "silver", Total: 5, Free: 5}}},
		"one currency not held": {q: BalanceQuery{Currency: "gems"}, lots: lots,
			want: []Balance{{Currency: "gems"}}},
		"no lots": {q: BalanceQuery{}, want: []Balance{}},
		"with lots": {q: BalanceQuery{Currency: "gold", Lots: true}, lots: lots,
			want: []Balance{{Currency: "gold", Total: 10, Paid: 7, Free: 3, Lots: []Lot{
				{ID: 2, Currency: "gold", Paid: true, Amount: 7, ExpiresAt: &soon, Priority: 1, CreatedAt: now.Add(-time.Hour)},
				{ID: 3, Currency: "gold", Amount: 3, Priority: 1, CreatedAt: now.Add(-time.Hour)}}}}},
		"unknown currency": {q: BalanceQuery{Currency: "copper"}, code: CodeInvalid},
		"past int64":       {q: BalanceQuery{}, lots: []BookLot{lot(1, 2, false, math.MaxInt64, nil), lot(2, 2, false, 1, nil)}, code: CodeInternal},
	} {
		t.Run(name, func(t *testing.T) {
			tc.q.Namespace, tc.q.PlayerID = 1, 42
			got, err := c.CurrentBalances(tc.q, 9, tc.lots, now)
			if tc.code != "" {
				if ErrorCode(err) != tc.code {
					t.Fatalf("error %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := Balances{Namespace: 1, PlayerID: 42, Version: 9, Balances: tc.want}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestHeld: balances as they were at a time list the currencies held,
// unless the query names one.
func TestHeld(t *testing.T) {
	all := []Balance{{Currency: "gold"}, {Currency: "silver", Total: 2, Free: 2}}
	if got := (BalanceQuery{}).Held(append([]Balance(nil), all...)); !reflect.DeepEqual(got, all[1:]) {
		t.Fatalf("got %+v", got)
	}
	if got := (BalanceQuery{Currency: "gold"}).Held(all[:1]); !reflect.DeepEqual(got, all[:1]) {
		t.Fatalf("named: got %+v", got)
	}
}
