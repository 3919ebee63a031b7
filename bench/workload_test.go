package bench

import (
	"math"
	"reflect"
	"testing"
)

// TestDistributions: namespaces and currencies follow Zipf(s≈1.1) over
// their ranges, players are uniform, keys are unique, and the mix is 80/20.
func TestDistributions(t *testing.T) {
	g, err := NewGenerator(Mix, 0.01, 7, 3, "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	ns := make([]int, Namespaces+1)
	cur := make([]int, Currencies+1)
	players := map[int64]int{}
	keys := map[string]bool{}
	reads := 0
	for i := 0; i < n; i++ {
		op := g.Next()
		if op.Namespace < 1 || op.Namespace > Namespaces || op.Currency < 1 || op.Currency > Currencies ||
			op.Player < 1 || op.Player > 1000 || op.Amount < 1 || op.Amount > 10000 {
			t.Fatalf("op out of range: %+v", op)
		}
		if keys[op.Key] {
			t.Fatalf("key %s twice", op.Key)
		}
		keys[op.Key] = true
		ns[op.Namespace]++
		cur[op.Currency]++
		players[op.Player]++
		if op.Call == CallRead {
			reads++
		}
	}
	// Zipf: P(k) ∝ k^-s, so count(1)/count(2) ≈ 2^1.1 ≈ 2.14 and
	// count(1)/count(10) ≈ 12.6.
	for _, c := range []struct {
		counts []int
		k      int
		want   float64
	}{{ns, 2, math.Pow(2, zipfS)}, {ns, 10, math.Pow(10, zipfS)}, {cur, 2, math.Pow(2, zipfS)}, {cur, 50, math.Pow(50, zipfS)}} {
		got := float64(c.counts[1]) / float64(c.counts[c.k])
		if math.Abs(got-c.want)/c.want > 0.15 {
			t.Errorf("count(1)/count(%d) = %.2f, want ≈ %.2f", c.k, got, c.want)
		}
	}
	if len(players) < 990 {
		t.Errorf("only %d of 1000 players drawn", len(players))
	}
	for p, c := range players {
		if c > 2*n/1000 {
			t.Errorf("player %d drawn %d times: not uniform", p, c)
		}
	}
	if share := float64(reads) / n; math.Abs(share-0.2) > 0.01 {
		t.Errorf("read share %.3f, want 0.2", share)
	}
	if _, err := NewGenerator("nap", 1, 1, 0, "k", 0); err == nil {
		t.Error("unknown workload accepted")
	}
}

func TestGeneratorsReproducible(t *testing.T) {
	a, _ := NewGenerator(Hold, 1, 42, 1, "k", 0)
	b, _ := NewGenerator(Hold, 1, 42, 1, "k", 0)
	for i := 0; i < 100; i++ {
		if x, y := a.Next(), b.Next(); !reflect.DeepEqual(x, y) {
			t.Fatalf("op %d differs: %+v %+v", i, x, y)
		}
	}
}

// TestSpendFromTheLastGrant: a consume or exchange spends from the player
// and currency of the grant before it, so that most succeed; a consume
// takes 1–5000, an exchange 1–1001.
func TestSpendFromTheLastGrant(t *testing.T) {
	for w, spend := range map[Workload]Call{Spend: CallConsume, Exchange: CallExchange} {
		g, _ := NewGenerator(w, 1, 7, 0, "k", 0)
		for i := 0; i < 1000; i++ {
			grant, next := g.Next(), g.Next()
			switch {
			case grant.Call != CallGrant || next.Call != spend:
				t.Fatalf("%s: calls %v then %v", w, grant.Call, next.Call)
			case next.Namespace != grant.Namespace || next.Player != grant.Player || next.Currency != grant.Currency:
				t.Fatalf("%s: %+v after %+v", w, next, grant)
			case next.Amount < 1 || (w == Spend && next.Amount > 5000) || (w == Exchange && next.Amount > 1001):
				t.Fatalf("%s: amount %d", w, next.Amount)
			}
		}
	}
}

// TestBatchGrants: a batch op carries batch-size grants drawn as Write's,
// each with its own key, all in the call's namespace.
func TestBatchGrants(t *testing.T) {
	g, err := NewGenerator(Batch, 0.01, 7, 0, "k", 50)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	namespaces := map[int32]bool{}
	for range 100 {
		op := g.Next()
		if op.Call != CallBatch || len(op.Batch) != 50 || op.size() != 50 {
			t.Fatalf("batch op %+v", op)
		}
		namespaces[op.Namespace] = true
		for _, grant := range op.Batch {
			if grant.Call != CallGrant || grant.Namespace != op.Namespace || grant.Player < 1 || grant.Player > 1000 ||
				grant.Currency < 1 || grant.Currency > Currencies || grant.Amount < 1 || keys[grant.Key] {
				t.Fatalf("grant %+v in a batch of namespace %d", grant, op.Namespace)
			}
			keys[grant.Key] = true
		}
	}
	if len(namespaces) < 3 {
		t.Errorf("namespaces drawn: %v", namespaces)
	}
	for _, size := range []int{0, BatchSizeMax + 1} {
		if _, err := NewGenerator(Batch, 1, 1, 0, "k", size); err == nil {
			t.Errorf("batch size %d accepted", size)
		}
	}
}
