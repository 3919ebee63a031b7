package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestMedianAndRatio(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	xs := []float64{3, 1, 2}
	median(xs)
	if xs[0] != 3 {
		t.Error("median sorted its argument")
	}
	if ratio(3, 2) != 1.5 || !math.IsNaN(ratio(1, 0)) {
		t.Error("ratio")
	}
}

// TestPercentiles: 1..1000 ms recorded once each; the summary reads the
// percentiles back within the histogram's 3 significant digits.
func TestPercentiles(t *testing.T) {
	r := newRecorder(time.Now())
	for i := 1; i <= 1000; i++ {
		code := ""
		if i%100 == 0 {
			code = "insufficient_funds"
		}
		r.record(time.Duration(i)*time.Millisecond, code, 1)
	}
	l := summarize(r.total)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", l.P50, 500}, {"p95", l.P95, 950}, {"p99", l.P99, 990}, {"p999", l.P999, 999}, {"max", l.Max, 1000}, {"mean", l.Mean, 500.5}} {
		if math.Abs(c.got-c.want)/c.want > 0.002 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if r.ops != 1000 || r.errors["insufficient_funds"] != 10 {
		t.Errorf("ops %d errors %v", r.ops, r.errors)
	}
	// A latency past the histogram's range is clamped, not lost.
	r.record(time.Hour, "", 1)
	if r.total.TotalCount() != 1001 {
		t.Error("an hour-long op was dropped")
	}
}

func TestDecay(t *testing.T) {
	d := decay(1000, []float64{1, 2, 1, 1, 1, 1, 1, 1, 1, 1.25}, []float64{0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.03, 0.04})
	if d == nil || d.FirstTPS != 100 || d.LastTPS != 80 || d.Ratio != 0.8 || len(d.TenthsTPS) != 10 || d.TenthsTPS[1] != 50 || d.TenthsTPS[9] != 80 {
		t.Fatalf("%+v", d)
	}
	var text strings.Builder
	(&Report{Decay: d}).WriteText(&text)
	if !strings.Contains(text.String(), "tps per tenth: 100 50 100 100 100 100 100 100 100 80\n") ||
		!strings.Contains(text.String(), "coffer CPU s / 1000 ops per tenth (the host's speed): 0.300 0.300 0.300 0.300 0.300 0.300 0.300 0.300 0.300 0.400\n") {
		t.Fatalf("report:\n%s", &text)
	}
	if decay(1000, []float64{1, 1}, nil) != nil {
		t.Error("decay from an unfinished run")
	}
}

func TestSideTotals(t *testing.T) {
	var s sideTotals
	before := counters{pgCPU: 1, cofferCPU: 2, benchCPU: 4, machine: 1000, steal: 10}
	before.db.WALBytes, before.db.LotUpdates, before.db.LotHOTUpdates = 1000, 10, 5
	after := counters{pgCPU: 3, cofferCPU: 3, benchCPU: 4.5, machine: 1400, steal: 30}
	after.db.WALBytes, after.db.LotUpdates, after.db.LotHOTUpdates, after.db.Trx, after.db.Transactions = 6000, 20, 14, 10, 4
	s.add(before, after, 10)
	side := s.side()
	if side.WALBytesPerOp != 500 || side.PostgresCPUPer1000Op != 200 || side.CofferCPUPer1000Op != 100 || side.BenchCPUPer1000Op != 50 || side.StealShare != 0.05 || side.LotHOTShare != 0.9 || s.trx != 10 ||
		side.TransactionsPerOp != 0.4 {
		t.Fatalf("%+v", side)
	}
}
