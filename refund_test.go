package coffer

import (
	"fmt"
	"testing"
	"time"
)

func refundCatalog(t *testing.T) *Catalog {
	t.Helper()
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true, RefundPolicy: RefundClawBack},
		Currency{ID: 2, Code: "silver", Paid: true}, Currency{ID: 3, Code: "credits"})
	return c
}

func refundOf(t *testing.T, c *Catalog, key, order string, kind RefundKind) func(*Player) Plan {
	t.Helper()
	v, err := c.ValidateRefund(RefundRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: key},
		Store: "steam", OrderID: order, Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	return func(p *Player) Plan { return p.Refund(v) }
}

// renderRefund is render, and after a new refund its shortfall.
func renderRefund(c *Catalog, p Plan) string {
	out := render(c, p)
	if p.Err == nil && !p.Replay && p.Trx.Refund != nil {
		out += fmt.Sprintf("\nshortfall %v", p.Trx.Refund.Shortfall)
	}
	return out
}

// TestPlanRefund: the rules of a refund, each a scenario on a player
// whose order "o" has its lot 1 (share 100).
func TestPlanRefund(t *testing.T) {
	c := refundCatalog(t)
	order := func(lotCurrency CurrencyID, refundedBy int64) []*OrderState {
		return []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"},
			Lots: []OrderLot{{LotID: 1, Currency: lotCurrency, Share: 100}}, RefundedBy: refundedBy}}
	}
	paidLot := func(id int64, cur CurrencyID, amount Amount) BookLot {
		return BookLot{ID: id, Currency: cur, Paid: true, Amount: amount, CreatedAt: planT0.Add(-time.Duration(10-id) * time.Hour)}
	}
	freeLot := func(id int64, cur CurrencyID, amount Amount) BookLot {
		return BookLot{ID: id, Currency: cur, Amount: amount, CreatedAt: planT0.Add(-time.Duration(10-id) * time.Hour)}
	}
	expired := paidLot(1, 2, 100)
	expired.ExpiresAt = at(-time.Minute)
	reserved := paidLot(1, 2, 70)
	reserved.Reserved = 30
	for _, sc := range []struct {
		name   string
		lots   []BookLot
		orders []*OrderState
		steps  func(t *testing.T) []step
	}{
		{"an unspent purchase comes back whole from its own lot", []BookLot{paidLot(1, 1, 100), freeLot(2, 1, 20)}, order(1, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume gold -100 lot 1 = 20/0 @12\nshortfall []"}}
		}},
		{"claw_back takes the spent part from the other lots, paid first, as far as they go", []BookLot{
			paidLot(1, 1, 40), freeLot(2, 1, 10), paidLot(3, 1, 20)}, order(1, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundChargeback),
				"trx 100 refund committed v4 @11\n  consume gold -40 lot 1 = 30/20 @12\n  consume gold -20 lot 3 = 10/0 @13\n  consume gold -10 lot 2 = 0/0 @14\n" +
					"shortfall [{gold 30 0}]"}}
		}},
		{"claw_back takes no more than was spent", []BookLot{paidLot(1, 1, 90), freeLot(2, 1, 50)}, order(1, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume gold -90 lot 1 = 50/0 @12\n  consume gold -10 lot 2 = 40/0 @13\n" +
					"shortfall []"}}
		}},
		{"write_off takes what is left of the purchase only", []BookLot{paidLot(1, 2, 40), freeLot(2, 2, 10)}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume silver -40 lot 1 = 10/0 @12\nshortfall [{silver 60 0}]"}}
		}},
		{"a lot spent to 0 gives nothing; the refund is recorded all the same", []BookLot{freeLot(2, 2, 10)}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\nshortfall [{silver 100 0}]"}}
		}},
		{"what pending holds reserve is not taken", []BookLot{reserved}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume silver -70 lot 1 = 0/0 @12\nshortfall [{silver 30 0}]"}}
		}},
		{"an expired lot's expiry is recorded first, and it gives nothing", []BookLot{expired}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 101 expire committed v4 @11\n  expire silver -100 lot 1 = 0/0 @12\n" +
					"trx 100 refund committed v4 @13\nshortfall [{silver 100 0}]"}}
		}},
		{"an order not credited to the player is not_found, one refunded already_refunded", []BookLot{paidLot(1, 1, 100)}, order(1, 77), func(t *testing.T) []step {
			return []step{
				{refundOf(t, c, "r", "other", RefundRefund), "error not_found"},
				{refundOf(t, c, "r", "o", RefundRefund), "error already_refunded"},
			}
		}},
		{"a second refund of the order: the same key replays, another is already_refunded", []BookLot{paidLot(1, 1, 100)}, order(1, 0), func(t *testing.T) []step {
			return []step{
				{refundOf(t, c, "r", "o", RefundRefund), "trx 100 refund committed v4 @11\n  consume gold -100 lot 1 = 0/0 @12\nshortfall []"},
				{refundOf(t, c, "r", "o", RefundRefund), "replay 100"},
				{refundOf(t, c, "r", "o", RefundChargeback), "error idempotency_conflict"},
				{refundOf(t, c, "r2", "o", RefundRefund), "error already_refunded"},
			}
		}},
		{"a refund after the credit in one batch finds it, as it would alone", nil, []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"}}}, func(t *testing.T) []step {
			return []step{
				{refundOf(t, c, "r0", "o", RefundRefund), "error not_found"},
				{changeOf(t, c, "buy", false, paidOp("gold", 30)), "trx 100 change committed v4 @11\n  grant gold 30 lot 101 = 30/30 @12 USD 1"},
				{refundOf(t, c, "r", "o", RefundRefund), "trx 102 refund committed v5 @13\n  consume gold -30 lot 101 = 0/0 @14 USD -1\nshortfall []"},
			}
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			p := testBuyer(t, c, sc.lots, sc.orders)
			for i, st := range sc.steps(t) {
				if got := renderRefund(c, st.plan(p)); got != st.want {
					t.Fatalf("step %d:\n%s\nwant\n%s", i, got, st.want)
				}
			}
		})
	}
}

