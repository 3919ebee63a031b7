package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// TestRevenueReadsOnlyPaidOps: the report's statement is an index-only
// scan of op_N_revenue, a namespace's paid ops up to the report's end,
// not a read of every op of the shard, and reads the holds of its period
// in trx_N_holds. The planner is kept off sequential
// scans, as a large ledger would keep it: on the few rows here it would
// read the table whatever the indexes.
func TestRevenueReadsOnlyPaidOps(t *testing.T) {
	e := newEnv(t)
	e.mustChange(15, "buy", paid("gold", 100, "o"))
	tx, err := e.router.Database(0).Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
	must(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN "+postgres.RevenueSQL(0), 1, time.Now().Add(-time.Hour), time.Now())
	must(t, err)
	var plan []string
	for rows.Next() {
		var line string
		must(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	must(t, rows.Err())
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "Index Only Scan using op_0_revenue") || !strings.Contains(text, "using trx_0_holds") {
		t.Fatalf("the revenue report does not read the paid ops' and the holds' indexes:\n%s", text)
	}
}

// revenue is the report of namespace 1 over [from, to), a line per
// currency and fiat; each line must reconcile.
func (e *env) revenue(from, to time.Time) string {
	e.t.Helper()
	lines, err := e.store.Revenue(ctx, coffer.RevenueQuery{Namespace: 1, From: from, To: to})
	must(e.t, err)
	var out []string
	for _, l := range lines {
		if err := l.Reconciles(); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s: opening %d deposited %d recognised %d converted %d/%d expired %d refunded %d/%d deferred %d | "+
			"value: opening %d deposited %d recognised %d converted %d/%d expired %d refunded %d/%d deferred %d",
			l.Currency, l.Fiat, l.Opening, l.Deposited, l.Recognised, l.ConvertedIn, l.ConvertedOut, l.Expired, l.Refunded, l.RefundShortfall, l.Deferred,
			l.OpeningValue, l.DepositedValue, l.RecognisedValue, l.ConvertedInValue, l.ConvertedOutValue, l.ExpiredValue,
			l.RefundedValue, l.RefundShortfallValue, l.DeferredValue))
	}
	return strings.Join(out, "\n")
}

