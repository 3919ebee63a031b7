package coffer

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func requestCatalog(tb testing.TB) *Catalog {
	tb.Helper()
	c := mustCatalog(tb, Currency{ID: 1, Code: "gold", Paid: true}, Currency{ID: 2, Code: "silver", Paid: true}, Currency{ID: 3, Code: "credits"})
	if err := c.AddRate(1, "gold", "silver", Rate{Num: 100, Den: 1}); err != nil {
		tb.Fatal(err)
	}
	return c
}

func changeSum(tb testing.TB, c *Catalog, req ChangeRequest) []byte {
	tb.Helper()
	req.Scope = Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "k"}
	v, err := c.ValidateChange(req)
	if err != nil {
		tb.Fatal(err)
	}
	return v.Hash.Sum
}

// TestEqualChangesHashEqual: requests that validate to the same request
// are one payload (a retry of either replays the other), and any
// difference in what is written is another.
func TestEqualChangesHashEqual(t *testing.T) {
	c := requestCatalog(t)
	exp := time.Date(2031, 2, 3, 4, 5, 6, 789123000, time.UTC)
	expParis := exp.Add(456 * time.Nanosecond).In(time.FixedZone("Paris", 3600))
	purchase := &Purchase{Store: "steam", OrderID: "1", Price: 499, Fiat: "USD"}
	base := ChangeRequest{Reason: "r", Meta: []byte(`{"a":2.5,"b":[1,"x"]}`),
		Ops: []OpRequest{{Currency: "gold", Amount: 5}, {Currency: "gold", Amount: 5, Kind: "paid", Purchase: purchase},
			{Currency: "credits", Amount: 3, ExpiresAt: &exp, Priority: 2}, {Currency: "silver", Amount: -1}}}
	with := func(f func(r *ChangeRequest)) ChangeRequest {
		r := base
		r.Ops = append([]OpRequest(nil), base.Ops...)
		f(&r)
		return r
	}
	sum := changeSum(t, c, base)
	for name, req := range map[string]ChangeRequest{
		`"kind": "free"`:                                with(func(r *ChangeRequest) { r.Ops[0].Kind = "free" }),
		"meta's names in another order":                 with(func(r *ChangeRequest) { r.Meta = []byte(`{"b":[1,"x"],"a":2.5}`) }),
		"2.50 for 2.5":                                  with(func(r *ChangeRequest) { r.Meta = []byte(`{"a":2.50,"b":[1.0,"x"]}`) }),
		"meta with spaces and escapes":                  with(func(r *ChangeRequest) { r.Meta = []byte(` { "a" : 25e-1 , "b" : [ 1 , "\u0078" ] } `) }),
		"the expiry in another zone, to the nanosecond": with(func(r *ChangeRequest) { r.Ops[2].ExpiresAt = &expParis }),
		"an equal purchase":                             with(func(r *ChangeRequest) { p := *purchase; r.Ops[1].Purchase = &p }),
	} {
		if got := changeSum(t, c, req); !bytes.Equal(got, sum) {
			t.Errorf("%s: another hash", name)
		}
	}
	if a, b := changeSum(t, c, ChangeRequest{Ops: base.Ops[:1], Meta: []byte(`{}`)}), changeSum(t, c, ChangeRequest{Ops: base.Ops[:1]}); !bytes.Equal(a, b) {
		t.Error("meta {} and no meta hash differently")
	}
	for name, req := range map[string]ChangeRequest{
		"an amount":    with(func(r *ChangeRequest) { r.Ops[0].Amount = 6 }),
		"a currency":   with(func(r *ChangeRequest) { r.Ops[0].Currency = "silver" }),
		"paid":         with(func(r *ChangeRequest) { r.Ops[0].Kind, r.Ops[0].Purchase = "paid", purchase }),
		"a priority":   with(func(r *ChangeRequest) { r.Ops[2].Priority = 3 }),
		"an expiry":    with(func(r *ChangeRequest) { e := exp.Add(time.Microsecond); r.Ops[2].ExpiresAt = &e }),
		"no expiry":    with(func(r *ChangeRequest) { r.Ops[2].ExpiresAt = nil }),
		"a price":      with(func(r *ChangeRequest) { p := *purchase; p.Price++; r.Ops[1].Purchase = &p }),
		"the reason":   with(func(r *ChangeRequest) { r.Reason = "s" }),
		"meta":         with(func(r *ChangeRequest) { r.Meta = []byte(`{"a":2.5,"b":[1,"y"]}`) }),
		"no meta":      with(func(r *ChangeRequest) { r.Meta = nil }),
		"a hold":       with(func(r *ChangeRequest) { r.Hold = true }),
		"the op order": with(func(r *ChangeRequest) { r.Ops[0], r.Ops[3] = r.Ops[3], r.Ops[0] }),
	} {
		if got := changeSum(t, c, req); bytes.Equal(got, sum) {
			t.Errorf("%s: the same hash", name)
		}
	}
	// A hold's life is hashed as asked: the default is not 600 s, so that
	// an unchanged retry replays after the configured default changed.
	hold := ChangeRequest{Hold: true, Ops: []OpRequest{{Currency: "gold", Amount: -1}}}
	asked := hold
	asked.HoldTTL = c.HoldTTLDefault
	if bytes.Equal(changeSum(t, c, hold), changeSum(t, c, asked)) {
		t.Error("a hold with the default life and one asking for it hash the same")
	}
	later := *c
	later.HoldTTLDefault = 20 * time.Minute
	if !bytes.Equal(changeSum(t, c, hold), changeSum(t, &later, hold)) {
		t.Error("a hold with the default life hashes differently once the default changed")
	}
}

