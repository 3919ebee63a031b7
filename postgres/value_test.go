package postgres_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
)

// bought is a paid grant of order in gold that cost price US cents.
func bought(amount coffer.Amount, order string, price int64) coffer.OpRequest {
	return coffer.OpRequest{Currency: "gold", Amount: amount, Kind: "paid",
		Purchase: &coffer.Purchase{Store: "steam", OrderID: order, Price: price, Fiat: "USD"}}
}

// values are the values of a trx's ops, "-" for an op without one.
func values(trx coffer.Trx) string {
	var out []string
	for _, o := range trx.Ops {
		if o.Value == nil {
			out = append(out, "-")
			continue
		}
		out = append(out, fmt.Sprintf("%s %d", o.Value.Fiat, o.Value.Amount))
	}
	return strings.Join(out, ", ")
}

// paidLots are the player's paid lots as stored: "currency amount/reserved
// store/order fiat value/value_reserved", by currency and lot id.
func (e *env) paidLots(player coffer.PlayerID) string {
	e.t.Helper()
	id := e.router.Map().ShardOf(player)
	rows, err := e.router.Shard(id).Query(ctx, fmt.Sprintf(`SELECT currency, amount, reserved, COALESCE(store, ''), COALESCE(order_id, ''),
		COALESCE(fiat, ''), value, value_reserved FROM lot_%d WHERE ns = 1 AND player_id = $1 AND paid ORDER BY currency, lot_id`, id), player)
	must(e.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var cur int32
		var amount, reserved, value, valueReserved int64
		var store, order, fiat string
		must(e.t, rows.Scan(&cur, &amount, &reserved, &store, &order, &fiat, &value, &valueReserved))
		out = append(out, fmt.Sprintf("%s %d/%d %s/%s %s %d/%d", e.catalog.CurrencyOf(coffer.CurrencyID(cur)).Code, amount, reserved,
			store, order, fiat, value, valueReserved))
	}
	must(e.t, rows.Err())
	return strings.Join(out, "; ")
}

// TestValueFollowsTheCoins: a purchase's lot is worth its price; each
// consume takes its share (1-coin consumes of 3 coins that cost 100: 33,
// 33, the last 34), stored with the op and answered by it, the same in a
// replay and in the finlog; the lot spent to 0 is worth 0.
func TestValueFollowsTheCoins(t *testing.T) {
	e := newEnv(t)
	if got := values(e.mustChange(20, "buy", bought(3, "o1", 100), free("gold", 5))); got != "USD 100, -" {
		t.Fatalf("purchase ops' values: %s", got)
	}
	e.mustChange(20, "free", free("gold", -5))
	var got []string
	var last coffer.Trx
	for i := range 3 {
		last = e.mustChange(20, fmt.Sprintf("spend-%d", i), free("gold", -1))
		got = append(got, values(last))
	}
	if strings.Join(got, "; ") != "USD -33; USD -33; USD -34" {
		t.Fatalf("1-coin consumes: %s", strings.Join(got, "; "))
	}
	again, replayed, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(20, "spend-2"), Ops: []coffer.OpRequest{free("gold", -1)}, Reason: "test"})
	if err != nil || !replayed {
		t.Fatalf("replay: %v %v", replayed, err)
	}
	sameAnswer(t, last, again)
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 20, Desc: true, Limit: 1})
	must(t, err)
	sameAnswer(t, last, page.Items[0])
	if lots := e.paidLots(20); lots != "gold 0/0 steam/o1 USD 0/0" {
		t.Fatalf("lots: %s", lots)
	}
}