// TestPlanRefundDuringHold: coins a pending hold reserves from the
// order's lot are short at the refund, as if spent (write_off writes them
// off, claw_back takes them from the other lots). Should the hold roll
// back, what of them the refund counted short goes to the refund, not
// back to the player; should it commit, they are spent and the shortfall
// stands. The player ends with what it held besides the order, as had
// the hold never been.
func TestPlanRefundDuringHold(t *testing.T) {
	c := refundCatalog(t)
	for _, r := range [][2]string{{"silver", "gold"}, {"gold", "silver"}} {
		if err := c.AddRate(1, r[0], r[1], Rate{Num: 2, Den: 1}); err != nil {
			t.Fatal(err)
		}
	}
	buy := func(cur string) OpRequest {
		return OpRequest{Currency: cur, Amount: 100, Kind: "paid", Purchase: &Purchase{Store: "steam", OrderID: "o", Price: 500, Fiat: "USD"}}
	}
	begin := func(cur string) []step {
		return []step{
			{changeOf(t, c, "buy", false, buy(cur)), fmt.Sprintf("trx 100 change committed v4 @11\n  grant %s 100 lot 101 = 100/100 @12 USD 500", cur)},
			{changeOf(t, c, "h", true, freeOp(cur, -30)), fmt.Sprintf("trx 102 hold pending v5 @13\n  consume %s -30 lot 101 = 70/70 @14 USD -150", cur)},
		}
	}
	rollback := func(p *Player) Plan { return p.Rollback(key("h"), 7) }
	commit := func(p *Player) Plan { return p.Commit(key("h"), 7) }
	for _, sc := range []struct {
		name  string
		lots  []BookLot
		steps []step
		// owed is what the lots owe the refund after it; end what the
		// player holds once the hold is finished.
		owed, end Amount
	}{
		{"write_off, rolled back: the 30 go to the refund", nil, append(begin("silver"),
			step{refundOf(t, c, "r", "o", RefundChargeback), "trx 103 refund committed v6 @15\n  consume silver -70 lot 101 = 0/0 @16 USD -350\nshortfall [{silver 30 150}]"},
			step{rollback, "finish 102 rolled_back v7 (begin v5) by 7\n  grant silver 30 lot 101 = 30/30 @17 USD 150\n  consume silver -30 lot 101 = 0/0 @18 USD -150 (refund_held)"}), 30, 0},
		{"write_off, committed: the 30 are spent, the shortfall stands", nil, append(begin("silver"),
			step{refundOf(t, c, "r", "o", RefundChargeback), "trx 103 refund committed v6 @15\n  consume silver -70 lot 101 = 0/0 @16 USD -350\nshortfall [{silver 30 150}]"},
			step{commit, "finish 102 committed v7 (begin v5) by 7"}), 30, 0},
		{"claw_back, rolled back: what the other lots covered returns to the player", []BookLot{{ID: 1, Currency: 1, Amount: 20, CreatedAt: planT0.Add(-time.Hour)}}, []step{
			{changeOf(t, c, "buy", false, buy("gold")), "trx 100 change committed v4 @11\n  grant gold 100 lot 101 = 120/100 @12 USD 500"},
			{changeOf(t, c, "h", true, freeOp("gold", -50)), "trx 102 hold pending v5 @13\n  consume gold -20 lot 1 = 100/100 @14\n  consume gold -30 lot 101 = 70/70 @15 USD -150"},
			{changeOf(t, c, "reward", false, freeOp("gold", 10)), "trx 103 change committed v6 @16\n  grant gold 10 lot 1 = 80/70 @17"},
			{refundOf(t, c, "r", "o", RefundChargeback),
				"trx 104 refund committed v7 @18\n  consume gold -70 lot 101 = 10/0 @19 USD -350\n  consume gold -10 lot 1 = 0/0 @20\nshortfall [{gold 20 100}]"},
			{rollback, "finish 102 rolled_back v8 (begin v5) by 7\n  grant gold 20 lot 1 = 20/0 @21\n  grant gold 30 lot 101 = 50/30 @22 USD 150\n" +
				"  consume gold -20 lot 101 = 30/10 @23 USD -100 (refund_held)"},
		}, 20, 30},
		{"write_off, exchanged then held, rolled back: the exchanged coins go to the refund", nil, []step{
			{changeOf(t, c, "buy", false, buy("silver")), "trx 100 change committed v4 @11\n  grant silver 100 lot 101 = 100/100 @12 USD 500"},
			{exchangeOf(t, c, "x", "silver", "gold", 40), "trx 102 exchange committed v5 @13\n  consume silver -40 lot 101 = 60/60 @14 USD -200 (exchange)\n  grant gold 80 lot 103 = 80/80 @15 USD 200 (exchange)"},
			{changeOf(t, c, "h", true, freeOp("gold", -50)), "trx 104 hold pending v6 @16\n  consume gold -50 lot 103 = 30/30 @17 USD -125"},
			{refundOf(t, c, "r", "o", RefundChargeback), "trx 105 refund committed v7 @18\n  consume silver -60 lot 101 = 0/0 @19 USD -300\n  consume gold -30 lot 103 = 0/0 @20 USD -75\nshortfall [{silver 25 125}]"},
			{rollback, "finish 104 rolled_back v8 (begin v6) by 7\n  grant gold 50 lot 103 = 50/50 @21 USD 125\n  consume gold -50 lot 103 = 0/0 @22 USD -125 (refund_held)"},
		}, 50, 0},
		{"claw_back, exchanged then held, rolled back: the refund gets what the other lots did not cover, in the exchange's currency", nil, []step{
			{changeOf(t, c, "buy", false, buy("gold")), "trx 100 change committed v4 @11\n  grant gold 100 lot 101 = 100/100 @12 USD 500"},
			{exchangeOf(t, c, "x", "gold", "silver", 40), "trx 102 exchange committed v5 @13\n  consume gold -40 lot 101 = 60/60 @14 USD -200 (exchange)\n  grant silver 80 lot 103 = 80/80 @15 USD 200 (exchange)"},
			{changeOf(t, c, "h", true, freeOp("silver", -80)), "trx 104 hold pending v6 @16\n  consume silver -80 lot 103 = 0/0 @17 USD -200"},
			{changeOf(t, c, "reward", false, freeOp("gold", 10)), "trx 105 change committed v7 @18\n  grant gold 10 lot 106 = 70/60 @19"},
			{refundOf(t, c, "r", "o", RefundChargeback), "trx 107 refund committed v8 @20\n  consume gold -60 lot 101 = 10/0 @21 USD -300\n  consume gold -10 lot 106 = 0/0 @22\nshortfall [{gold 30 150}]"},
			{rollback, "finish 104 rolled_back v9 (begin v6) by 7\n  grant silver 80 lot 103 = 80/80 @23 USD 200\n  consume silver -60 lot 103 = 20/20 @24 USD -150 (refund_held)"},
		}, 60, 20},
		{"claw_back, the order's lot and an exchanged one held: the shortfall is owed once, the order's lot first", nil, []step{
			{changeOf(t, c, "buy", false, buy("gold")), "trx 100 change committed v4 @11\n  grant gold 100 lot 101 = 100/100 @12 USD 500"},
			{exchangeOf(t, c, "x", "gold", "silver", 40), "trx 102 exchange committed v5 @13\n  consume gold -40 lot 101 = 60/60 @14 USD -200 (exchange)\n  grant silver 80 lot 103 = 80/80 @15 USD 200 (exchange)"},
			{changeOf(t, c, "h", true, freeOp("gold", -30), freeOp("silver", -50)), "trx 104 hold pending v6 @16\n  consume gold -30 lot 101 = 30/30 @17 USD -150\n  consume silver -50 lot 103 = 30/30 @18 USD -125"},
			{changeOf(t, c, "reward", false, freeOp("gold", 20)), "trx 105 change committed v7 @19\n  grant gold 20 lot 106 = 50/30 @20"},
			{refundOf(t, c, "r", "o", RefundChargeback), "trx 107 refund committed v8 @21\n  consume gold -30 lot 101 = 20/0 @22 USD -150\n  consume silver -30 lot 103 = 0/0 @23 USD -75\n  consume gold -20 lot 106 = 0/0 @24\nshortfall [{gold 35 175}]"},
			{rollback, "finish 104 rolled_back v9 (begin v6) by 7\n  grant gold 30 lot 101 = 30/30 @25 USD 150\n  consume gold -30 lot 101 = 0/0 @26 USD -150 (refund_held)\n  grant silver 50 lot 103 = 50/50 @27 USD 125\n  consume silver -10 lot 103 = 40/40 @28 USD -25 (refund_held)"},
		}, 40, 40},
	} {
		t.Run(sc.name, func(t *testing.T) { runHeld(t, c, sc.lots, sc.steps, sc.owed, sc.end) })
	}
}

