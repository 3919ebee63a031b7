package coffer

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkPlanHeavyBatch plans what one legal batch call may ask of one
// player (issue 38): 1 000 changes of 64 one-coin spends each, on a player
// holding 1 000 lots of the currency. Its cost should follow the work.
//
//	go test -run '^$' -bench PlanHeavyBatch -benchtime 1x .
func BenchmarkPlanHeavyBatch(b *testing.B) {
	c := mustCatalog(b, Currency{ID: 1, Code: "gold", Paid: true})
	var ops []OpRequest
	for range OpsMax {
		ops = append(ops, OpRequest{Currency: "gold", Amount: -1})
	}
	var writes []ValidChange
	for i := range BatchChangesMax {
		v, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: fmt.Sprint("k", i)}, Ops: ops})
		if err != nil {
			b.Fatal(err)
		}
		writes = append(writes, v)
	}
	for b.Loop() {
		st := PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0}
		for i := range LotsMax {
			st.Lots = append(st.Lots, &BookLot{ID: int64(i + 1), Currency: 1, Amount: 1000, Priority: int32(i % 7), CreatedAt: planT0.Add(-time.Duration(i) * time.Second)})
		}
		var ids []int64
		for i := range 3 * BatchChangesMax {
			ids = append(ids, int64(10_000+i))
		}
		p, err := NewPlayer(c, st, ids)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range writes {
			if plan := w.Plan(p); plan.Err != nil {
				b.Fatal(plan.Err)
			}
		}
	}
}
