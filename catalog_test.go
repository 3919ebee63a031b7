package coffer

import (
	"strings"
	"testing"
)

// TestParseRate: a rate reads as a config writes it, "A:B" (A coins of
// the pair's from currency make B of its to), integers > 0 with spaces
// around each allowed, and prints back so.
func TestParseRate(t *testing.T) {
	for in, want := range map[string]string{"1:100": "1:100", " 2 : 3 ": "2:3", "+1:2": "1:2", "10:1": "10:1"} {
		r, ok := ParseRate(in)
		if !ok || r.String() != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %s", in, r, ok, want)
		}
	}
	if r, _ := ParseRate("1:100"); r != (Rate{Num: 100, Den: 1}) {
		t.Errorf("1:100 is %+v, want to = from × 100", r)
	}
	for _, in := range []string{"0:1", "1:0", "-1:2", "1", "1:2:3", "a:b", "", "1/100", "99999999999999999999:1"} {
		if r, ok := ParseRate(in); ok {
			t.Errorf("ParseRate(%q) = %+v, accepted", in, r)
		}
	}
}

// TestCheckRatesRefusesLoopsThatCreateCurrency: rates under which
// exchanging round a loop gives back more than it took are refused, in
// two steps or more; a loop that gives back exactly what it took, and
// rates that loop only across namespaces, are allowed. A pair listed
// twice is refused as it is added.
func TestCheckRatesRefusesLoopsThatCreateCurrency(t *testing.T) {
	type rate struct {
		ns       Namespace
		from, to string
		rate     string
	}
	for _, c := range []struct {
		name  string
		rates []rate
		want  string // "" for allowed
	}{
		{"back at 1:1", []rate{{1, "gold", "silver", "1:100"}, {1, "silver", "gold", "1:1"}}, "exchanges gold→silver→gold in namespace 1 give back 100.000 times what they took: the rates would let players create currency"},
		{"back exactly", []rate{{1, "gold", "silver", "1:100"}, {1, "silver", "gold", "100:1"}}, ""},
		{"back at a loss", []rate{{1, "gold", "silver", "1:100"}, {1, "silver", "gold", "101:1"}}, ""},
		{"three steps", []rate{{1, "gold", "silver", "1:100"}, {1, "silver", "credits", "10:1"}, {1, "credits", "gold", "1:1"}}, "exchanges gold→silver→credits→gold in namespace 1 give back 10.000 times"},
		{"three steps at a loss", []rate{{1, "gold", "silver", "1:100"}, {1, "silver", "credits", "10:1"}, {1, "credits", "gold", "10:1"}}, ""},
		{"a gaining loop beside a losing one", []rate{{1, "gold", "silver", "1:3"}, {1, "silver", "gold", "4:1"}, {1, "silver", "credits", "1:2"}, {1, "credits", "silver", "1:1"}}, "exchanges silver→credits→silver in namespace 1 give back 2.000 times"},
		{"a chain into a gaining loop", []rate{{1, "gold", "credits", "1:1"}, {1, "credits", "silver", "1:3"}, {1, "silver", "credits", "1:1"}}, "exchanges silver→credits→silver in namespace 1 give back 3.000 times"},
		{"loop across namespaces", []rate{{1, "gold", "silver", "1:100"}, {2, "silver", "gold", "1:1"}}, ""},
		{"every currency round at 1:1", []rate{{1, "gold", "silver", "1:1"}, {1, "silver", "credits", "1:1"}, {1, "credits", "gold", "1:1"}}, ""},
	} {
		cat := mustCatalog(t, Currency{ID: 1, Code: "gold"}, Currency{ID: 2, Code: "silver"}, Currency{ID: 3, Code: "credits"})
		for _, r := range c.rates {
			rt, _ := ParseRate(r.rate)
			if err := cat.AddRate(r.ns, r.from, r.to, rt); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		err := cat.CheckRates()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	cat := mustCatalog(t, Currency{ID: 1, Code: "gold"}, Currency{ID: 2, Code: "silver"})
	if err := cat.AddRate(1, "gold", "silver", Rate{Num: 2, Den: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cat.AddRate(1, "gold", "silver", Rate{Num: 3, Den: 1}); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("a pair listed twice: %v", err)
	}
}

// TestOpsNameTheirCause: an answer's ops carry the cause stored with
// them, and a pending hold's grants, which wait for the commit, are a
// change's.
func TestOpsNameTheirCause(t *testing.T) {
	c := mustCatalog(t, Currency{ID: 1, Code: "gold", Paid: true})
	ops := c.Ops([]BookOp{{Currency: 1, Kind: OpGrant, Cause: CauseRelease, Amount: 5}, {Currency: 1, Kind: OpConsume, Cause: CauseRefundHeld, Amount: -5}})
	pending := c.PendingOps(StatusPending, []PendingGrant{{Currency: 1, Amount: 5}})
	if len(ops) != 2 || ops[0].Cause != CauseRelease || ops[1].Cause != CauseRefundHeld || len(pending) != 1 || pending[0].Cause != CauseChange {
		t.Fatalf("ops %+v, pending %+v", ops, pending)
	}
}