// runHeld runs steps on a player holding lots, whose next to last step
// is a refund of order "o" and last a hold's finish: the lots owe owed
// after the refund, and the player ends with end coins, none reserved.
func runHeld(t *testing.T, c *Catalog, lots []BookLot, steps []step, owed, end Amount) {
	t.Helper()
	p := testBuyer(t, c, lots, []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"}}})
	for i, st := range steps {
		plan := st.plan(p)
		if i == len(steps)-2 {
			var got Amount
			for _, l := range p.Lots() {
				got += l.Owed
			}
			if got != owed {
				t.Errorf("owed %d after the refund, want %d", got, owed)
			}
		}
		if got := renderRefund(c, plan); got != st.want {
			t.Fatalf("step %d:\n%s\nwant\n%s", i, got, st.want)
		}
	}
	var held Amount
	for _, l := range p.Lots() {
		if l.Reserved != 0 || l.Owed != 0 {
			t.Fatalf("lot %d after the hold: %+v", l.ID, *l)
		}
		held += l.Amount
	}
	if held != end {
		t.Fatalf("the player holds %d after the hold, want %d", held, end)
	}
}

// TestRefundOwesNoMoreThanItCountedShort: coins of a lot an exchange made
// are owed only as far as their worth in the order's currency, rounded
// up, fits in the shortfall: a refund never takes back more than it
// counted short. Gold is claw_back.
func TestRefundOwesNoMoreThanItCountedShort(t *testing.T) {
	buy := OpRequest{Currency: "gold", Amount: 100, Kind: "paid", Purchase: &Purchase{Store: "steam", OrderID: "o", Price: 500, Fiat: "USD"}}
	rollback := func(p *Player) Plan { return p.Rollback(key("h"), 7) }
	for _, sc := range []struct {
		name        string
		rate        Rate
		exchange    Amount
		hold, claim Amount
		steps       []string
		owed, end   Amount
	}{
		// 100 gold make 1 silver; claw_back covers 40 of the 100 short: the
		// silver, worth 100, does not fit in the 60 left.
		{"a coin worth more than the shortfall", Rate{Num: 1, Den: 100}, 100, -1, 40, []string{
			"trx 100 change committed v4 @11\n  grant gold 100 lot 101 = 100/100 @12 USD 500",
			"trx 102 exchange committed v5 @13\n  consume gold -100 lot 101 = 0/0 @14 USD -500 (exchange)\n  grant silver 1 lot 103 = 1/1 @15 USD 500 (exchange)",
			"trx 104 hold pending v6 @16\n  consume silver -1 lot 103 = 0/0 @17 USD -500",
			"trx 105 change committed v7 @18\n  grant gold 40 lot 106 = 40/0 @19",
			"trx 107 refund committed v8 @20\n  consume gold -40 lot 106 = 0/0 @21\nshortfall [{gold 60 300}]",
			"finish 104 rolled_back v9 (begin v6) by 7\n  grant silver 1 lot 103 = 1/1 @22 USD 500",
		}, 0, 1},
		// 1 gold made 1000 silver, 500 of them taken back count for none
		// (a half rounds down), so 1 gold is short, and claw_back covers it:
		// nothing is left to owe.
		{"no shortfall left", Rate{Num: 1000, Den: 1}, 1, -500, 1, []string{
			"trx 100 change committed v4 @11\n  grant gold 100 lot 101 = 100/100 @12 USD 500",
			"trx 102 exchange committed v5 @13\n  consume gold -1 lot 101 = 99/99 @14 USD -5 (exchange)\n  grant silver 1000 lot 103 = 1000/1000 @15 USD 5 (exchange)",
			"trx 104 hold pending v6 @16\n  consume silver -500 lot 103 = 500/500 @17 USD -2",
			"trx 105 change committed v7 @18\n  grant gold 1 lot 106 = 100/99 @19",
			"trx 107 refund committed v8 @20\n  consume gold -99 lot 101 = 1/0 @21 USD -495\n  consume silver -500 lot 103 = 0/0 @22 USD -3\n  consume gold -1 lot 106 = 0/0 @23\nshortfall []",
			"finish 104 rolled_back v9 (begin v6) by 7\n  grant silver 500 lot 103 = 500/500 @24 USD 2",
		}, 0, 500},
	} {
		t.Run(sc.name, func(t *testing.T) {
			c := refundCatalog(t)
			if err := c.AddRate(1, "gold", "silver", sc.rate); err != nil {
				t.Fatal(err)
			}
			plans := []func(*Player) Plan{changeOf(t, c, "buy", false, buy), exchangeOf(t, c, "x", "gold", "silver", sc.exchange),
				changeOf(t, c, "h", true, freeOp("silver", sc.hold)), changeOf(t, c, "reward", false, freeOp("gold", sc.claim)),
				refundOf(t, c, "r", "o", RefundChargeback), rollback}
			steps := make([]step, len(plans))
			for i := range plans {
				steps[i] = step{plans[i], sc.steps[i]}
			}
			runHeld(t, c, nil, steps, sc.owed, sc.end)
		})
	}
}

// TestValidateRefund: bad input is invalid_argument; the hash tells the
// payloads apart.
func TestValidateRefund(t *testing.T) {
	c := refundCatalog(t)
	ok := RefundRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "k"}, Store: "steam", OrderID: "o", Kind: RefundRefund}
	for name, mutate := range map[string]func(*RefundRequest){
		"kind": func(r *RefundRequest) { r.Kind = "REFUND" }, "store": func(r *RefundRequest) { r.Store = "" },
		"long store": func(r *RefundRequest) { r.Store = string(make([]byte, 65)) }, "order": func(r *RefundRequest) { r.OrderID = "" },
		"reason": func(r *RefundRequest) { r.Reason = string(make([]byte, ReasonLenMax+1)) }, "key": func(r *RefundRequest) { r.IdempotencyKey = "" },
	} {
		req := ok
		mutate(&req)
		if _, err := c.ValidateRefund(req); ErrorCode(err) != CodeInvalid {
			t.Fatalf("%s: %v", name, err)
		}
	}
	a, err := c.ValidateRefund(ok)
	if err != nil {
		t.Fatal(err)
	}
	other := ok
	other.Kind = RefundChargeback
	b, _ := c.ValidateRefund(other)
	if a.Hash.Same(b.Hash.Sum) || !a.Hash.Same(a.Hash.Sum) {
		t.Fatal("the hash does not tell a refund from a chargeback")
	}
}