// TestRevenueInRealMoney: the report's lines, in coins and value, per
// currency and fiat, over periods that cut through holds: a purchase
// partly spent, a hold committed in a later period than its begin (its
// consume is recognised at the commit, deferred until), a hold rolled
// back, an exchange into a payable currency (converted, in value too),
// an expiry (breakage). Every line reconciles (env.revenue), and so does
// the audit at the end.
func TestRevenueInRealMoney(t *testing.T) {
	e := newEnv(t)
	hold := func(key string, amount coffer.Amount) {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(40, key), Hold: true, Ops: []coffer.OpRequest{free("gold", -amount)}})
		must(t, err)
	}
	mark := func() time.Time {
		time.Sleep(2 * time.Millisecond)
		m := time.Now()
		time.Sleep(2 * time.Millisecond)
		return m
	}
	m0 := mark()
	e.mustChange(40, "buy-1", bought(3, "o1", 100))
	euros := bought(2, "o2", 60)
	euros.Purchase.Fiat = "EUR"
	e.mustChange(40, "buy-2", euros)
	e.mustChange(40, "spend", free("gold", -1)) // o1: 33
	hold("h1", 1)                               // o1: 33, reserved
	m1 := mark()
	_, _, err := e.store.Commit(ctx, byItsClient(40, "h1"))
	must(t, err)
	hold("h2", 1) // o1: the last coin, 34
	// o2: 1 of 2 coins worth 60, 30.
	_, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(40, "ex"), From: "gold", To: "silver", Amount: 1})
	must(t, err)
	m2 := mark()
	_, _, err = e.store.Rollback(ctx, byItsClient(40, "h2"))
	must(t, err)
	m3 := mark()
	for _, c := range []struct {
		name     string
		from, to time.Time
		want     string
	}{
		{"from the start, h2 pending", m0, m2,
			"gold EUR: opening 0 deposited 2 recognised 0 converted 0/1 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 0 deposited 60 recognised 0 converted 0/30 expired 0 refunded 0/0 deferred 30\n" +
				"gold USD: opening 0 deposited 3 recognised 2 converted 0/0 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 0 deposited 100 recognised 66 converted 0/0 expired 0 refunded 0/0 deferred 34\n" +
				"silver EUR: opening 0 deposited 0 recognised 0 converted 100/0 expired 0 refunded 0/0 deferred 100 | " +
				"value: opening 0 deposited 0 recognised 0 converted 30/0 expired 0 refunded 0/0 deferred 30"},
		{"h1 begun before, committed within", m1, m2,
			"gold EUR: opening 2 deposited 0 recognised 0 converted 0/1 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 60 deposited 0 recognised 0 converted 0/30 expired 0 refunded 0/0 deferred 30\n" +
				"gold USD: opening 2 deposited 0 recognised 1 converted 0/0 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 67 deposited 0 recognised 33 converted 0/0 expired 0 refunded 0/0 deferred 34\n" +
				"silver EUR: opening 0 deposited 0 recognised 0 converted 100/0 expired 0 refunded 0/0 deferred 100 | " +
				"value: opening 0 deposited 0 recognised 0 converted 30/0 expired 0 refunded 0/0 deferred 30"},
		{"h2 begun before, rolled back within: nothing recognised", m2, m3,
			"gold EUR: opening 1 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 30 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 30\n" +
				"gold USD: opening 1 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 1 | " +
				"value: opening 34 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 34\n" +
				"silver EUR: opening 100 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 100 | " +
				"value: opening 30 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 30"},
	} {
		if got := e.revenue(c.from, c.to); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	// Breakage: a purchase that expires after a partial spend.
	later := time.Now().Add(time.Hour)
	expiring := bought(4, "o3", 100)
	expiring.ExpiresAt = &later
	e.mustChange(40, "buy-3", expiring)
	e.mustChange(40, "spend-3", free("gold", -1)) // the expiring lot first: 25
	e.expireNow(40)
	e.mustChange(40, "reward", free("gold", 1)) // records the expiry first: 3 coins, 75
	want := "gold USD: opening 1 deposited 4 recognised 1 converted 0/0 expired 3 refunded 0/0 deferred 1 | " +
		"value: opening 34 deposited 100 recognised 25 converted 0/0 expired 75 refunded 0/0 deferred 34"
	if got := e.revenue(m3, time.Now().Add(time.Minute)); !strings.Contains(got, want) {
		t.Fatalf("after the expiry:\n%s\nwant a line\n%s", got, want)
	}
}

// TestAuditFindsUnreconciledRevenue: an op the report would class wrongly
// (a paid consume turned into a release, which no write makes) leaves
// every lot equal to its ops, but the revenue no longer reconciles.
func TestAuditFindsUnreconciledRevenue(t *testing.T) {
	e := newEnv(t)
	e.mustChange(41, "buy", bought(3, "o1", 100))
	e.mustChange(41, "spend", free("gold", -1))
	e.auditFinds(41, "revenue does not reconcile", "UPDATE op_%d SET cause = 'release' WHERE kind = 'consume' AND paid")
}

// TestRevenueOfARefund: a purchase of 3 silver for 100, a coin spent
// (33), refunded under write_off: the 2 coins left go back with their
// value (67), the spent one is the shortfall, worth 33, and stays
// recognised.
func TestRevenueOfARefund(t *testing.T) {
	e := newEnv(t)
	from := time.Now()
	buy := bought(3, "o1", 100)
	buy.Currency = "silver"
	e.mustChange(42, "buy", buy)
	e.mustChange(42, "spend", free("silver", -1))
	if got := values(e.mustRefund(refundOf(42, "r", "o1"))); got != "USD -67" {
		t.Fatalf("refund ops' values: %s", got)
	}
	want := "silver USD: opening 0 deposited 3 recognised 1 converted 0/0 expired 0 refunded 2/1 deferred 0 | " +
		"value: opening 0 deposited 100 recognised 33 converted 0/0 expired 0 refunded 67/33 deferred 0"
	if got := e.revenue(from, time.Now().Add(time.Minute)); got != want {
		t.Fatalf("revenue:\n%s\nwant\n%s", got, want)
	}
}

