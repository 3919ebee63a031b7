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
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true}, Currency{ID: 2, Code: "silver"}, Currency{ID: 3, Code: "gems"})
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
			checkBalances(t, got, err, tc.code, Balances{Namespace: 1, PlayerID: 42, Version: 9, Balances: tc.want})
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

// TestBalancesAt: a balance at a past time T is the balance after the
// last op at or before T, less the coins of lots expired by T: those
// whose expiry no op records yet, and those the first write after T
// recorded (its ops on lots expired by T, a reservation returned and
// expired at once counting nothing). The answer does not change when
// the sweeper records an expiry after T.
func TestBalancesAt(t *testing.T) {
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true}, Currency{ID: 2, Code: "silver"})
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	before, after := at.Add(-time.Minute), at.Add(time.Minute)
	expired := func(amount Amount, paid bool, expires *time.Time) BookLot {
		return BookLot{Currency: 1, Amount: amount, Paid: paid, ExpiresAt: expires}
	}
	next := func(amount Amount, paid bool, expires *time.Time) PastOp {
		return PastOp{Amount: amount, Paid: paid, LotExpiresAt: expires}
	}
	for name, tc := range map[string]struct {
		q    BalanceQuery
		past []PastBalance
		want []Balance
		code Code
	}{
		"the last op's balance": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Paid: 20}},
			want: []Balance{{Currency: "gold", Total: 50, Paid: 20, Free: 30}}},
		"an expiry not recorded yet: its lot's coins are gone from T on": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Paid: 20, Expired: []BookLot{expired(25, false, &before), expired(4, true, &at)}}},
			want: []Balance{{Currency: "gold", Total: 21, Paid: 16, Free: 5}}},
		"the same expiry recorded after T: the same answer": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Paid: 20, Next: []PastOp{next(-25, false, &before), next(-4, true, &at)}}},
			want: []Balance{{Currency: "gold", Total: 21, Paid: 16, Free: 5}}},
		"the first write after T: its ops on lots expired later, or on none, are after T": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Paid: 20, Next: []PastOp{next(-25, false, &before), next(-7, false, &after), next(9, false, nil)}}},
			want: []Balance{{Currency: "gold", Total: 25, Paid: 20, Free: 5}}},
		"a reservation a rollback returned to a lot expired by T, expired at once: nothing": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Next: []PastOp{next(-10, false, &before), next(6, false, &before), next(-6, false, &before)}}},
			want: []Balance{{Currency: "gold", Total: 40, Free: 40}}},
		"a lot expiring after T still counts": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: 50, Expired: []BookLot{expired(35, false, &after)}}},
			want: []Balance{{Currency: "gold", Total: 50, Free: 50}}},
		"all currencies: those held": {q: BalanceQuery{},
			past: []PastBalance{{Currency: 1, Total: 5, Expired: []BookLot{expired(5, false, &before)}}, {Currency: 2, Total: 3}},
			want: []Balance{{Currency: "silver", Total: 3, Free: 3}}},
		"all currencies, loaded in any order: in currency id order": {q: BalanceQuery{},
			past: []PastBalance{{Currency: 2, Total: 3}, {Currency: 1, Total: 5}},
			want: []Balance{{Currency: "gold", Total: 5, Free: 5}, {Currency: "silver", Total: 3, Free: 3}}},
		"a named currency not held: 0": {q: BalanceQuery{Currency: "silver"},
			past: []PastBalance{{Currency: 2}},
			want: []Balance{{Currency: "silver"}}},
		"past int64": {q: BalanceQuery{Currency: "gold"},
			past: []PastBalance{{Currency: 1, Total: math.MaxInt64, Next: []PastOp{next(1, false, &before)}}}, code: CodeInternal},
	} {
		t.Run(name, func(t *testing.T) {
			tc.q.Namespace, tc.q.PlayerID, tc.q.At = 1, 42, &at
			got, err := c.BalancesAt(tc.q, PastVersion{Trx: &PastTrx{CreatedAt: before, Version: 9}}, tc.past)
			checkBalances(t, got, err, tc.code, Balances{Namespace: 1, PlayerID: 42, Version: 9, At: &at, Balances: tc.want})
		})
	}
}

// TestVersionAt: the version of a balance at a past time T is the one
// the player's last write at or before T left, as a current read then
// answered. A write inserts trx or finishes a hold; a hold's finish
// overwrites its row's version, so a hold finished after T counts with
// the version its begin left, and a finish after the newest trx before T
// decides over that trx.
func TestVersionAt(t *testing.T) {
	c := mustCatalog(t, Currency{ID: 1, Code: "gold"})
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return at.Add(-d) }
	v := func(n int64) *int64 { return &n }
	for name, tc := range map[string]struct {
		past PastVersion
		want int64
	}{
		"no write by T":                 {past: PastVersion{}, want: 0},
		"a trx at T itself":             {past: PastVersion{Trx: &PastTrx{CreatedAt: at, Version: 4}}, want: 4},
		"a hold pending at T and since": {past: PastVersion{Trx: &PastTrx{CreatedAt: ago(time.Second), Version: 4}}, want: 4},
		"a hold finished after T: its begin's version, not the finish's": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(time.Second), Version: 7, BeginVersion: v(4)}},
			want: 4},
		"a hold finished by T, nothing after: its finish's": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(2 * time.Second), Version: 5, BeginVersion: v(4)},
				Finish: &PastFinish{At: ago(time.Second), Version: 5}},
			want: 5},
		"a finish after the last trx: the finish's, not the trx's": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(2 * time.Second), Version: 5},
				Finish: &PastFinish{At: ago(time.Second), Version: 6}},
			want: 6},
		"a finish before the last trx: the trx's": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(time.Second), Version: 7},
				Finish: &PastFinish{At: ago(2 * time.Second), Version: 6}},
			want: 7},
		"a finish and the expiry trx it inserted, one write": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(time.Second), Version: 6},
				Finish: &PastFinish{At: ago(time.Second), Version: 6}},
			want: 6},
		"a hold pending at T begun after a finish, finished since": {
			past: PastVersion{Trx: &PastTrx{CreatedAt: ago(time.Second), Version: 9, BeginVersion: v(7)},
				Finish: &PastFinish{At: ago(2 * time.Second), Version: 6}},
			want: 7},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := c.BalancesAt(BalanceQuery{Namespace: 1, PlayerID: 42, At: &at}, tc.past, nil)
			checkBalances(t, got, err, "", Balances{Namespace: 1, PlayerID: 42, Version: tc.want, At: &at, Balances: []Balance{}})
		})
	}
}

// checkBalances fails t unless a read answered want, or failed with code
// when one is given.
func checkBalances(t *testing.T, got Balances, err error, code Code, want Balances) {
	t.Helper()
	if code != "" {
		if ErrorCode(err) != code {
			t.Fatalf("error %v, want %s", err, code)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
