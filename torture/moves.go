package torture

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
)

// ShardMove is the fault kind that moves a shard with `coffer shard move`
// (docs/shard-moves.md), a process of its own, to another database, or
// back to the one the config places it on, then cleans up the old copy.
// On the way the move meets one fault (MovePlan.Meet).
const ShardMove = "shard-move"

// MoverKill is what a move may meet besides the run's kinds: kill -9 of
// its mover, which is then run again to carry on, or told to abort.
const MoverKill = "mover-kill"

// moverRunsMax bounds the mover's runs for one move: carrying on,
// aborting, cleaning up.
const moverRunsMax = 12

// moverRunMax bounds one run of the mover.
const moverRunMax = 2 * time.Minute

// carryOnTriesMax is how many runs in a row may fail to carry a move on
// that has not cut over before the nemesis aborts it (a failover of the
// source loses the replication slot: the move cannot go on).
const carryOnTriesMax = 3

// MovePlan is what a shard-move fault does, drawn with the schedule.
type MovePlan struct {
	// Pick draws the shard among Target.MovableShards and, for a shard on
	// its configured database, the database it goes to.
	Pick uint64
	// Meet is the fault the move meets: "" for none, MoverKill, or
	// another kind of the run, injected once the mover printed the step
	// After; on the move's target database if OnTarget, else on its
	// source; coffer-kill kills Instance.
	Meet, After string
	OnTarget    bool
	Instance    int
	// Abort tells to abort a move whose mover was killed before its
	// cut-over, rather than run it again.
	Abort bool
}

// copySteps are the mover's steps while it copies, before the cut-over.
var copySteps = []string{move.StepPublished, move.StepPrepared, move.StepSubscribed}

// moverSteps are the mover's steps a fault may follow: after synced the
// cut-over begins, after cut the shard's writes wait, after done the
// copy is verified.
var moverSteps = append(slices.Clone(copySteps), move.StepSynced, move.StepCut, move.StepDone)

// planMove draws a shard-move fault's plan. It meets a kind of kinds
// (in the report's order, for a plan that depends on the seed alone),
// the mover's kill, or nothing. A failover meets the copy, or the pause
// after the cut-over: the replication slot does not fail over, so a move
// of a source that failed over during the copy is aborted, and one
// whose source failed over after the cut-over copies the fenced old
// copy anew (ADR 0022). A coffer instance dies as the cut-over begins.
func planMove(rng *rand.Rand, kinds []string, instances int) *MovePlan {
	meets := []string{"", MoverKill}
	for _, k := range reportKinds {
		if k != ShardMove && k != PatroniKill && slices.Contains(kinds, k) {
			meets = append(meets, k)
		}
	}
	p := &MovePlan{Pick: rng.Uint64(), Meet: meets[rng.IntN(len(meets))], OnTarget: rng.IntN(2) == 1,
		Instance: rng.IntN(instances), Abort: rng.IntN(2) == 1}
	steps := moverSteps
	switch {
	case failover(p.Meet):
		steps = append(slices.Clone(copySteps), move.StepCut)
	case p.Meet == CofferKill:
		steps = []string{move.StepSynced}
	}
	p.After = steps[rng.IntN(len(steps))]
	return p
}

// ShardPlace is where a shard is, as the databases record it.
type ShardPlace struct {
	// Home is the database serving the shard (-1 while it is cut over),
	// Configured the one the config places it on.
	Home, Configured int
	// Move is the shard's latest move; its Epoch is 0 if it never moved.
	Move shard.Move
}

// ended tells whether the shard's latest move, if any, has ended.
func (p ShardPlace) ended() bool {
	return p.Move.Epoch == 0 || p.Move.State == shard.MoveCleaned || p.Move.State == shard.MoveAborted
}

// MoveResult is one shard-move fault: what it moved, what it met, and how
// it ended.
type MoveResult struct {
	Shard, From, To int
	At              time.Duration // from the start of the run
	Plan            MovePlan
	// Met tells that the fault was injected: the mover printed the step.
	Met bool
	// State is how the move ended: cleaned or aborted (else Run reports
	// an error); Unverified that it was cut over by a run killed before
	// it verified the copy.
	State      shard.MoveState
	Unverified bool
	Pause      time.Duration
	Runs       int
}

