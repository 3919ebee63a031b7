package coffer

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// TestRevenueReport: the report adds up the shards' sums per currency and
// fiat, leaves out currencies no longer configured (and, when the query
// names one, the others), answers by currency id then fiat, and refuses a
// figure past int64.
func TestRevenueReport(t *testing.T) {
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true}, Currency{ID: 2, Code: "gems", Paid: true})
	type sum struct {
		currency CurrencyID
		fiat     string
		line     RevenueLine
	}
	shards := []sum{
		{2, "USD", RevenueLine{Deposited: 5, DepositedValue: 50}},
		{1, "USD", RevenueLine{Deposited: 3, Recognised: 1, Deferred: 2, DepositedValue: 30}},
		{9, "USD", RevenueLine{Deposited: 7}}, // a currency no longer configured
		{1, "EUR", RevenueLine{Opening: 4, Deferred: 4, OpeningValue: 40}},
		{1, "USD", RevenueLine{Deposited: 1, Recognised: 1, DepositedValue: 10}},
	}
	for name, tc := range map[string]struct {
		currency string
		want     []RevenueLine
	}{
		"all": {want: []RevenueLine{
			{Currency: "gold", Fiat: "EUR", Opening: 4, Deferred: 4, OpeningValue: 40},
			{Currency: "gold", Fiat: "USD", Deposited: 4, Recognised: 2, Deferred: 2, DepositedValue: 40},
			{Currency: "gems", Fiat: "USD", Deposited: 5, DepositedValue: 50}}},
		"one currency": {currency: "gems", want: []RevenueLine{{Currency: "gems", Fiat: "USD", Deposited: 5, DepositedValue: 50}}},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := c.NewRevenueReport(RevenueQuery{Namespace: 1, Currency: tc.currency})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range shards {
				if err := r.add(s.currency, s.fiat, s.line); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.Lines(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := c.NewRevenueReport(RevenueQuery{Namespace: 1, Currency: "copper"}); ErrorCode(err) != CodeInvalid {
		t.Fatalf("unknown currency: %v", err)
	}
	r, _ := c.NewRevenueReport(RevenueQuery{Namespace: 1})
	if err := r.add(1, "USD", RevenueLine{Deposited: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if err := r.add(1, "USD", RevenueLine{Deposited: 1}); ErrorCode(err) != CodeInternal {
		t.Fatalf("past int64: %v", err)
	}
}

// TestRevenueSums: which figures each sum a store reads makes, in coins
// and in value, and a period's sums reconciling.
func TestRevenueSums(t *testing.T) {
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true})
	op := func(kind OpKind, cause OpCause, within bool, amount Amount) RevenueSum {
		return RevenueSum{Currency: 1, Fiat: "USD", Kind: kind, Cause: cause, Within: within, Amount: amount, Value: 10 * amount}
	}
	reserved := func(atFrom, atTo bool, amount Amount) RevenueSum {
		return RevenueSum{Currency: 1, Fiat: "USD", Reserved: true, AtFrom: atFrom, AtTo: atTo, Amount: amount, Value: 10 * amount}
	}
	line := func(l RevenueLine) RevenueLine {
		l.Currency, l.Fiat = "gold", "USD"
		return l
	}
	for name, tc := range map[string]struct {
		sums []RevenueSum
		want RevenueLine
	}{
		"a purchase in the period": {[]RevenueSum{op(OpGrant, CauseChange, true, 10)},
			line(RevenueLine{Deposited: 10, Deferred: 10, DepositedValue: 100, DeferredValue: 100})},
		"ops before the period open it": {[]RevenueSum{op(OpGrant, CauseChange, false, 10), op(OpConsume, CauseChange, false, -4)},
			line(RevenueLine{Opening: 6, Deferred: 6, OpeningValue: 60, DeferredValue: 60})},
		"a spend is recognised, a rollback's release takes it back": {[]RevenueSum{op(OpConsume, CauseChange, true, -4), op(OpGrant, CauseRelease, true, 3)},
			line(RevenueLine{Recognised: 1, Deferred: -1, RecognisedValue: 10, DeferredValue: -10})},
		"exchanges carry coins over": {[]RevenueSum{op(OpGrant, CauseExchange, true, 5), op(OpConsume, CauseExchange, true, -5)},
			line(RevenueLine{ConvertedIn: 5, ConvertedOut: 5, ConvertedInValue: 50, ConvertedOutValue: 50})},
		"expiries and refunds": {[]RevenueSum{op(OpExpire, CauseChange, true, -2), op(OpConsume, CauseRefund, true, -6)},
			line(RevenueLine{Expired: 2, Refunded: 6, Deferred: -8, ExpiredValue: 20, RefundedValue: 60, DeferredValue: -80})},
		"a hold pending at From: its reservation opens, recognised in the period": {[]RevenueSum{reserved(true, false, 7)},
			line(RevenueLine{Opening: 7, Recognised: 7, OpeningValue: 70, RecognisedValue: 70})},
		"a hold pending at To: its reservation is deferred, not recognised": {[]RevenueSum{reserved(false, true, 7)},
			line(RevenueLine{Recognised: -7, Deferred: 7, RecognisedValue: -70, DeferredValue: 70})},
		"a hold pending throughout": {[]RevenueSum{reserved(true, true, 7)},
			line(RevenueLine{Opening: 7, Deferred: 7, OpeningValue: 70, DeferredValue: 70})},
		"a hold rolled back gives a refund what it counted short": {[]RevenueSum{op(OpGrant, CauseRelease, true, 4), op(OpConsume, CauseRefundHeld, true, -4)},
			line(RevenueLine{Recognised: -4, Refunded: 4, RefundShortfall: -4, RecognisedValue: -40, RefundedValue: 40, RefundShortfallValue: -40})},
		"a refund's shortfall": {[]RevenueSum{{Currency: 1, Fiat: "USD", Shortfall: true, Within: true, Amount: 3, Value: 30}},
			line(RevenueLine{RefundShortfall: 3, RefundShortfallValue: 30})},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := c.NewRevenueReport(RevenueQuery{Namespace: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.sums {
				if err := r.AddSum(s); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.Lines(); len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// 100 bought before the period; in it 50 bought, 30 spent by a hold
	// still pending at To, 10 expired.
	r, _ := c.NewRevenueReport(RevenueQuery{Namespace: 1})
	for _, s := range []RevenueSum{op(OpGrant, CauseChange, false, 100), op(OpGrant, CauseChange, true, 50),
		op(OpConsume, CauseChange, true, -30), reserved(false, true, 30), op(OpExpire, CauseChange, true, -10)} {
		if err := r.AddSum(s); err != nil {
			t.Fatal(err)
		}
	}
	l := r.Lines()[0]
	if err := l.Reconciles(); err != nil || l.Recognised != 0 || l.Deferred != 140 {
		t.Fatalf("period: %+v %v", l, err)
	}
	if err := r.AddSum(RevenueSum{Currency: 1, Fiat: "USD", Within: true, Kind: OpConsume, Cause: CauseChange, Amount: math.MinInt64}); ErrorCode(err) != CodeInternal {
		t.Fatalf("a sum of MinInt64: %v", err)
	}
}

// TestNewRevenueQuery: a report needs both ends of its period, whichever
// transport left one out.
func TestNewRevenueQuery(t *testing.T) {
	from, to := time.Unix(0, 0), time.Unix(3600, 0)
	for _, c := range []struct {
		from, to *time.Time
		ok       bool
	}{{nil, nil, false}, {&from, nil, false}, {nil, &to, false}, {&from, &to, true}} {
		q, err := NewRevenueQuery(3, c.from, c.to, "gold")
		switch {
		case !c.ok && ErrorCode(err) != CodeInvalid:
			t.Errorf("from %v to %v: %v, want invalid_argument", c.from, c.to, err)
		case c.ok && (err != nil || q != RevenueQuery{Namespace: 3, From: from, To: to, Currency: "gold"}):
			t.Errorf("from %v to %v: %+v, %v", c.from, c.to, q, err)
		}
	}
}
