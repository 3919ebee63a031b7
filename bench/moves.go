package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
)

// Mover moves shards while a run goes on (Options.Moves). coffer bench
// --self gives its stack's, which runs coffer shard move's code.
type Mover interface {
	// Move moves shard id to database to (an index of Env.Router's
	// map), verifies the copy and drops the old one, so that the shard
	// can move again, and tells when its steps were done.
	Move(ctx context.Context, id coffer.ShardID, to int) (Moved, error)
}

// Moved is one move a Mover made.
type Moved struct {
	// From and To name the databases.
	From, To string
	// Began is when the move began, Synced when the copy had caught up
	// (the cut-over began next), Done when the target took the shard's
	// writes (the pause ended).
	Began, Synced, Done time.Time
	// Pause is how long the shard's writes paused, as the mover
	// measured it: from its lock request to the target's opening.
	Pause time.Duration
}

// ShardMove is one move of a run with moves, and what the run's ops saw
// meanwhile: the shards that stayed during the copy, and the moved
// shard's clients at the cut-over.
type ShardMove struct {
	Run     string         `json:"run"`
	Shard   coffer.ShardID `json:"shard"`
	From    string         `json:"from"`
	To      string         `json:"to"`
	PauseMs float64        `json:"pause_ms"`
	// Copy is the other shards' ops from the move's start until its copy
	// had caught up; Quiet theirs in a window as long that ends where the
	// run's first move began (shorter if the run had less before it).
	Copy  Window `json:"copy"`
	Quiet Window `json:"quiet"`
	// P99Ratio is Copy's p99 over Quiet's; 0 if Quiet had no ops.
	P99Ratio float64 `json:"others_p99_ratio"`
	// Cut is the moved shard's ops from the pause's start until cutTail
	// after its end: its Max is the worst latency a client saw.
	Cut Window `json:"cut"`
}

