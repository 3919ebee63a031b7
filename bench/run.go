package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Target performs ops. Do returns "" for success or the error code: the
// service's stable code, or "transport" when no answer came. It is called
// from many goroutines at once.
type Target interface {
	Do(ctx context.Context, op *Op) string
}

// RunConfig is one run of one target.
type RunConfig struct {
	Workload Workload
	// BatchSize is the grants of each call of the Batch workload.
	BatchSize int
	Scale     float64
	Seed      uint64
	// Keys starts every idempotency key. The seed repeats a workload,
	// never its keys: Bench draws Keys at random, since a second run
	// against the same deployment would otherwise replay the first's
	// writes (or conflict with them) instead of writing.
	Keys    string
	Clients int
	// Duration ends the run, unless Ops is set: then the run ends after
	// that many ops.
	Duration time.Duration
	Ops      int64
	// Warmup runs the workload first without measuring it: connections
	// open and caches fill. Ops started in it are neither measured nor
	// counted against Ops.
	Warmup time.Duration
	// Rate > 0 makes an open loop: ops start at this rate per second
	// whatever the latency, and latency counts from the intended start.
	Rate float64
	// Progress prints a line to Out every Progress.
	Progress time.Duration
	Out      io.Writer
	Label    string
	// Stop, once closed, ends the run early: no op starts after it, and
	// those in flight finish.
	Stop <-chan struct{}
	// CPUPIDs are processes whose CPU time a run with Ops reads at its
	// start and at the end of each tenth. A process whose work per op
	// does not grow with the data (coffer serve) gauges the host: a
	// change of its CPU per op across tenths is the machine's speed.
	CPUPIDs []int
	// Observe, if set, is told of every measured op once answered: when
	// it started (in an open loop, was due), how long it took, and its
	// code. It is called from many goroutines at once.
	Observe func(op *Op, at time.Time, d time.Duration, code string)
}

// Stopped tells whether Stop is closed.
func (c *RunConfig) Stopped() bool {
	select {
	case <-c.Stop:
		return true
	default:
		return false
	}
}

// Result is what one run measured.
type Result struct {
	Label   string           `json:"label"`
	Ops     int64            `json:"ops"`
	Elapsed float64          `json:"elapsed_s"`
	TPS     float64          `json:"tps"`
	Latency Latency          `json:"latency_ms"`
	Errors  map[string]int64 `json:"errors"`
	Series  []Point          `json:"series"`
	// Tenths are the seconds each tenth of Ops took (runs with Ops).
	Tenths []float64 `json:"tenths_s,omitempty"`
	// TenthsCPU are the CPU seconds of RunConfig.CPUPIDs in each tenth.
	TenthsCPU []float64 `json:"tenths_cpu_s,omitempty"`

	hist *hdrhistogram.Histogram
	// moves are the shard moves made during the run (Options.Moves).
	moves  []ShardMove
	writes int64 // acknowledged writes: each added one trx row
	// answered counts every op answered, warmup included: the ops behind
	// the server counters read around the run.
	answered int64
}

// backlogMax bounds the ops an open loop may have waiting for a client;
// beyond it an op is counted as error "backlog" rather than queued.
const backlogMax = 100_000

// Run drives t with cfg's workload until the duration or op count is
// reached or ctx ends.
func Run(ctx context.Context, cfg RunConfig, t Target) (*Result, error) {
	gens, err := newGenerators(cfg)
	if err != nil {
		return nil, err
	}
	// The run stops issuing ops at the deadline but lets those in flight
	// finish: a write cut off mid-flight would have an unknown outcome,
	// and every acknowledged write must match a row.
	begin := time.Now()
	start := begin.Add(cfg.Warmup)
	stopAt := start.Add(cfg.Duration)
	running := func() bool { return ctx.Err() == nil && !cfg.Stopped() && (cfg.Ops > 0 || time.Now().Before(stopAt)) }
	rec := newRecorder(start)
	var claimed, done, writes, answered atomic.Int64
	tenths := make([]atomic.Int64, 10) // unix ns when each tenth completed
	// CPU seconds of cfg.CPUPIDs at the start and at the end of each
	// tenth. Each is written once, by the goroutine that reaches it, and
	// read after the clients and the ticks are done.
	cpuAt := make([]float64, 11)
	readCPU := func(i int) { cpuAt[i] = cpuSeconds(cfg.CPUPIDs) }
	// An op belongs to the warmup if it started (or, in an open loop, was
	// due) before start.
	complete := func(at time.Time, code string, op *Op) {
		n := int64(1) // the ops it counts for: a batch's grants
		if op != nil {
			n = int64(op.size())
		}
		answered.Add(n)
		switch {
		case op != nil && op.Call == CallBatch:
			writes.Add(int64(op.Acked))
		case code == "" && op.Call != CallRead: // code is never "" without an op
			writes.Add(1)
		}
		if at.Before(start) {
			return
		}
		var d time.Duration
		if op != nil {
			d = time.Since(at)
		}
		rec.record(d, code, n)
		if cfg.Observe != nil && op != nil {
			cfg.Observe(op, at, d, code)
		}
		if n := done.Add(1); cfg.Ops >= 10 && n%(cfg.Ops/10) == 0 && n/(cfg.Ops/10) <= 10 {
			tenths[n/(cfg.Ops/10)-1].Store(time.Now().UnixNano())
			readCPU(int(n / (cfg.Ops / 10)))
		}
	}
	claim := func(at time.Time) bool {
		if at.Before(start) {
			return ctx.Err() == nil && !cfg.Stopped()
		}
		return running() && (cfg.Ops == 0 || claimed.Add(1) <= cfg.Ops)
	}

	stopTicks := make(chan struct{})
	ticksDone := make(chan struct{})
	go func() {
		time.Sleep(time.Until(start))
		readCPU(0)
		tickLoop(rec, cfg, stopTicks, ticksDone)
	}()
	var wg sync.WaitGroup
	if cfg.Rate > 0 {
		openLoop(ctx, cfg, gens, t, claim, complete, &wg, begin, stopAt)
	} else {
		closedLoop(ctx, gens, t, claim, complete, &wg)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopTicks)
	<-ticksDone
	res := &Result{Label: cfg.Label, Ops: rec.ops, Elapsed: elapsed.Seconds(), TPS: float64(rec.ops) / elapsed.Seconds(),
		Latency: summarize(rec.total), Errors: rec.errors, Series: rec.series, hist: rec.total, writes: writes.Load(), answered: answered.Load()}
	if cfg.Ops > 0 {
		res.Tenths, res.TenthsCPU = tenthsOf(start, tenths, cpuAt, len(cfg.CPUPIDs) > 0)
	}
	return res, nil
}

