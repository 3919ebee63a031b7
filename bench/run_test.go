package bench

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
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

// batchTarget applies every grant of a batch but the last, and answers
// its code.
type batchTarget struct{ calls atomic.Int64 }

func (b *batchTarget) Do(ctx context.Context, op *Op) string {
	b.calls.Add(1)
	if op.Call != CallBatch {
		return ""
	}
	op.Acked = len(op.Batch) - 1
	return "insufficient_funds"
}

// TestBatchCountsGrants: a batch run's ops, writes and tps are grants, not
// calls; its latency is per call.
func TestBatchCountsGrants(t *testing.T) {
	tgt := &batchTarget{}
	res, err := Run(context.Background(), RunConfig{Workload: Batch, BatchSize: 10, Scale: 1, Seed: 1, Clients: 2,
		Duration: 200 * time.Millisecond}, tgt)
	if err != nil {
		t.Fatal(err)
	}
	calls := tgt.calls.Load()
	switch {
	case calls == 0 || res.Ops != 10*calls || res.answered != 10*calls || res.writes != 9*calls:
		t.Fatalf("calls %d: ops %d, answered %d, writes %d", calls, res.Ops, res.answered, res.writes)
	case res.hist.TotalCount() != calls || res.Errors["insufficient_funds"] != calls:
		t.Fatalf("calls %d: latencies %d, errors %v", calls, res.hist.TotalCount(), res.Errors)
	case res.TPS < 9*float64(calls)/res.Elapsed:
		t.Fatalf("tps %.0f for %d grants in %.2f s", res.TPS, res.Ops, res.Elapsed)
	}
}

// callTarget records which calls it was sent.
type callTarget struct {
	mu    sync.Mutex
	calls map[Call]int
}

func (c *callTarget) Do(ctx context.Context, op *Op) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op.Call]++
	return ""
}

// TestBatchBaselineWrites: against a batch, the baseline writes one grant
// per call (it has no batch), and the report names the batch size.
func TestBatchBaselineWrites(t *testing.T) {
	base := &callTarget{calls: map[Call]int{}}
	o := Options{RunConfig: RunConfig{Workload: Batch, BatchSize: 5, Scale: 1, Seed: 1, Clients: 2, Duration: 100 * time.Millisecond}, Rounds: 1}
	rep, err := Bench(context.Background(), o, Env{Coffer: &batchTarget{}, Baseline: base}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if base.calls[CallGrant] == 0 || base.calls[CallBatch] != 0 || rep.BatchSize != 5 || rep.Baseline == nil {
		t.Fatalf("baseline calls %v, batch size %d", base.calls, rep.BatchSize)
	}
}

// spinTarget spends the same CPU on every op (some milliseconds: a
// tenth of a 400-op run spans several clock ticks however loaded the
// machine is).
type spinTarget struct{ sink atomic.Uint64 }

func (s *spinTarget) Do(ctx context.Context, op *Op) string {
	x := uint64(op.Player)
	for range 2_000_000 {
		x = x*6364136223846793005 + 1442695040888963407
	}
	s.sink.Add(x)
	return ""
}

// TestDecayGaugesTheHost: a decay run with coffer's pid reads its CPU at
// the start and at each tenth, and reports what each tenth spent per 1000
// ops; against a target whose process the bench does not know, no figure.
func TestDecayGaugesTheHost(t *testing.T) {
	o := Options{RunConfig: RunConfig{Workload: Write, Scale: 1, Seed: 1, Clients: 2, Ops: 400}, Rounds: 1}
	rep, err := Bench(context.Background(), o, Env{Coffer: &spinTarget{}, CofferPID: os.Getpid()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cpu := rep.Decay.TenthsCofferCPU; len(cpu) != 10 || slices.ContainsFunc(cpu, func(s float64) bool { return s <= 0 }) {
		t.Fatalf("CPU per tenth %v; want 10 figures, each above 0 (the target spins)", cpu)
	}
	rep, err = Bench(context.Background(), o, Env{Coffer: &countTarget{}}, io.Discard)
	if err != nil || rep.Decay == nil || rep.Decay.TenthsCofferCPU != nil {
		t.Fatalf("without a pid: %+v %v", rep.Decay, err)
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

// TestStopEndsTheRunsNotTheReport: closing Stop ends a 10-minute run at
// once, closed or open loop; the ops in flight are answered and counted,
// no run starts after it, and the report covers the round done.
func TestStopEndsTheRunsNotTheReport(t *testing.T) {
	for _, rate := range []float64{0, 200} {
		stop := make(chan struct{})
		time.AfterFunc(300*time.Millisecond, func() { close(stop) })
		tgt, base := &countTarget{}, &countTarget{}
		o := Options{RunConfig: RunConfig{Workload: Write, Scale: 1, Seed: 1, Clients: 4, Rate: rate,
			Duration: 10 * time.Minute, Warmup: 100 * time.Millisecond, Stop: stop}, Rounds: 3}
		began := time.Now()
		rep, err := Bench(context.Background(), o, Env{Coffer: tgt, Baseline: base}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		run := rep.Runs[0]
		switch {
		case time.Since(began) > 5*time.Second:
			t.Fatalf("rate %v: stopped after %v", rate, time.Since(began))
		case !rep.Interrupted || len(rep.Rounds) != 1 || len(rep.Runs) != 1 || rep.Baseline != nil:
			t.Fatalf("rate %v: interrupted %v, rounds %+v, runs %d", rate, rep.Interrupted, rep.Rounds, len(rep.Runs))
		case run.Ops == 0 || run.answered+1 != tgt.calls.Load() || base.calls.Load() != 1:
			// +1 and 1: each target's preflight read.
			t.Fatalf("rate %v: measured %d, answered %d, calls %d, baseline calls %d", rate, run.Ops, run.answered, tgt.calls.Load(), base.calls.Load())
		}
	}
	stop := make(chan struct{})
	close(stop)
	o := Options{RunConfig: RunConfig{Workload: Write, Scale: 1, Clients: 1, Duration: time.Minute, Stop: stop}, Rounds: 1}
	if _, err := Bench(context.Background(), o, Env{Coffer: &countTarget{}}, io.Discard); err == nil {
		t.Fatal("a bench stopped before its first run reported")
	}
}

// refusingTarget answers every op with code.
type refusingTarget struct{ code string }

func (r refusingTarget) Do(context.Context, *Op) string { return r.code }

// TestPreflight: a target that cannot read a balance stops the bench
// before any run, with its code, whichever side it is.
func TestPreflight(t *testing.T) {
	o := Options{RunConfig: RunConfig{Workload: Write, Scale: 1, Clients: 1, Duration: time.Minute}, Rounds: 1}
	for want, env := range map[string]Env{
		"coffer: a balance read (namespace 1, player 1) failed: unauthenticated;": {Coffer: refusingTarget{"unauthenticated"}, Baseline: &countTarget{}},
		"the baseline: a balance read (namespace 1, player 1) failed: transport;": {Coffer: &countTarget{}, Baseline: refusingTarget{"transport"}},
	} {
		rep, err := Bench(context.Background(), o, env, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), want) || rep != nil {
			t.Errorf("want %q, got %v", want, err)
		}
	}
}