// Window is the ops of some shards that were in flight at some moment of
// a stretch of a run, and their latency.
type Window struct {
	// FromS and ToS are seconds from the run's measured start.
	FromS  float64 `json:"from_s"`
	ToS    float64 `json:"to_s"`
	Ops    int64   `json:"ops"`
	Errors int64   `json:"errors"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// cutTail extends a move's cut window past its pause: an instance reads
// the moves every second, so a write sent within a second of the pause's
// end may still meet the old copy's fence and be sent on to the new home.
const cutTail = time.Second

// movesRunMax bounds a run with moves past its duration. The moves end it
// sooner: each wait of a move is bounded by the mover's timeouts.
const movesRunMax = time.Hour

// moveRunner runs coffer's runs with moves: once half the duration has
// passed, it moves each of shards to the next database of the map and
// back (Env.Mover), one after the other, while the load goes on. The run
// lasts its duration, and until cutTail after the last move. An
// interrupt lets the move in flight finish and starts no other.
type moveRunner struct {
	Runner
	env    Env
	shards []coffer.ShardID
}

func (r moveRunner) Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	outer := cfg
	log := &opLog{shardOf: r.env.Router.Map().ShardOf}
	stop := make(chan struct{})
	start := time.Now().Add(cfg.Warmup)
	cfg.Stop, cfg.Observe, cfg.Duration = stop, log.add, cfg.Duration+movesRunMax
	var made []madeMove
	var moveErr error
	go func() {
		defer close(stop)
		made, moveErr = r.moveAll(ctx, &outer, start.Add(outer.Duration/2))
		if moveErr != nil {
			return
		}
		end := start.Add(outer.Duration)
		if tail := time.Now().Add(cutTail); tail.After(end) {
			end = tail
		}
		sleepUntil(ctx, &outer, end)
	}()
	res, err := r.Runner.Run(ctx, cfg)
	<-stop
	if err = errors.Join(err, moveErr); err != nil {
		return nil, err
	}
	res.moves = log.shardMoves(cfg.Label, start, made)
	return res, nil
}

// madeMove is a move of shard id.
type madeMove struct {
	id coffer.ShardID
	Moved
}

// moveAll waits until at, then moves each shard there and back.
func (r moveRunner) moveAll(ctx context.Context, cfg *RunConfig, at time.Time) ([]madeMove, error) {
	if !sleepUntil(ctx, cfg, at) {
		return nil, nil
	}
	var made []madeMove
	for _, id := range r.shards {
		mp := r.env.Router.Map()
		home := mp.DatabaseIndex(id)
		if home < 0 {
			return made, mp.Unplaced(id)
		}
		for _, to := range []int{(home + 1) % len(mp.Databases()), home} {
			if ctx.Err() != nil || cfg.Stopped() {
				return made, ctx.Err()
			}
			mv, err := r.env.Mover.Move(ctx, id, to)
			if err != nil {
				return made, fmt.Errorf("move shard %d: %w", id, err)
			}
			made = append(made, madeMove{id, mv})
		}
	}
	return made, nil
}

// sleepUntil waits until t, and tells whether it came before cfg's
// Stop or ctx's end.
func sleepUntil(ctx context.Context, cfg *RunConfig, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-cfg.Stop:
	case <-ctx.Done():
	}
	return false
}

// opLog keeps a run's measured ops for the windows of its moves. add is
// safe for concurrent use; the log grows by one entry per op.
type opLog struct {
	shardOf func(coffer.PlayerID) coffer.ShardID
	mu      sync.Mutex
	ops     []loggedOp
}

type loggedOp struct {
	shard  coffer.ShardID
	at     time.Time
	d      time.Duration
	failed bool
}

// add is RunConfig.Observe.
func (l *opLog) add(op *Op, at time.Time, d time.Duration, code string) {
	e := loggedOp{shard: l.shardOf(coffer.PlayerID(op.Player)), at: at, d: d, failed: code != ""}
	l.mu.Lock()
	l.ops = append(l.ops, e)
	l.mu.Unlock()
}

// window sums up the ops of the shards keep accepts that were in flight
// at some moment from from to to; start is the run's measured start. It
// reads the log once the run is over.
func (l *opLog) window(start, from, to time.Time, keep func(coffer.ShardID) bool) Window {
	h := newHistogram()
	w := Window{FromS: from.Sub(start).Seconds(), ToS: to.Sub(start).Seconds()}
	for _, e := range l.ops {
		if !keep(e.shard) || !e.at.Before(to) || !e.at.Add(e.d).After(from) {
			continue
		}
		w.Ops++
		if e.failed {
			w.Errors++
		}
		_ = h.RecordValue(latencyUs(e.d))
	}
	lat := summarize(h)
	w.P50, w.P99, w.Max = lat.P50, lat.P99, lat.Max
	return w
}

// shardMoves are the moves made in the run labelled label, with what
// its ops saw.
func (l *opLog) shardMoves(label string, start time.Time, made []madeMove) []ShardMove {
	var out []ShardMove
	for _, m := range made {
		others := func(s coffer.ShardID) bool { return s != m.id }
		quietEnd := made[0].Began
		quietFrom := quietEnd.Add(-m.Synced.Sub(m.Began))
		if quietFrom.Before(start) {
			quietFrom = start
		}
		sm := ShardMove{Run: label, Shard: m.id, From: m.From, To: m.To, PauseMs: float64(m.Pause.Microseconds()) / 1000,
			Copy:  l.window(start, m.Began, m.Synced, others),
			Quiet: l.window(start, quietFrom, quietEnd, others),
			Cut:   l.window(start, m.Done.Add(-m.Pause), m.Done.Add(cutTail), func(s coffer.ShardID) bool { return s == m.id })}
		if sm.Quiet.P99 > 0 {
			sm.P99Ratio = sm.Copy.P99 / sm.Quiet.P99
		}
		out = append(out, sm)
	}
	return out
}

// writeMoves prints the moves, then how they compare with the targets
// of issue 39.
func writeMoves(w io.Writer, moves []ShardMove) {
	if len(moves) == 0 {
		return
	}
	fmt.Fprintf(w, "\nshard moves: the pause as the mover measured it; the other shards' ops during the copy, and in as long a window before the first move; the moved shard's from the pause to %s after it\n", cutTail)
	fmt.Fprintf(w, "%-9s %5s %-23s %9s %13s %18s %18s %6s %28s\n", "run", "shard", "from → to", "pause ms", "copy s", "others p50/p99 ms", "quiet p50/p99 ms", "p99 ×", "moved: worst ms (ops, errors)")
	var pauses []float64
	ratioMax := 0.0
	for _, m := range moves {
		fmt.Fprintf(w, "%-9s %5d %-23s %9.0f %13s %18s %18s %6.2f %28s\n", m.Run, m.Shard, m.From+" → "+m.To, m.PauseMs,
			fmt.Sprintf("%.1f–%.1f", m.Copy.FromS, m.Copy.ToS), fmt.Sprintf("%.1f / %.1f", m.Copy.P50, m.Copy.P99),
			fmt.Sprintf("%.1f / %.1f", m.Quiet.P50, m.Quiet.P99), m.P99Ratio, fmt.Sprintf("%.0f (%d, %d)", m.Cut.Max, m.Cut.Ops, m.Cut.Errors))
		pauses = append(pauses, m.PauseMs)
		ratioMax = max(ratioMax, m.P99Ratio)
	}
	fmt.Fprintf(w, "pause: median %.0f ms, worst %.0f ms (targets ≤ 1000, ≤ 3000); other shards' p99 during a copy: at worst %.2f× as without a move (target ≤ 2)\n",
		median(pauses), slices.Max(pauses), ratioMax)
}
