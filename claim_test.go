package coffer

import (
	"slices"
	"strings"
	"testing"
)

// TestPurchaseKeyHash freezes the hash that places claims: a change would
// send requests to shards that do not hold their orders' claims. The
// values are the first 8 bytes of SHA-256 as the comment of Hash spells
// it, computed apart from Go. The store's length keeps "stea"+"m7731"
// apart from "steam"+"7731".
func TestPurchaseKeyHash(t *testing.T) {
	for _, c := range []struct {
		key  PurchaseKey
		want uint64
	}{
		{PurchaseKey{1, "steam", "7731"}, 13803101501729752724},
		{PurchaseKey{2, "steam", "7731"}, 7336356961105658726},
		{PurchaseKey{1, "apple", "1000000001"}, 5320908416735375629},
		{PurchaseKey{1, "stea", "m7731"}, 8107238433967100104},
		{PurchaseKey{7, "google", "GPA.3372-1234-5678-90123"}, 13807196617820003002},
	} {
		if got := c.key.Hash(); got != c.want {
			t.Errorf("%+v: hash %d, want %d", c.key, got, c.want)
		}
	}
}

// TestPurchases: a change's orders, each once (a bundle of several paid
// grants of one order is one), in store and order order; free grants and
// consumes have none.
func TestPurchases(t *testing.T) {
	c := requestCatalog(t)
	buy := func(cur, store, order string) OpRequest {
		return OpRequest{Currency: cur, Amount: 1, Kind: "paid", Purchase: &Purchase{Store: store, OrderID: order, Fiat: "USD"}}
	}
	v, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 3, PlayerID: 1, IdempotencyKey: "k"}, Ops: []OpRequest{
		buy("gold", "steam", "9"), {Currency: "gold", Amount: 5}, buy("silver", "apple", "2"),
		buy("silver", "steam", "9"), buy("gold", "steam", "10"), {Currency: "gold", Amount: -1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []PurchaseKey{{3, "apple", "2"}, {3, "steam", "10"}, {3, "steam", "9"}}
	if got := v.Purchases(); !slices.Equal(got, want) {
		t.Fatalf("purchases %+v, want %+v", got, want)
	}
	v, _ = c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 3, PlayerID: 1, IdempotencyKey: "k"}, Ops: []OpRequest{{Currency: "gold", Amount: 5}}})
	if got := v.Purchases(); got != nil {
		t.Fatalf("a free grant's purchases: %+v", got)
	}
}

// TestCreditOnlyByTheClaimant: the claimant's scope may credit its order;
// any other scope, even one differing only by key or emitter, is refused
// with a message that names nothing of the claimant.
func TestCreditOnlyByTheClaimant(t *testing.T) {
	k := PurchaseKey{1, "steam", "7731"}
	owner := Scope{Namespace: 1, PlayerID: 4242, Emitter: 7, IdempotencyKey: "owner-key"}
	if err := k.Credit(owner, owner); err != nil {
		t.Fatalf("the claimant: %v", err)
	}
	for _, other := range []Scope{{1, 4243, 7, "owner-key"}, {1, 4242, 8, "owner-key"}, {1, 4242, 7, "another"}} {
		err := k.Credit(other, owner)
		if ErrorCode(err) != CodePurchaseAlreadyCredited {
			t.Fatalf("%+v: %v", other, err)
		}
		if msg := err.Error(); strings.Contains(msg, "4242") || strings.Contains(msg, "owner-key") {
			t.Fatalf("the refusal names the claimant: %s", msg)
		}
	}
}

// TestStoreOrderNames: a store order's names are compared exactly, so
// what would give one order two spellings is refused, in a paid grant and
// in a refund alike: a store is a code of a–z, 0–9, _ and - ("Steam" is
// not "steam"); an order id is kept as the store issued it, case and all,
// but never with white space at either end or a control character.
func TestStoreOrderNames(t *testing.T) {
	c := requestCatalog(t)
	sc := Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "k"}
	for _, tc := range []struct {
		store, order string
		bad          string // the field refused, or "" for none
	}{
		{"steam", "7731", ""},
		{"google_play", "GPA.3372-1234-5678-90123", ""},
		{"epic-games", "pi_3MtwBwLkdIwHu7ix28a3tqPa", ""},
		{"a0", "ordre n° 7 — é", ""},
		{strings.Repeat("s", 64), strings.Repeat("o", 128), ""},
		{"", "7731", "store"},
		{"Steam", "7731", "store"},
		{"STEAM", "7731", "store"},
		{"st eam", "7731", "store"},
		{"steam.com", "7731", "store"},
		{"stéam", "7731", "store"},
		{"steam\x00", "7731", "store"},
		{strings.Repeat("s", 65), "7731", "store"},
		{"steam", "", "order_id"},
		{"steam", " 7731", "order_id"},
		{"steam", "7731\n", "order_id"},
		{"steam", "7731\u00a0", "order_id"},
		{"steam", "77\t31", "order_id"},
		{"steam", "77\x0031", "order_id"},
		{"steam", "77\u008531", "order_id"},
		{"steam", "7731\xff", "order_id"},
		{"steam", strings.Repeat("o", 129), "order_id"},
	} {
		_, grant := c.ValidateChange(ChangeRequest{Scope: sc, Ops: []OpRequest{{Currency: "gold", Amount: 1, Kind: "paid",
			Purchase: &Purchase{Store: tc.store, OrderID: tc.order, Price: 1, Fiat: "USD"}}}})
		_, refund := c.ValidateRefund(RefundRequest{Scope: sc, Store: tc.store, OrderID: tc.order, Kind: RefundRefund})
		for call, err := range map[string]error{"ops[0].purchase.": grant, "": refund} {
			switch {
			case tc.bad == "" && err != nil:
				t.Errorf("%q %q: %v", tc.store, tc.order, err)
			case tc.bad != "" && (ErrorCode(err) != CodeInvalid || !strings.Contains(err.Error(), ": "+call+tc.bad+": ")):
				t.Errorf("%q %q: error %v, want invalid_argument on %s%s", tc.store, tc.order, err, call, tc.bad)
			}
		}
	}
}