// TestRevenueWorkedExample is the worked example of docs/ledger.md
// (Revenue report): 10 gold bought for 500, 3 spent, 2 exchanged into
// silver, the rest expired, then 50 silver spent.
func TestRevenueWorkedExample(t *testing.T) {
	e := newEnv(t)
	t0 := time.Now()
	later := time.Now().Add(time.Hour)
	buy := bought(10, "7731", 500)
	buy.ExpiresAt = &later
	e.mustChange(43, "buy", buy)
	e.mustChange(43, "spend", free("gold", -3))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(43, "ex"), From: "gold", To: "silver", Amount: 2})
	must(t, err)
	t1 := time.Now()
	want := "gold USD: opening 0 deposited 10 recognised 3 converted 0/2 expired 0 refunded 0/0 deferred 5 | " +
		"value: opening 0 deposited 500 recognised 150 converted 0/100 expired 0 refunded 0/0 deferred 250\n" +
		"silver USD: opening 0 deposited 0 recognised 0 converted 200/0 expired 0 refunded 0/0 deferred 200 | " +
		"value: opening 0 deposited 0 recognised 0 converted 100/0 expired 0 refunded 0/0 deferred 100"
	if got := e.revenue(t0, t1); got != want {
		t.Fatalf("before the expiry:\n%s\nwant\n%s", got, want)
	}
	e.expireNow(43)
	e.mustChange(43, "expire", free("gold", 1)) // records the expiry first
	e.mustChange(43, "spend-silver", free("silver", -50))
	t2 := time.Now().Add(time.Minute)
	want = "gold USD: opening 0 deposited 10 recognised 3 converted 0/2 expired 5 refunded 0/0 deferred 0 | " +
		"value: opening 0 deposited 500 recognised 150 converted 0/100 expired 250 refunded 0/0 deferred 0\n" +
		"silver USD: opening 0 deposited 0 recognised 50 converted 200/0 expired 0 refunded 0/0 deferred 150 | " +
		"value: opening 0 deposited 0 recognised 25 converted 100/0 expired 0 refunded 0/0 deferred 75"
	if got := e.revenue(t0, t2); got != want {
		t.Fatalf("after:\n%s\nwant\n%s", got, want)
	}
	want = "gold USD: opening 5 deposited 0 recognised 0 converted 0/0 expired 5 refunded 0/0 deferred 0 | " +
		"value: opening 250 deposited 0 recognised 0 converted 0/0 expired 250 refunded 0/0 deferred 0\n" +
		"silver USD: opening 200 deposited 0 recognised 50 converted 0/0 expired 0 refunded 0/0 deferred 150 | " +
		"value: opening 100 deposited 0 recognised 25 converted 0/0 expired 0 refunded 0/0 deferred 75"
	if got := e.revenue(t1, t2); got != want {
		t.Fatalf("the second period:\n%s\nwant\n%s", got, want)
	}
}