// renderFollow is render, and after a new refund what its row records:
// per currency of the order, what the exchanged coins taken back counted
// for, and the shortfall with its value.
func renderFollow(c *Catalog, p Plan) string {
	out := render(c, p)
	for _, r := range p.Inserts {
		if r.Refund != nil {
			out += fmt.Sprintf("\nexchanged %v shortfall %v", r.Refund.Exchanged, r.Refund.Shortfall)
		}
	}
	return out
}

// TestPlanRefundFollowsExchanges: a refund takes back what is left of
// every lot carrying the order, the lots exchanges made from its own
// included, and counts the coins from each such lot in the currency it
// was made from, by the exchange's own ratio (ValueShare: to the nearest
// coin, a half down; all of it when every coin made came back). Gold
// (1) is claw_back, silver (2) write_off, credits (3) cannot be paid.
// The order "o" has lot 1; its exchanges are trx 50, 51, 52.
func TestPlanRefundFollowsExchanges(t *testing.T) {
	c := refundCatalog(t)
	order := func(cur CurrencyID, share, value Amount, xs ...ExchangeOp) []*OrderState {
		return []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"},
			Lots: []OrderLot{{LotID: 1, Currency: cur, Share: share, ShareValue: value}}, Exchanges: xs}}
	}
	// made is an exchange (trx) that consumed from lot `from` and made a
	// paid lot.
	made := func(trx, from int64, fromCur CurrencyID, consumed Amount, lot int64, cur CurrencyID, granted Amount) []ExchangeOp {
		return []ExchangeOp{{TrxID: trx, LotID: from, Currency: fromCur, Kind: OpConsume, Cause: CauseExchange, Paid: true, Amount: -consumed},
			{TrxID: trx, LotID: lot, Currency: cur, Kind: OpGrant, Cause: CauseExchange, Paid: true, Amount: granted}}
	}
	ofOrder := func(id int64, cur CurrencyID, amount, value Amount) BookLot {
		return BookLot{ID: id, Currency: cur, Paid: true, Amount: amount, CreatedAt: planT0.Add(-time.Duration(10-id) * time.Hour),
			Worth: Worth{Store: "steam", OrderID: "o", Fiat: "USD", Value: value}}
	}
	freeLot := func(id int64, cur CurrencyID, amount Amount) BookLot {
		return BookLot{ID: id, Currency: cur, Amount: amount, CreatedAt: planT0.Add(-time.Duration(10-id) * time.Hour)}
	}
	twice := append(made(50, 1, 1, 100, 2, 2, 10000),
		// 5000 silver into credits, which cannot be paid: recognised, no lot.
		ExchangeOp{TrxID: 51, LotID: 2, Currency: 2, Kind: OpConsume, Cause: CauseChange, Paid: true, Amount: -5000},
		ExchangeOp{TrxID: 51, LotID: 9, Currency: 3, Kind: OpGrant, Cause: CauseExchange, Amount: 500})
	twice = append(twice, made(52, 2, 2, 2000, 3, 1, 20)...)
	for _, sc := range []struct {
		name   string
		lots   []BookLot
		orders []*OrderState
		want   string
	}{
		{"a purchase exchanged entirely then charged back comes back from the lot the exchange made",
			[]BookLot{ofOrder(2, 2, 10000, 999), freeLot(3, 1, 20)}, order(1, 100, 999, made(50, 1, 1, 100, 2, 2, 10000)...),
			"trx 100 refund committed v4 @11\n  consume silver -10000 lot 2 = 0/0 @12 USD -999\nexchanged [{1 100 0}] shortfall []"},
		{"partly exchanged and partly spent, claw_back: the rest, in the order's currency, from the other lots",
			[]BookLot{ofOrder(1, 1, 30, 30), ofOrder(2, 2, 3000, 30), freeLot(4, 1, 50)}, order(1, 100, 100, made(50, 1, 1, 40, 2, 2, 4000)...),
			"trx 100 refund committed v4 @11\n  consume gold -30 lot 1 = 50/0 @12 USD -30\n  consume silver -3000 lot 2 = 0/0 @13 USD -30\n" +
				"  consume gold -40 lot 4 = 10/0 @14\nexchanged [{1 30 0}] shortfall []"},
		{"partly exchanged and partly spent, write_off: the rest, in the order's currency, is the shortfall",
			[]BookLot{ofOrder(1, 2, 20, 20), ofOrder(2, 1, 3, 30), freeLot(4, 2, 50)}, order(2, 100, 100, made(50, 1, 2, 50, 2, 1, 5)...),
			"trx 100 refund committed v4 @11\n  consume silver -20 lot 1 = 50/0 @12 USD -20\n  consume gold -3 lot 2 = 0/0 @13 USD -30\n" +
				"exchanged [{2 30 0}] shortfall [{2 50 50}]"},
		{"exchanged twice: followed through payable exchanges, not into credits, where the coins count as spent",
			[]BookLot{ofOrder(2, 2, 3000, 30), ofOrder(3, 1, 20, 20), freeLot(5, 1, 10), freeLot(9, 3, 500)}, order(1, 100, 100, twice...),
			"trx 100 refund committed v4 @11\n  consume silver -3000 lot 2 = 0/0 @12 USD -30\n  consume gold -20 lot 3 = 10/0 @13 USD -20\n" +
				"  consume gold -10 lot 5 = 0/0 @14\nexchanged [{1 50 0}] shortfall [{1 40 40}]"},
		{"an exchanged lot partly spent counts by the exchange's ratio, a half down",
			[]BookLot{ofOrder(2, 2, 150, 50)}, order(1, 3, 100, made(50, 1, 1, 3, 2, 2, 300)...),
			"trx 100 refund committed v4 @11\n  consume silver -150 lot 2 = 0/0 @12 USD -50\nexchanged [{1 1 0}] shortfall [{1 2 50}]"},
		{"what pending holds reserve from an exchanged lot is not taken",
			[]BookLot{func() BookLot { l := ofOrder(2, 2, 6000, 60); l.Reserved, l.ValueReserved = 4000, 40; return l }()},
			order(1, 100, 100, made(50, 1, 1, 100, 2, 2, 10000)...),
			"trx 100 refund committed v4 @11\n  consume silver -6000 lot 2 = 0/0 @12 USD -60\nexchanged [{1 60 0}] shortfall [{1 40 40}]"},
		{"an exchange of another order's lot is not followed", []BookLot{ofOrder(2, 2, 10000, 999)},
			order(1, 100, 999, made(50, 7, 1, 100, 2, 2, 10000)...),
			"trx 100 refund committed v4 @11\nexchanged [] shortfall [{1 100 999}]"},
		{"an exchange whose paid consumes and grants do not pair is a damaged ledger", []BookLot{ofOrder(2, 2, 10000, 999)},
			order(1, 100, 999, made(50, 1, 1, 100, 2, 2, 10000)[:1]...), "error internal"},
	} {
		t.Run(sc.name, func(t *testing.T) {
			p := testBuyer(t, c, sc.lots, sc.orders)
			if got := renderFollow(c, refundOf(t, c, "r", "o", RefundChargeback)(p)); got != sc.want {
				t.Fatalf("\n%s\nwant\n%s", got, sc.want)
			}
		})
	}
}

