package bench

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// countTarget answers every op after a short pause and counts them.
type countTarget struct{ calls atomic.Int64 }

func (c *countTarget) Do(ctx context.Context, op *Op) string {
	c.calls.Add(1)
	time.Sleep(time.Millisecond)
	return ""
}

// TestRunWarmupIsNotCounted: ops started in the warmup are neither measured
// nor counted against Ops, so the first tenth of a decay run does not
// include connecting; they are still answered (and cost what they cost).
func TestRunWarmupIsNotCounted(t *testing.T) {
	tgt := &countTarget{}
	res, err := Run(context.Background(), RunConfig{Workload: Write, Scale: 1, Seed: 1, Clients: 4,
		Ops: 400, Warmup: 200 * time.Millisecond}, tgt)
	if err != nil {
		t.Fatal(err)
	}
	calls := tgt.calls.Load()
	if res.Ops != 400 || len(res.Tenths) != 10 || calls <= 400 || res.answered != calls || res.writes != calls {
		t.Fatalf("measured %d, tenths %d, calls %d, answered %d, writes %d", res.Ops, len(res.Tenths), calls, res.answered, res.writes)
	}
}

// TestOpenLoopWarmup: an open loop keeps its schedule through the warmup
// and measures only the ops due after it.
func TestOpenLoopWarmup(t *testing.T) {
	tgt := &countTarget{}
	res, err := Run(context.Background(), RunConfig{Workload: Write, Scale: 1, Seed: 1, Clients: 8, Rate: 500,
		Duration: 400 * time.Millisecond, Warmup: 200 * time.Millisecond}, tgt)
	if err != nil {
		t.Fatal(err)
	}
	if calls := tgt.calls.Load(); res.Ops != 200 || calls != 300 {
		t.Fatalf("measured %d (want 200), calls %d (want 300)", res.Ops, calls)
	}
}
