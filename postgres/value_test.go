package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/postgres"
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
	rb, _, err := e.store.Rollback(ctx, scope(21, "h1"))
	must(t, err)
	if got := values(rb); got != "USD -33, USD 33" {
		t.Fatalf("rollback: %s", got)
	}
	hold("h2", 2)
	_, _, err = e.store.Commit(ctx, scope(21, "h2"))
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

// TestMigrationKeepsTheStoreOrderOfOlderLots: V0015 gives the lots of
// purchases credited before it their store order (from their grant), and
// no value; they go on in coins, their exchanged coins keep the order,
// and they report under no fiat, reconciled.
func TestMigrationKeepsTheStoreOrderOfOlderLots(t *testing.T) {
	e := newEnvAt(t, 14, pgtest.Server(t, 0), pgtest.Server(t, 1))
	const p = 52
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	for _, sql := range []string{
		`INSERT INTO balance_N (ns, player_id, version, updated_at, pos) VALUES (1, $1, 2, $2, 5)`,
		`INSERT INTO lot_N (ns, player_id, lot_id, currency, paid, amount, reserved, expires_at, priority, created_at, trx_id)
			VALUES (1, $1, 9, 1, true, 3, 1, NULL, 0, $2, 10)`,
		`INSERT INTO trx_N (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason,
				hold_expires_at, version, pos)
			VALUES (1, $1, $2, 10, 7, 'buy', '', 'change', 'committed', '', NULL, 1, 1),
				(1, $1, $2 + interval '1 second', 11, 7, 'h', '', 'hold', 'pending', '', now() + interval '1 hour', 2, 3)`,
		`INSERT INTO op_N (trx_id, seq, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, pos, purchase)
			VALUES (10, 0, 1, $1, 1, 9, 'grant', 'change', 4, true, 4, 4, $2, 2, '{"store": "steam", "order_id": "old", "price": 100, "fiat": "USD"}'),
				(11, 0, 1, $1, 1, 9, 'consume', 'change', -1, true, 3, 3, $2 + interval '1 second', 4, NULL)`,
	} {
		e.exec(p, sql, p, t0)
	}
	migrateTo(t, e.router.Map(), -1)
	_, _, err := postgres.ClaimCredited(ctx, e.router)
	must(t, err)
	if lots := e.paidLots(p); lots != "gold 3/1 steam/old  0/0" {
		t.Fatalf("lots after V0015: %s", lots)
	}
	from := t0.Add(-time.Second)
	if got := values(e.mustChange(p, "spend", free("gold", -1))); got != "-" {
		t.Fatalf("a consume of an older lot: %s", got)
	}
	_, _, err = e.store.Rollback(ctx, scope(p, "h"))
	must(t, err)
	_, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(p, "ex"), From: "gold", To: "silver", Amount: 1})
	must(t, err)
	if lots := e.paidLots(p); lots != "gold 2/0 steam/old  0/0; silver 100/0 steam/old  0/0" {
		t.Fatalf("lots: %s", lots)
	}
	want := "gold : opening 0 deposited 4 recognised 1 converted 0/1 expired 0 refunded 0/0 deferred 2 | " +
		"value: opening 0 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 0\n" +
		"silver : opening 0 deposited 0 recognised 0 converted 100/0 expired 0 refunded 0/0 deferred 100 | " +
		"value: opening 0 deposited 0 recognised 0 converted 0/0 expired 0 refunded 0/0 deferred 0"
	if got := e.revenue(from, time.Now().Add(time.Minute)); got != want {
		t.Fatalf("revenue:\n%s\nwant\n%s", got, want)
	}
}