func TestEqualExchangesHashEqual(t *testing.T) {
	c := requestCatalog(t)
	sum := func(req ExchangeRequest) []byte {
		t.Helper()
		req.Scope = Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "x"}
		v, err := c.ValidateExchange(req)
		if err != nil {
			t.Fatal(err)
		}
		return v.Hash.Sum
	}
	a := sum(ExchangeRequest{From: "gold", To: "silver", Amount: 10, Meta: []byte(`{"a":1,"b":2}`)})
	if b := sum(ExchangeRequest{From: "gold", To: "silver", Amount: 10, Meta: []byte(`{"b":2.0,"a":1}`)}); !bytes.Equal(a, b) {
		t.Error("equal exchanges hash differently")
	}
	if b := sum(ExchangeRequest{From: "gold", To: "silver", Amount: 11, Meta: []byte(`{"a":1,"b":2}`)}); bytes.Equal(a, b) {
		t.Error("exchanges of other amounts hash the same")
	}
}

// TestRequestHashIsFrozen: a trx keeps the hash it was written with; an
// unchanged retry sent after an upgrade must still find it, so the hash
// of a request never changes. The hex strings are what coffer 1.0
// computes for these requests.
func TestRequestHashIsFrozen(t *testing.T) {
	c := requestCatalog(t)
	exp := time.Date(2031, 2, 3, 4, 5, 6, 789123456, time.FixedZone("x", 3600))
	sc := Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "order-7731"}
	change, err := c.ValidateChange(ChangeRequest{Scope: sc, Reason: "purchase", Meta: []byte(`{"b": 2.50, "a": "<x>", "c": [1e2, null, true]}`),
		Ops: []OpRequest{{Currency: "gold", Amount: 500, Kind: "paid", Purchase: &Purchase{Store: "steam", OrderID: "7731", Price: 499, Fiat: "USD"}},
			{Currency: "credits", Amount: 20, Kind: "free", ExpiresAt: &exp, Priority: 3}, {Currency: "silver", Amount: -20}}})
	if err != nil {
		t.Fatal(err)
	}
	sc.IdempotencyKey = "hold-1"
	hold, err := c.ValidateChange(ChangeRequest{Scope: sc, Hold: true, Ops: []OpRequest{{Currency: "gold", Amount: -5}, {Currency: "credits", Amount: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	sc.IdempotencyKey = "ex-1"
	exchange, err := c.ValidateExchange(ExchangeRequest{Scope: sc, From: "gold", To: "silver", Amount: 10, Reason: "swap", Meta: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct {
		name   string
		hash   RequestHash
		stored string
	}{
		{"change", change.Hash, "02d54dd3c643458d6a08f789e2a5209632"},
		{"hold", hold.Hash, "02ecb9d3fab430e0d4fc2f48fa1245353c"},
		{"exchange", exchange.Hash, "0258683b0b1fd7926f62a7c94b5a385654"},
	} {
		stored, _ := hex.DecodeString(h.stored)
		if !h.hash.Same(stored) || stored[0] != hashVersion {
			t.Errorf("%s: the stored hash is not the same payload (now %x)", h.name, h.hash.Sum)
		}
		stored[len(stored)-1]++
		if h.hash.Same(stored) {
			t.Errorf("%s: another stored hash is the same payload", h.name)
		}
	}
}

// TestIdempotencyKeyCountsCharacters: the key's bound counts characters
// (DESIGN: 1–128 chars), as the trx column's check does; other texts
// count bytes (a store's length is a byte of PurchaseKey.Hash).
func TestIdempotencyKeyCountsCharacters(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{{strings.Repeat("€", 128), true}, {strings.Repeat("€", 129), false}, {strings.Repeat("k", 128), true}, {"", false}} {
		err := Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: c.key}.Validate()
		if (err == nil) != c.ok || err != nil && !strings.Contains(err.Error(), "1–128 characters") {
			t.Errorf("a key of %d characters, %d bytes: %v", utf8.RuneCountInString(c.key), len(c.key), err)
		}
	}
	c := requestCatalog(t)
	for store, ok := range map[string]bool{strings.Repeat("s", 64): true, strings.Repeat("€", 22): false} {
		op := OpRequest{Currency: "gold", Amount: 1, Kind: "paid", Purchase: &Purchase{Store: store, OrderID: "o", Price: 1, Fiat: "USD"}}
		_, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "k"}, Ops: []OpRequest{op}})
		if (err == nil) != ok {
			t.Errorf("a store of %d characters, %d bytes: %v", utf8.RuneCountInString(store), len(store), err)
		}
	}
}

// TestValidateRefusesWhatCannotBeStored: every text is UTF-8 without NUL
// and every time lies in years 0001–9999, whatever the transport.
func TestValidateRefusesWhatCannotBeStored(t *testing.T) {
	c := requestCatalog(t)
	y10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	wrapped := time.Unix(1<<62, 0)
	grant := OpRequest{Currency: "gold", Amount: 1}
	paid := func(store, order string) OpRequest {
		return OpRequest{Currency: "gold", Amount: 1, Kind: "paid", Purchase: &Purchase{Store: store, OrderID: order, Fiat: "USD"}}
	}
	sc := Scope{Namespace: 1, PlayerID: 1, Emitter: 1, IdempotencyKey: "k"}
	for name, req := range map[string]ChangeRequest{
		"a key with NUL":                    {Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "a\x00"}, Ops: []OpRequest{grant}},
		"a key of bad UTF-8":                {Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "a\xff"}, Ops: []OpRequest{grant}},
		"a long key":                        {Scope: Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: strings.Repeat("k", 129)}, Ops: []OpRequest{grant}},
		"a reason with NUL":                 {Scope: sc, Reason: "\x00", Ops: []OpRequest{grant}},
		"a store with NUL":                  {Scope: sc, Ops: []OpRequest{paid("s\x00", "o")}},
		"an order of bad UTF-8":             {Scope: sc, Ops: []OpRequest{paid("s", "o\xff")}},
		"an expiry in 10000":                {Scope: sc, Ops: []OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &y10000}}},
		"an expiry past the driver's range": {Scope: sc, Ops: []OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &wrapped}}},
	} {
		if _, err := c.ValidateChange(req); ErrorCode(err) != CodeInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.ValidateExchange(ExchangeRequest{Scope: sc, From: "gold", To: "silver", Amount: 1, Reason: "\x00"}); ErrorCode(err) != CodeInvalid {
		t.Errorf("an exchange's reason with NUL: %v", err)
	}
	last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	if _, err := c.ValidateChange(ChangeRequest{Scope: sc, Ops: []OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &last}}}); err != nil {
		t.Errorf("an expiry at the end of 9999: %v", err)
	}
}