// newGenerators makes one workload generator per client.
func newGenerators(cfg RunConfig) ([]*Generator, error) {
	gens := make([]*Generator, cfg.Clients)
	for i := range gens {
		g, err := NewGenerator(cfg.Workload, cfg.Scale, cfg.Seed, i, cfg.Keys, cfg.BatchSize)
		if err != nil {
			return nil, err
		}
		gens[i] = g
	}
	return gens, nil
}

// closedLoop runs one client per generator, each starting its next op
// when its last one is answered, while claim allows.
func closedLoop(ctx context.Context, gens []*Generator, t Target, claim func(time.Time) bool,
	complete func(time.Time, string, *Op), wg *sync.WaitGroup) {
	for _, g := range gens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t0 := time.Now(); claim(t0); t0 = time.Now() {
				op := g.Next()
				code := t.Do(ctx, &op)
				complete(t0, code, &op)
			}
		}()
	}
}

// tenthsOf turns the times each tenth of the ops completed (0: not
// reached) into seconds per tenth from start, and, with cpu, the CPU
// seconds each tenth took (cpuAt[i] read at the start of tenth i).
func tenthsOf(start time.Time, tenths []atomic.Int64, cpuAt []float64, cpu bool) (secs, cpuSecs []float64) {
	prev := start.UnixNano()
	for i := range tenths {
		at := tenths[i].Load()
		if at == 0 {
			break
		}
		secs = append(secs, float64(at-prev)/1e9)
		prev = at
		if cpu {
			cpuSecs = append(cpuSecs, cpuAt[i+1]-cpuAt[i])
		}
	}
	return secs, cpuSecs
}

// openLoop starts ops at cfg.Rate on cfg.Clients workers. An op's latency
// counts from when it should have started, so a slow answer delays no
// measurement (no coordinated omission).
func openLoop(ctx context.Context, cfg RunConfig, gens []*Generator, t Target, claim func(time.Time) bool,
	complete func(time.Time, string, *Op), wg *sync.WaitGroup, start, stopAt time.Time) {
	due := make(chan time.Time, backlogMax)
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := range due {
				op := gens[i].Next()
				code := t.Do(ctx, &op)
				complete(at, code, &op)
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	for n := int64(0); ; n++ {
		at := start.Add(time.Duration(n) * interval)
		if !claim(at) || (cfg.Ops == 0 && !at.Before(stopAt)) {
			break
		}
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-cfg.Stop:
			case <-time.After(d):
			}
		}
		select {
		case due <- at:
		default:
			complete(at, "backlog", nil) // not sent: no write to count
		}
	}
	close(due)
}

func tickLoop(rec *recorder, cfg RunConfig, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	second := time.NewTicker(time.Second)
	defer second.Stop()
	var progress <-chan time.Time
	if cfg.Progress > 0 && cfg.Out != nil {
		t := time.NewTicker(cfg.Progress)
		defer t.Stop()
		progress = t.C
	}
	for {
		select {
		case <-stop:
			return
		case now := <-second.C:
			rec.tick(now)
		case now := <-progress:
			p, l := rec.progressLine(now)
			fmt.Fprintf(cfg.Out, "%-9s %6.0fs  %8.0f tps  avg %6.2f ms  sd %6.2f ms  p99 %7.2f ms\n",
				cfg.Label, p.Second, p.TPS, l.Mean, l.Std, l.P99)
		}
	}
}
