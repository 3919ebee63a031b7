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
	c, err := NewCatalog([]Currency{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "gems", Paid: true}}, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
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
				if err := r.Add(s.currency, s.fiat, s.line); err != nil {
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
	if err := r.Add(1, "USD", RevenueLine{Deposited: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(1, "USD", RevenueLine{Deposited: 1}); ErrorCode(err) != CodeInternal {
		t.Fatalf("past int64: %v", err)
	}
}
