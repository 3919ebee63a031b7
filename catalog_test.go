package coffer

import (
	"testing"
	"time"
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

// TestOpsNameTheirCause: an answer's ops carry the cause stored with
// them, and a pending hold's grants, which wait for the commit, are a
// change's.
func TestOpsNameTheirCause(t *testing.T) {
	c, err := NewCatalog([]Currency{{ID: 1, Code: "gold", Paid: true}}, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ops := c.Ops([]BookOp{{Currency: 1, Kind: OpGrant, Cause: CauseRelease, Amount: 5}, {Currency: 1, Kind: OpConsume, Cause: CauseRefundHeld, Amount: -5}})
	pending := c.PendingOps(StatusPending, []PendingGrant{{Currency: 1, Amount: 5}})
	if len(ops) != 2 || ops[0].Cause != CauseRelease || ops[1].Cause != CauseRefundHeld || len(pending) != 1 || pending[0].Cause != CauseChange {
		t.Fatalf("ops %+v, pending %+v", ops, pending)
	}
}