// TestExchangeBoundNamesTheRate: an exchange that would yield too much
// names its rate as the config writes it (gold→silver "1:100"), not
// reversed.
func TestExchangeBoundNamesTheRate(t *testing.T) {
	c := requestCatalog(t)
	_, err := c.ValidateExchange(ExchangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "x"},
		From: "gold", To: "silver", Amount: OpAmountMax})
	if ErrorCode(err) != CodeInvalid || !strings.Contains(err.Error(), " at 1:100;") {
		t.Fatalf("error %v; want invalid_argument naming the rate 1:100", err)
	}
}

// TestOrderOfOneFiat: a store order is paid in one fiat. A change whose
// paid grants of one order (a bundle) name two fiats is not a purchase:
// its lots would carry two fiats for one order, and a refund of it adds
// up what the order's coins cost, in one currency, as one value
// (refundOrder), so its shortfall would add US cents to euro cents.
// Expected invalid_argument, writing nothing.
func TestOrderOfOneFiat(t *testing.T) {
	c := requestCatalog(t)
	usd := &Purchase{Store: "steam", OrderID: "b", Price: 500, Fiat: "USD"}
	eur := &Purchase{Store: "steam", OrderID: "b", Price: 400, Fiat: "EUR"}
	_, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "k"},
		Ops: []OpRequest{{Currency: "gold", Amount: 10, Kind: "paid", Purchase: usd}, {Currency: "gold", Amount: 10, Kind: "paid", Purchase: eur}}})
	if ErrorCode(err) != CodeInvalid {
		t.Fatalf("one order paid in USD and in EUR: error %v, want invalid_argument", err)
	}
}

// TestPriceBound: a purchase's price is 0–PriceMax minor units, so that
// the value sums of an order and of its refund (two grants of a bundle at
// MaxInt64 would pass int64) stay far below int64, and those of a
// revenue report until millions of purchases.
func TestPriceBound(t *testing.T) {
	c := requestCatalog(t)
	for price, want := range map[int64]Code{0: "", int64(PriceMax): "", int64(PriceMax) + 1: CodeInvalid, -1: CodeInvalid} {
		_, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: "k"},
			Ops: []OpRequest{{Currency: "gold", Amount: 1, Kind: "paid", Purchase: &Purchase{Store: "steam", OrderID: "o", Price: price, Fiat: "USD"}}}})
		if got := ErrorCode(err); got != want || (err != nil && !strings.Contains(err.Error(), "purchase.price")) {
			t.Errorf("price %d: error %v, want %q", price, err, want)
		}
	}
}