// pauseMet tells whether the move's fault struck during its pause: once
// the cut-over began.
func (r MoveResult) pauseMet() bool {
	return r.Met && (r.Plan.After == move.StepSynced || r.Plan.After == move.StepCut)
}

// moveShard carries out the shard-move fault f: the move meets its fault,
// then the mover runs until the move is cleaned up or aborted.
func moveShard(ctx context.Context, t Target, f Fault) (MoveResult, error) {
	shards := t.MovableShards()
	s := shards[f.Move.Pick%uint64(len(shards))]
	r := MoveResult{Shard: s, Plan: *f.Move}
	place, err := placeOf(ctx, t, s)
	if err != nil {
		return r, err
	}
	if !place.ended() {
		return r, fmt.Errorf("shard %d: its move to %s from an earlier fault is %s", s, place.Move.Target, place.Move.State)
	}
	r.From, r.To = place.Home, place.Configured
	if place.Home == place.Configured {
		n := t.Databases()
		r.To = (place.Home + 1 + int(f.Move.Pick/uint64(len(shards))%uint64(n-1))) % n
	}
	began := place.Move.Epoch
	to := []string{"--shard", strconv.Itoa(s), "--to", strconv.Itoa(r.To)}
	r.Runs = 1
	toOK, killed, lastErr := runMover(ctx, t, f, &r, to)
	abort := killed && f.Move.Abort
	failed := 0
	if lastErr != nil {
		failed++
	}
	for {
		if place, err = placeOf(ctx, t, s); err != nil {
			return r, err
		}
		mv := place.Move
		if mv.Epoch > began && (mv.State == shard.MoveCleaned || mv.State == shard.MoveAborted) {
			r.State, r.Pause = mv.State, mv.Pause
			return r, nil
		}
		if r.Runs == moverRunsMax {
			return r, fmt.Errorf("shard %d: its move to database %d is %s after %d runs of the mover; the last: %v", s, r.To, mv.State, r.Runs, lastErr)
		}
		args := to
		switch {
		case mv.Epoch == began:
			// Not begun: the first run failed before it recorded the move.
		case mv.State == shard.MoveCopying && (abort || failed >= carryOnTriesMax):
			args = []string{"--shard", strconv.Itoa(s), "--abort"}
		case mv.State == shard.MoveVerified:
			args = []string{"--shard", strconv.Itoa(s), "--cleanup"}
		case mv.State == shard.MoveDone && toOK:
			// A run that exits 0 leaving the move done could not verify
			// the copy: the run that cut over was killed before.
			r.Unverified = true
			args = []string{"--shard", strconv.Itoa(s), "--cleanup", "--unverified"}
		}
		r.Runs++
		ok, _, err := runMover(ctx, t, Fault{}, &r, args)
		if slices.Equal(args, to) {
			toOK = ok
		}
		if lastErr = err; err == nil {
			failed = 0
			continue
		}
		failed++
		time.Sleep(time.Second) // an interrupted run ends at placeOf
	}
}