// TestPlanRefundFollowsAnExchangeOfTheSameBatch: an exchange planned
// before the refund, in one batch, is followed as a stored one.
func TestPlanRefundFollowsAnExchangeOfTheSameBatch(t *testing.T) {
	c := refundCatalog(t)
	if err := c.AddRate(1, "gold", "silver", Rate{Num: 100, Den: 1}); err != nil {
		t.Fatal(err)
	}
	lot := BookLot{ID: 1, Currency: 1, Paid: true, Amount: 10, CreatedAt: planT0.Add(-time.Hour), Worth: Worth{Store: "steam", OrderID: "o", Fiat: "USD", Value: 500}}
	p := testBuyer(t, c, []BookLot{lot},
		[]*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"}, Lots: []OrderLot{{LotID: 1, Currency: 1, Share: 10, ShareValue: 500}}}})
	runSteps(t, c, p, []step{{exchangeOf(t, c, "x", "gold", "silver", 4),
		"trx 100 exchange committed v4 @11\n  consume gold -4 lot 1 = 6/6 @12 USD -200 (exchange)\n  grant silver 400 lot 101 = 400/400 @13 USD 200 (exchange)"}})
	want := "trx 102 refund committed v5 @14\n  consume gold -6 lot 1 = 0/0 @15 USD -300\n  consume silver -400 lot 101 = 0/0 @16 USD -200\n" +
		"exchanged [{1 4 0}] shortfall []"
	if got := renderFollow(c, refundOf(t, c, "r", "o", RefundRefund)(p)); got != want {
		t.Fatalf("\n%s\nwant\n%s", got, want)
	}
}

// TestPlanRefundAfterAnExchangeWhosePaidPartRoundsToNothing: a refund
// planned after an exchange in one batch follows the exchange's ops as if
// stored (Player.exchanged). An exchange whose whole paid part rounds to
// no coin (1 paid silver of 100 at silver→gold 100:1) makes no paid
// lot, so its paid consume is revenue, of cause change
// (Player.Exchange). Were it left of cause exchange, exchangeMade would
// find 1 paid consume and 0 grants, and the refund of another order
// would fail as a damaged ledger (internal) in the batch, where alone it
// goes through.
func TestPlanRefundAfterAnExchangeWhosePaidPartRoundsToNothing(t *testing.T) {
	c := refundCatalog(t)
	if err := c.AddRate(1, "silver", "gold", Rate{Num: 1, Den: 100}); err != nil {
		t.Fatal(err)
	}
	order := BookLot{ID: 1, Currency: 1, Paid: true, Amount: 10, CreatedAt: planT0.Add(-2 * time.Hour),
		Worth: Worth{Store: "steam", OrderID: "o", Fiat: "USD", Value: 500}}
	silver := []BookLot{{ID: 2, Currency: 2, Amount: 99, CreatedAt: planT0.Add(-time.Hour)}, purchased(3, 2, 1, 10, "other")}
	p := testBuyer(t, c, []BookLot{order, silver[0], silver[1]},
		[]*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"}, Lots: []OrderLot{{LotID: 1, Currency: 1, Share: 10, ShareValue: 500}}}})
	if plan := exchangeOf(t, c, "x", "silver", "gold", 100)(p); plan.Err != nil {
		t.Fatal(plan.Err)
	}
	if plan := refundOf(t, c, "r", "o", RefundRefund)(p); plan.Err != nil {
		t.Fatalf("refund of order o after the exchange, in one batch: %v", plan.Err)
	}
}

// TestRefundOfAnOrderSplitIntoManyLots: a player may hold LotsMax lots
// per currency, and each exchange of paid coins into a currency that can
// be paid makes a lot carrying the order. A player who exchanges a
// purchase a coin at a time into two payable currencies (1000 silver
// lots and 1000 gem lots, each within LotsMax) holds the order's coins in
// 2001 lots, and a refund takes one op per lot, past TrxOpsMax. The
// refund is still one trx that takes everything back: were it refused
// too_many_lots, no retry would change that while the player kept the
// lots, and a chargeback would be something a player could prevent. With
// claw_back, the player's other lots of the order's currency add up to
// LotsMax more.
func TestRefundOfAnOrderSplitIntoManyLots(t *testing.T) {
	for _, policy := range []RefundPolicy{RefundWriteOff, RefundClawBack} {
		t.Run(string(policy), func(t *testing.T) {
			c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true, RefundPolicy: policy},
				Currency{ID: 2, Code: "silver", Paid: true}, Currency{ID: 4, Code: "gems", Paid: true})
			// The order gave 1 + 2·LotsMax + spent gold: 1 is left in its
			// lot, 2·LotsMax went into exchanges, spent is gone.
			const spent = 5000
			own := BookLot{ID: 1, Currency: 1, Paid: true, Amount: 1, CreatedAt: planT0.Add(-3 * time.Hour),
				Worth: Worth{Store: "steam", OrderID: "o", Fiat: "USD", Value: 1}}
			lots := []*BookLot{&own}
			var xs []ExchangeOp
			id := int64(1000)
			for _, cur := range []CurrencyID{2, 4} {
				for range LotsMax {
					id++
					lots = append(lots, &BookLot{ID: id, Currency: cur, Paid: true, Amount: 100, CreatedAt: planT0.Add(-time.Hour),
						Worth: Worth{Store: "steam", OrderID: "o", Fiat: "USD", Value: 1}})
					xs = append(xs, ExchangeOp{TrxID: id, LotID: 1, Currency: 1, Kind: OpConsume, Cause: CauseExchange, Paid: true, Amount: -1},
						ExchangeOp{TrxID: id, LotID: id, Currency: cur, Kind: OpGrant, Cause: CauseExchange, Paid: true, Amount: 100})
				}
			}
			for range LotsMax - 1 { // other gold, for a claw back
				id++
				lots = append(lots, &BookLot{ID: id, Currency: 1, Amount: 2, Priority: int32(id), CreatedAt: planT0.Add(-time.Hour)})
			}
			next := int64(1 << 20)
			share := Amount(1 + 2*LotsMax + spent)
			p, err := NewPlayer(c, PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0, Lots: lots,
				Orders: []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"},
					Lots: []OrderLot{{LotID: 1, Currency: 1, Share: share, ShareValue: share}}, Exchanges: xs}}},
				draw(&next, 5000))
			if err != nil {
				t.Fatal(err)
			}
			plan := refundOf(t, c, "cb", "o", RefundChargeback)(p)
			if plan.Err != nil {
				t.Fatalf("chargeback of an order held in %d lots: %v", 1+2*LotsMax, plan.Err)
			}
			ops, shortfall := 1+2*LotsMax, Amount(spent)
			if policy == RefundClawBack {
				ops, shortfall = ops+LotsMax-1, spent-2*(LotsMax-1)
			}
			if len(plan.Ops) != ops {
				t.Errorf("the refund wrote %d ops, want %d (one per lot)", len(plan.Ops), ops)
			}
			got := plan.Trx.Refund.Shortfall
			if len(got) != 1 || got[0].Currency != "gold" || got[0].Amount != shortfall {
				t.Errorf("shortfall %+v, want %d gold", got, shortfall)
			}
			for _, l := range p.Lots() {
				if l.Worth.OrderID == "o" && l.Amount != 0 {
					t.Errorf("lot %d of the order still holds %d", l.ID, l.Amount)
				}
			}
		})
	}
}

// TestCoinsWorthIsTheMostThatFits: for every chain of two exchanges of
// small ratios and every worth, coinsWorth is the most coins of the last
// lot, up to all it was made with, that worthAtMost counts for no more
// than the worth.
func TestCoinsWorthIsTheMostThatFits(t *testing.T) {
	for k1 := Amount(1); k1 <= 6; k1++ {
		for m1 := Amount(1); m1 <= 6; m1++ {
			for k2 := Amount(1); k2 <= m1; k2++ {
				for m2 := Amount(1); m2 <= 6; m2++ {
					lots := []orderLot{{parent: -1}, {parent: 0, consumed: k1, granted: m1}, {parent: 1, consumed: k2, granted: m2}}
					for worth := Amount(0); worth <= 8; worth++ {
						most := Amount(-1)
						for x := Amount(0); x <= m2; x++ {
							if worthAtMost(lots, 2, x) <= worth {
								most = x
							}
						}
						if got := coinsWorth(lots, 2, worth); got != most {
							t.Fatalf("%d→%d, %d→%d, worth %d: coinsWorth %d, the most that fits %d", k1, m1, k2, m2, worth, got, most)
						}
					}
				}
			}
		}
	}
}