// TestRevenueOfAnExchangedPurchaseChargedBack is the worked example of
// docs/ledger.md (Refunds: a purchase exchanged then charged back): 10
// gold bought for 500, 6 exchanged into 600 silver, 1 gold and 200 silver
// spent, then the order charged back: 3 gold and 400 silver (counting for
// 4 gold) come back; 3 gold are the shortfall, worth 150.
func TestRevenueOfAnExchangedPurchaseChargedBack(t *testing.T) {
	e := newEnv(t)
	t0 := time.Now()
	e.mustChange(44, "buy", bought(10, "X", 500))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(44, "ex"), From: "gold", To: "silver", Amount: 6})
	must(t, err)
	e.mustChange(44, "spend", free("gold", -1), free("silver", -200))
	t1 := time.Now()
	want := "gold USD: opening 0 deposited 10 recognised 1 converted 0/6 expired 0 refunded 0/0 deferred 3 | " +
		"value: opening 0 deposited 500 recognised 50 converted 0/300 expired 0 refunded 0/0 deferred 150\n" +
		"silver USD: opening 0 deposited 0 recognised 200 converted 600/0 expired 0 refunded 0/0 deferred 400 | " +
		"value: opening 0 deposited 0 recognised 100 converted 300/0 expired 0 refunded 0/0 deferred 200"
	if got := e.revenue(t0, t1); got != want {
		t.Fatalf("before the chargeback:\n%s\nwant\n%s", got, want)
	}
	req := refundOf(44, "cb", "X")
	req.Kind = coffer.RefundChargeback
	trx := e.mustRefund(req)
	if fmt.Sprint(trx.Refund.Exchanged, trx.Refund.Shortfall) != "[{gold 4 0}] [{gold 3 150}]" {
		t.Fatalf("exchanged %+v, shortfall %+v", trx.Refund.Exchanged, trx.Refund.Shortfall)
	}
	t2 := time.Now().Add(time.Minute)
	want = "gold USD: opening 0 deposited 10 recognised 1 converted 0/6 expired 0 refunded 3/3 deferred 0 | " +
		"value: opening 0 deposited 500 recognised 50 converted 0/300 expired 0 refunded 150/150 deferred 0\n" +
		"silver USD: opening 0 deposited 0 recognised 200 converted 600/0 expired 0 refunded 400/0 deferred 0 | " +
		"value: opening 0 deposited 0 recognised 100 converted 300/0 expired 0 refunded 200/0 deferred 0"
	if got := e.revenue(t0, t2); got != want {
		t.Fatalf("after:\n%s\nwant\n%s", got, want)
	}
	want = "gold USD: opening 3 deposited 0 recognised 0 converted 0/0 expired 0 refunded 3/3 deferred 0 | " +
		"value: opening 150 deposited 0 recognised 0 converted 0/0 expired 0 refunded 150/150 deferred 0\n" +
		"silver USD: opening 400 deposited 0 recognised 0 converted 0/0 expired 0 refunded 400/0 deferred 0 | " +
		"value: opening 200 deposited 0 recognised 0 converted 0/0 expired 0 refunded 200/0 deferred 0"
	if got := e.revenue(t1, t2); got != want {
		t.Fatalf("the chargeback's period:\n%s\nwant\n%s", got, want)
	}
}

// TestRevenueOfAnExchangeWhosePaidPartRoundsToNothing: 99 free silver and
// 1 paid silver (bought for 10 US cents) exchanged at silver→gold 100:1
// yield 1 gold whose paid part, floor(1/100), is 0: no paid gold lot is
// made, so the paid silver became free gold and its 10 cents are revenue
// recognised. Over all currencies of USD, from the ledger's start,
// deposited = recognised + expired + refunded + deferred, and the audit
// is clean.
func TestRevenueOfAnExchangeWhosePaidPartRoundsToNothing(t *testing.T) {
	e := newEnv(t)
	must(t, e.catalog.AddRate(1, "silver", "gold", coffer.Rate{Num: 1, Den: 100}))
	from := time.Now()
	buy := bought(1, "o1", 10)
	buy.Currency = "silver"
	e.mustChange(45, "buy", buy, free("silver", 99))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(45, "ex"), From: "silver", To: "gold", Amount: 100})
	must(t, err)
	lines, err := e.store.Revenue(ctx, coffer.RevenueQuery{Namespace: 1, From: from, To: time.Now().Add(time.Minute)})
	must(t, err)
	var deposited, out coffer.Amount
	for _, l := range lines {
		if l.Fiat == "USD" {
			deposited += l.DepositedValue
			out += l.RecognisedValue + l.ExpiredValue + l.RefundedValue + l.DeferredValue
		}
	}
	if deposited != out {
		t.Errorf("USD: deposited %d, recognised + expired + refunded + deferred %d: the value went out of the report:\n%s",
			deposited, out, e.revenue(from, time.Now().Add(time.Minute)))
	}
}

// TestRevenueOfARefundedOrderOfTwoFiats: a bundle whose two paid grants
// of one order name two fiats (10 silver for 500 US cents, 10 for 400
// euro cents) is refused, invalid_argument, and nothing is written.
// Accepted, its refund would add both grants' values into one shortfall
// (900) and the report would file it under one of the fiats: 900
// "cents" of shortfall on a line where 500 were paid.
func TestRevenueOfARefundedOrderOfTwoFiats(t *testing.T) {
	e := newEnv(t)
	usd, eur := bought(10, "b", 500), bought(10, "b", 400)
	usd.Currency, eur.Currency = "silver", "silver"
	eur.Purchase.Fiat = "EUR"
	_, err := e.change(46, "buy", usd, eur)
	wantCode(t, err, coffer.CodeInvalid)
	_, err = e.store.Trx(ctx, scope(46, "buy"))
	wantCode(t, err, coffer.CodeNotFound)
}
