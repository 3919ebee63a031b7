package coffer

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// keptOrder fails t unless b keeps cur's spend order, once it has one,
// as a sort of the lots with an amount would give it, and returns the
// ids in it.
func keptOrder(t *testing.T, b *Book, cur *Currency) []int64 {
	t.Helper()
	c := b.currency(cur.ID)
	var want []SpendLot
	for _, l := range c.lots {
		if l.Amount > 0 {
			want = append(want, l.spendLot())
		}
	}
	SortForSpend(want, cur.SpendOrder)
	var got, wantIDs []int64
	for _, l := range c.spend {
		got = append(got, l.ID)
	}
	for _, l := range want {
		wantIDs = append(wantIDs, l.ID)
	}
	if c.spendOrder != nil && !slices.Equal(got, wantIDs) {
		t.Fatalf("kept spend order %v, sorted %v", got, wantIDs)
	}
	return got
}

// TestBookKeepsSpendOrder: a currency's lots are sorted in spend order at
// its first consume, and kept so as lots are emptied, created, refilled
// by a rollback, expired, or as a refused write is taken back.
func TestBookKeepsSpendOrder(t *testing.T) {
	now := time.Now()
	soon, later := now.Add(time.Hour), now.Add(2*time.Hour)
	lots := func() []*BookLot {
		return []*BookLot{{ID: 1, Currency: 1, Amount: 5, Paid: true}, {ID: 2, Currency: 1, Amount: 5},
			{ID: 3, Currency: 1, Amount: 5, ExpiresAt: &later}, {ID: 4, Currency: 1, Amount: 5, ExpiresAt: &soon},
			{ID: 5, Currency: 1, Amount: 5, Priority: 1, Paid: true}}
	}
	cases := []struct {
		name string
		// steps run on a Book of lots, after a first consume.
		steps func(t *testing.T, b *Book)
		want  []int64
	}{
		{"as sorted", func(*testing.T, *Book) {}, []int64{5, 4, 3, 2, 1}},
		{"emptied lots leave", func(t *testing.T, b *Book) { mustConsume(t, b, 13) }, []int64{3, 2, 1}},
		{"a new lot takes its place", func(t *testing.T, b *Book) {
			// Paid: a lot of its own, the youngest, after lot 1.
			mustGrant(t, b, 3, true, nil, 0)
			// Free, expiring between lots 4 and 3.
			e := now.Add(90 * time.Minute)
			mustGrant(t, b, 3, false, &e, 0)
		}, []int64{5, 4, 102, 3, 2, 1, 101}},
		{"a grant that joins a lot moves nothing", func(t *testing.T, b *Book) { mustGrant(t, b, 3, false, &later, 0) }, []int64{5, 4, 3, 2, 1}},
		{"a rollback refills an emptied lot", func(t *testing.T, b *Book) {
			if _, _, err := b.Consume(gold, 9, CauseChange, true); err != nil { // lots 5 and 4
				t.Fatal(err)
			}
			if _, err := b.Release(5, 4, 0); err != nil {
				t.Fatal(err)
			}
		}, []int64{5, 3, 2, 1}},
		{"expired lots leave", func(t *testing.T, b *Book) {
			b.Now = soon
			b.Expire(nil)
		}, []int64{5, 3, 2, 1}},
		{"a refused write is taken back", func(t *testing.T, b *Book) {
			b.begin(b.Now)
			mustConsume(t, b, 10)
			mustGrant(t, b, 3, true, nil, 0)
			b.undo()
		}, []int64{5, 4, 3, 2, 1}},
		{"a kept write stays", func(t *testing.T, b *Book) {
			b.begin(b.Now)
			mustConsume(t, b, 10)
			b.keepWrite()
			b.undo()
		}, []int64{3, 2, 1}},
		{"claw back takes paid first, in spend order", func(t *testing.T, b *Book) {
			ops, taken, err := b.ClawBack(gold, 11, CauseRefund)
			if err != nil || taken != 11 || len(ops) != 3 || ops[0].LotID != 5 || ops[1].LotID != 1 || ops[2].LotID != 4 {
				t.Fatalf("claw back: %+v %d %v", ops, taken, err)
			}
		}, []int64{4, 3, 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBook(t, lots()...)
			b.Now = now
			mustConsume(t, b, 1) // of lot 5, which keeps 4
			c.steps(t, b)
			if got := keptOrder(t, b, gold); !slices.Equal(got, c.want) {
				t.Fatalf("spend order %v, want %v", got, c.want)
			}
		})
	}
}

func mustConsume(t *testing.T, b *Book, amount Amount) {
	t.Helper()
	if _, _, err := b.Consume(gold, amount, CauseChange, false); err != nil {
		t.Fatal(err)
	}
}

