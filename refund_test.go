package coffer

import (
	"fmt"
	"testing"
	"time"
)

func refundCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := NewCatalog([]Currency{{ID: 1, Code: "gold", Paid: true, RefundPolicy: RefundClawBack},
		{ID: 2, Code: "silver", Paid: true}, {ID: 3, Code: "credits"}}, 10*time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
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
					"shortfall [{gold 30}]"}}
		}},
		{"claw_back takes no more than was spent", []BookLot{paidLot(1, 1, 90), freeLot(2, 1, 50)}, order(1, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume gold -90 lot 1 = 50/0 @12\n  consume gold -10 lot 2 = 40/0 @13\n" +
					"shortfall []"}}
		}},
		{"write_off takes what is left of the purchase only", []BookLot{paidLot(1, 2, 40), freeLot(2, 2, 10)}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume silver -40 lot 1 = 10/0 @12\nshortfall [{silver 60}]"}}
		}},
		{"a lot spent to 0 gives nothing; the refund is recorded all the same", []BookLot{freeLot(2, 2, 10)}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\nshortfall [{silver 100}]"}}
		}},
		{"what pending holds reserve is not taken", []BookLot{reserved}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 100 refund committed v4 @11\n  consume silver -70 lot 1 = 0/0 @12\nshortfall [{silver 30}]"}}
		}},
		{"an expired lot's expiry is recorded first, and it gives nothing", []BookLot{expired}, order(2, 0), func(t *testing.T) []step {
			return []step{{refundOf(t, c, "r", "o", RefundRefund),
				"trx 101 expire committed v4 @11\n  expire silver -100 lot 1 = 0/0 @12\n" +
					"trx 100 refund committed v4 @13\nshortfall [{silver 100}]"}}
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
			next := int64(99)
			st := PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0, Orders: sc.orders}
			for i := range sc.lots {
				l := sc.lots[i]
				st.Lots = append(st.Lots, &l)
			}
			p, err := NewPlayer(c, st, func() int64 { next++; return next })
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range sc.steps(t) {
				if got := renderRefund(c, st.plan(p)); got != st.want {
					t.Fatalf("step %d:\n%s\nwant\n%s", i, got, st.want)
				}
			}
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