// placeOf reads where shard s is, trying again for a minute while a
// database cannot be read (a fault's recovery).
func placeOf(ctx context.Context, t Target, s int) (ShardPlace, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := t.ShardPlace(ctx, s)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return p, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runMover runs the mover with args until it exits, injecting f's
// planned fault (if f is one) once the mover printed its step. It
// returns whether the mover exited 0, and whether the fault was its
// kill; err says why it did not exit 0.
func runMover(ctx context.Context, t Target, f Fault, r *MoveResult, args []string) (ok, killed bool, err error) {
	cmd := t.MoverCommand(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false, false, err
	}
	if err := cmd.Start(); err != nil {
		return false, false, err
	}
	// A mover that hangs is killed (its next run carries on), and so is
	// one that outlives the run.
	runCtx, cancel := context.WithTimeout(ctx, moverRunMax)
	defer cancel()
	defer context.AfterFunc(runCtx, func() { _ = cmd.Process.Kill() })()
	lines := bufio.NewScanner(stdout)
	var meetErr error
	for lines.Scan() {
		if f.Move == nil || r.Met || lines.Text() != fmt.Sprintf("shard %d: %s", r.Shard, f.Move.After) {
			continue
		}
		r.Met = true
		if f.Move.Meet == MoverKill {
			_ = cmd.Process.Kill()
			killed = true
			continue
		}
		meetErr = meet(ctx, t, f, r)
	}
	err = cmd.Wait()
	if meetErr != nil {
		return false, killed, fmt.Errorf("shard %d: %s met by the move: %w", r.Shard, f.Move.Meet, meetErr)
	}
	if ctx.Err() != nil {
		return false, killed, ctx.Err()
	}
	if runCtx.Err() != nil {
		return false, killed, fmt.Errorf("coffer shard move %s: killed after %s: %w", strings.Join(args, " "), moverRunMax, runCtx.Err())
	}
	if err != nil && !killed {
		err = fmt.Errorf("coffer shard move %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return err == nil, killed, err
}

// meet injects the fault a move meets, on its source's or target's
// database or on an instance, and returns once it is healed and the
// database or instance serves again.
func meet(ctx context.Context, t Target, f Fault, r *MoveResult) error {
	m := Fault{Kind: f.Move.Meet, Index: r.From, Length: f.Length}
	switch {
	case m.Kind == CofferKill:
		m.Index = f.Move.Instance
	case f.Move.OnTarget:
		m.Index = r.To
	}
	if failover(m.Kind) {
		return t.Failover(ctx, m.Index, m.Kind, m.Length)
	}
	_, err := apply(ctx, t, m)
	if m.Kind == CofferKill {
		t.WaitInstance(ctx, m.Index)
	} else {
		t.WaitDatabase(ctx, m.Index)
	}
	return err
}

// movesSummary is the moves' part of the report: the pauses, then one
// line per move.
func movesSummary(moves []MoveResult) string {
	if len(moves) == 0 {
		return ""
	}
	var b strings.Builder
	var all, calm []time.Duration
	aborted, unverified := 0, 0
	for _, m := range moves {
		switch {
		case m.State == shard.MoveAborted:
			aborted++
		case m.State == shard.MoveCleaned:
			all = append(all, m.Pause)
			if !m.pauseMet() {
				calm = append(calm, m.Pause)
			}
		}
		if m.Unverified {
			unverified++
		}
	}
	fmt.Fprintf(&b, "shard moves: %d moved and cleaned up (%d unverified: the mover that cut over was killed before it verified), %d aborted\n", len(all), unverified, aborted)
	fmt.Fprintf(&b, "  the shard's writes paused: %s; where the cut-over met no fault: %s\n", medianWorst(all), medianWorst(calm))
	for _, m := range moves {
		met := "nothing"
		if m.Plan.Meet != "" {
			where := "the source"
			switch {
			case m.Plan.Meet == MoverKill:
				where = "the mover"
			case m.Plan.Meet == CofferKill:
				where = "instance " + strconv.Itoa(m.Plan.Instance)
			case m.Plan.OnTarget:
				where = "the target"
			}
			met = fmt.Sprintf("%s on %s after %s", m.Plan.Meet, where, m.Plan.After)
			if !m.Met {
				met += " (not reached)"
			}
		}
		fmt.Fprintf(&b, "  shard %d database %d → %d at %s: %s, paused %s, %d mover runs; met %s\n",
			m.Shard, m.From, m.To, m.At.Round(time.Second), m.State, m.Pause, m.Runs, met)
	}
	return b.String()
}

// medianWorst reads ds (sorted in place) as "median M, worst W (moves: N)".
func medianWorst(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("median %s, worst %s (moves: %d)", ds[len(ds)/2], ds[len(ds)-1], len(ds))
}