func mustGrant(t *testing.T, b *Book, amount Amount, paid bool, expiresAt *time.Time, priority int32) {
	t.Helper()
	if _, err := b.Grant(ValidOp{Currency: gold, Amount: amount, Paid: paid, ExpiresAt: expiresAt, Priority: priority}, CauseChange); err != nil {
		t.Fatal(err)
	}
}

// bookState is what a Book holds, to compare: its lots' values, in order,
// and each currency's sums.
func bookState(b *Book) string {
	var out []string
	for _, l := range b.Lots() {
		out = append(out, fmt.Sprintf("%+v", *l))
	}
	for id, c := range b.cur {
		out = append(out, fmt.Sprintf("%d %+v %d", id, c.bookSums, len(c.lots)))
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

// TestBookUndoTakesBackAWrite: random writes on random lots, some kept and
// some taken back. A write taken back leaves the Book as it was before
// it; the spend order is kept after every step.
func TestBookUndoTakesBackAWrite(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	for round := range 200 {
		var lots []*BookLot
		for i := range 1 + r.IntN(12) {
			l := &BookLot{ID: int64(i + 1), Currency: 1, Amount: Amount(r.IntN(6)), Paid: r.IntN(2) == 0,
				Priority: int32(r.IntN(2)), CreatedAt: now.Add(-time.Duration(r.IntN(3)) * time.Minute)}
			if r.IntN(3) == 0 {
				e := now.Add(time.Duration(r.IntN(4)) * time.Minute)
				l.ExpiresAt = &e
			}
			if l.Amount == 0 {
				l.Reserved = 1
			}
			lots = append(lots, l)
		}
		b := newBook(t, lots...)
		b.Now = now
		for write := range 20 {
			before := bookState(b)
			b.begin(b.Now.Add(time.Duration(r.IntN(2)) * time.Minute))
			for range 1 + r.IntN(4) {
				switch r.IntN(5) {
				case 0:
					_, _, _ = b.Consume(gold, Amount(1+r.IntN(8)), CauseChange, r.IntN(2) == 0)
				case 1:
					var e *time.Time
					if r.IntN(2) == 0 {
						x := now.Add(time.Duration(r.IntN(4)) * time.Minute)
						e = &x
					}
					_, _ = b.Grant(ValidOp{Currency: gold, Amount: Amount(1 + r.IntN(5)), Paid: r.IntN(2) == 0, ExpiresAt: e, Priority: int32(r.IntN(2))}, CauseChange)
				case 2:
					b.Expire(nil)
				case 3:
					l := b.lots[r.IntN(len(b.lots))]
					if l.Reserved > 0 {
						_, _ = b.Release(l.ID, 1+Amount(r.IntN(int(l.Reserved))), 0)
					}
				case 4:
					_, _, _ = b.ClawBack(gold, Amount(1+r.IntN(8)), CauseRefund)
				}
				keptOrder(t, b, gold)
			}
			if r.IntN(2) == 0 {
				b.keepWrite()
				continue
			}
			b.undo()
			keptOrder(t, b, gold)
			if after := bookState(b); after != before {
				t.Fatalf("round %d, write %d taken back:\n%s\nwas\n%s", round, write, after, before)
			}
		}
	}
}

// TestPlayerTakesBackARefusedWrite: a refused write leaves the player's
// lots as they were, whether the next write or the store reads them.
func TestPlayerTakesBackARefusedWrite(t *testing.T) {
	c := mustCatalog(t, *gold)
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 1, Amount: 5, CreatedAt: planT0.Add(-time.Hour)}})
	want := fmt.Sprintf("%+v", *p.Lots()[0])
	// A grant of a lot of its own, then a consume the balance lacks.
	refuse := changeOf(t, c, "a", false, paidOp("gold", 3), freeOp("gold", -9))
	if plan := refuse(p); ErrorCode(plan.Err) != CodeInsufficientFunds {
		t.Fatalf("refused write: %+v", plan)
	}
	if lots := p.Lots(); len(lots) != 1 || !reflect.DeepEqual(fmt.Sprintf("%+v", *lots[0]), want) {
		t.Fatalf("lots after a refused write: %+v", lots)
	}
	// The next write, not the store, is the first to meet the Book after
	// a refused write: it spends the 5 coins of lot 1, which the refused
	// grant's lot, taken back, no longer stands before.
	if plan := refuse(p); ErrorCode(plan.Err) != CodeInsufficientFunds {
		t.Fatalf("refused write again: %+v", plan)
	}
	plan := changeOf(t, c, "b", false, freeOp("gold", -5))(p)
	if plan.Err != nil || len(plan.Ops) != 1 || plan.Ops[0].LotID != 1 || plan.Ops[0].BalanceAfter != 0 {
		t.Fatalf("the write after a refused one: %s", render(c, plan))
	}
}