// TestValueThroughHoldsAndExchanges: a hold reserves a share of the value
// that its rollback returns and its commit settles; an exchange into a
// currency that can be paid makes a paid lot per paid lot it consumed,
// with the value taken and the lot's store order (a refund follows the
// coins there); into one that cannot, the value is taken, and nothing
// paid is made.
func TestValueThroughHoldsAndExchanges(t *testing.T) {
	e := newEnv(t)
	e.mustChange(21, "buy-a", bought(3, "a", 100))
	e.mustChange(21, "buy-b", bought(4, "b", 50))
	hold := func(key string, amount coffer.Amount) coffer.Trx {
		trx, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(21, key), Hold: true, Ops: []coffer.OpRequest{free("gold", -amount)}})
		must(t, err)
		return trx
	}
	if got := values(hold("h1", 1)); got != "USD -33" {
		t.Fatalf("hold: %s", got)
	}
	if lots := e.paidLots(21); lots != "gold 2/1 steam/a USD 67/33; gold 4/0 steam/b USD 50/0" {
		t.Fatalf("lots while the hold is pending: %s", lots)
	}
	rb, _, err := e.store.Rollback(ctx, byItsClient(21, "h1"))
	must(t, err)
	if got := values(rb); got != "USD -33, USD 33" {
		t.Fatalf("rollback: %s", got)
	}
	hold("h2", 2)
	_, _, err = e.store.Commit(ctx, byItsClient(21, "h2"))
	must(t, err)
	if lots := e.paidLots(21); lots != "gold 1/0 steam/a USD 33/0; gold 4/0 steam/b USD 50/0" {
		t.Fatalf("lots after the commit: %s", lots)
	}
	ex, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(21, "ex"), From: "gold", To: "silver", Amount: 2})
	must(t, err)
	if got := values(ex); got != "USD -33, USD -12, USD 33, USD 12" {
		t.Fatalf("exchange into silver: %s", got)
	}
	if lots := e.paidLots(21); lots != "gold 0/0 steam/a USD 0/0; gold 3/0 steam/b USD 38/0; silver 100/0 steam/a USD 33/0; silver 100/0 steam/b USD 12/0" {
		t.Fatalf("lots after the exchange: %s", lots)
	}
	ex, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(21, "ex2"), From: "silver", To: "credits", Amount: 150})
	must(t, err)
	if got := values(ex); got != "USD -33, USD -6, -" {
		t.Fatalf("exchange into credits: %s", got)
	}
}

// TestAuditFindsValueDamage corrupts the value of lots and ops behind the
// store's back; the audit must report each kind of damage.
func TestAuditFindsValueDamage(t *testing.T) {
	for _, c := range []struct{ check, damage string }{
		{"negative lot", "UPDATE lot_%d SET value = -1 WHERE paid AND amount > 0"},
		{"lot differs from its ops", "UPDATE lot_%d SET value = value + 1 WHERE paid AND amount > 0"},
		{"lot value reservation differs from pending holds", "UPDATE lot_%d SET value_reserved = value_reserved + 1 WHERE reserved > 0"},
		{"lot owes a refund more than it reserves", "UPDATE lot_%d SET owed = reserved + 1 WHERE reserved > 0"},
		{"lot owes a refund more than it reserves", "UPDATE lot_%d SET owed = -1 WHERE reserved > 0"},
		{"lot value without its coins", "UPDATE lot_%d SET fiat = 'USD' WHERE NOT paid"},
		{"op value differs from its lot's fiat", "UPDATE op_%d SET fiat = 'EUR' WHERE fiat IS NOT NULL AND kind = 'consume'"},
		{"purchase value differs from its price", "UPDATE op_%d SET value = value - 1 WHERE purchase IS NOT NULL"},
		{"exchange makes value", "UPDATE op_%d SET value = value + 1 WHERE cause = 'exchange' AND kind = 'grant' AND value IS NOT NULL"},
		{"lot's exchange mark differs from its grant", "UPDATE lot_%d SET exchanged = false WHERE exchanged"},
		{"lot's exchange mark differs from its grant", "UPDATE lot_%d SET exchanged = true WHERE paid AND currency = 1"},
	} {
		t.Run(c.check, func(t *testing.T) {
			e := newEnv(t)
			e.mustChange(31, "buy", bought(3, "a", 100), free("gold", 2))
			e.mustChange(31, "spend", free("gold", -3))
			_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(31, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -1)}})
			must(t, err)
			_, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(31, "ex"), From: "gold", To: "silver", Amount: 1})
			must(t, err)
			e.auditFinds(31, c.check, c.damage)
		})
	}
}
