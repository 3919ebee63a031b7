// Package move moves a shard to another database while coffer serves it
// (coffer shard move; docs/adr/0022-shard-moves.md): PostgreSQL's logical
// replication copies the shard's tables, a cut-over fences the old copy
// and opens the new one, and each step is recorded on both databases
// (shard_move), so that every coffer instance routes by it and a mover
// stopped at any step carries on when run again.
package move

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
)

// Mover moves shards between the databases of a config. A Mover is used
// by one goroutine at a time; two movers of one shard exclude each other
// (the second is refused).
type Mover struct {
	// Router reaches every database of the config; the mover reads the
	// shards' moves through it (shard.Router.Refresh).
	Router *shard.Router
	// Engine is coffer's schema (migrate.SchemaEngine), which creates the
	// shard's tables on the target.
	Engine *migrate.Engine
	// Out receives one progress line per step; nil prints nothing.
	Out io.Writer
	// After, if set, is called after each step with its name (Step…);
	// an error stops the mover there, as a kill would: the tests stop it
	// so and run it again.
	After func(step string) error
	// ConnectTimeout bounds each connection; zero means 10 seconds.
	ConnectTimeout time.Duration
	// LockTimeout bounds the cut-over's wait for the shard's tables,
	// during which the shard's writes wait too; zero means 1 second. A
	// cut-over that cannot take them is tried again, up to cutTriesMax
	// times.
	LockTimeout time.Duration
	// CatchUpTimeout bounds each wait for the target to apply what the
	// source wrote: before the cut-over, once the tables are copied, and
	// after it, during the pause; zero means 1 minute. A run that waited
	// so long stops; run again, it carries on.
	CatchUpTimeout time.Duration
}

// The steps of a move, in order, as After is told them.
const (
	StepBegun      = "begun"      // recorded on both databases
	StepPublished  = "published"  // source: publication and replication slot
	StepPrepared   = "prepared"   // target: the shard's tables, fenced
	StepSubscribed = "subscribed" // target: subscription copying
	StepSynced     = "synced"     // every table copied, the lag small
	StepCut        = "cut"        // source: the old copy fenced
	StepDone       = "done"       // target: takes the shard's writes
	StepVerified   = "verified"   // the copy checked against the old one
)

// Report is what a run of the mover did, or found done.
type Report struct {
	Move shard.Move
	// Tables are the checksums of the copy, when this run verified it.
	Tables []Checksum
	// Unverified tells that the move cut over in an earlier run that
	// stopped before it verified the copy: the target took writes since,
	// so its copy can no longer be compared with the old one.
	Unverified bool
}

// Move moves shard id to the database named to (shard.Map.Lookup), or
// carries on with the move of id to it that an earlier run began. It
// refuses, changing nothing: a target not in the config, one without
// coffer's schema or at another version, one that holds the shard
// already, a shard moving elsewhere, or whose last move is not cleaned
// up, another mover of the shard. It returns once the target serves the
// shard and the copy is verified, or with the step that failed; running
// it again carries on from there.
func (m *Mover) Move(ctx context.Context, id coffer.ShardID, to string) (Report, error) {
	mp, err := m.refresh(ctx, id)
	if err != nil {
		return Report{}, err
	}
	target, err := mp.Lookup(to)
	if err != nil {
		return Report{}, err
	}
	last, moved := mp.Move(id)
	if moved && (last.State.InProgress() || last.State == shard.MoveDone && last.Target == target.Name()) {
		if last.Target != target.Name() {
			return Report{}, fmt.Errorf("shard %d is being moved to %s: run again with --to %s to finish that move, or --abort it", id, last.Target, last.Target)
		}
		s, err := m.resume(ctx, last)
		if err != nil {
			return Report{}, err
		}
		defer s.close()
		return s.run(ctx)
	}
	next, err := m.plan(mp, id, target, last)
	if err != nil {
		return Report{}, err
	}
	s, err := m.connect(ctx, next, last)
	if err != nil {
		return Report{}, err
	}
	defer s.close()
	if err := s.begin(ctx); err != nil {
		return Report{}, err
	}
	return s.run(ctx)
}

// plan is the next move of shard id, to target, after last (its latest,
// if any), or why there is none.
func (m *Mover) plan(mp *shard.Map, id coffer.ShardID, target shard.Database, last shard.Move) (shard.Move, error) {
	if last.State == shard.MoveDone || last.State == shard.MoveVerified {
		return shard.Move{}, fmt.Errorf("shard %d's last move (to %s) still keeps the old copy on %s: run coffer shard move --shard %d --cleanup first", id, last.Target, last.Source, id)
	}
	home := mp.DatabaseIndex(id)
	if home < 0 {
		return shard.Move{}, mp.Unplaced(id)
	}
	if home == target.Index {
		return shard.Move{}, fmt.Errorf("shard %d is on %s already", id, target.Name())
	}
	return shard.Move{Shard: id, Epoch: last.Epoch + 1, Source: mp.Databases()[home].Name(), Target: target.Name(), State: shard.MoveCopying}, nil
}

// refresh reads every database's moves: a move decides on all of them.
func (m *Mover) refresh(ctx context.Context, id coffer.ShardID) (*shard.Map, error) {
	if err := m.Router.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("a move needs every database of the config: %w", err)
	}
	mp := m.Router.Map()
	if id < 0 || int(id) >= mp.ShardCount() {
		return nil, fmt.Errorf("shard %d: the shards are 0 … %d", id, mp.ShardCount()-1)
	}
	return mp, nil
}

// Abort undoes the move of shard id that has not cut over: the
// subscription, the replication slot, the publication and the target's
// copy are dropped, and the move recorded aborted. A move that cut over
// can only go forward (Move).
func (m *Mover) Abort(ctx context.Context, id coffer.ShardID) error {
	mp, err := m.refresh(ctx, id)
	if err != nil {
		return err
	}
	last, moved := mp.Move(id)
	switch {
	case !moved || !last.State.InProgress():
		return fmt.Errorf("shard %d is not being moved: nothing to abort", id)
	case last.State != shard.MoveCopying:
		return fmt.Errorf("shard %d's move to %s has cut over: it can only go forward; run coffer shard move --shard %d --to %s to finish it", id, last.Target, id, last.Target)
	}
	s, err := m.resume(ctx, last)
	if err != nil {
		return err
	}
	defer s.close()
	return s.abort(ctx)
}

// Cleanup drops the old copy of shard id, and the publication that
// copied it, once its move is verified (or, with unverified, done).
func (m *Mover) Cleanup(ctx context.Context, id coffer.ShardID, unverified bool) error {
	mp, err := m.refresh(ctx, id)
	if err != nil {
		return err
	}
	last, moved := mp.Move(id)
	switch {
	case !moved || last.State == shard.MoveAborted:
		return fmt.Errorf("shard %d has no move to clean up", id)
	case last.State == shard.MoveCleaned:
		m.progress("shard %d: the old copy on %s was dropped already", id, last.Source)
		return nil
	case last.State.InProgress():
		return fmt.Errorf("shard %d's move to %s is not done: run coffer shard move --shard %d --to %s first", id, last.Target, id, last.Target)
	case last.State == shard.MoveDone && !unverified:
		return fmt.Errorf("shard %d's move is not verified: the old copy on %s is kept; run coffer shard move --shard %d --to %s to verify it, or, if it cannot be (the mover stopped after the cut-over), compare by hand and add --unverified", id, last.Source, id, last.Target)
	}
	s, err := m.resume(ctx, last)
	if err != nil {
		return err
	}
	defer s.close()
	return s.cleanup(ctx)
}

func (m *Mover) progress(format string, args ...any) {
	if m.Out != nil {
		fmt.Fprintf(m.Out, format+"\n", args...)
	}
}

// session is one run on a move: its connections to the two databases,
// each holding the shard's move lock, and the move as recorded.
type session struct {
	m        *Mover
	mv       shard.Move
	src, dst *pgx.Conn
	// tables and sequences are the shard's, as the source named them
	// when the move began.
	tables, sequences []string
	// cutAt is when the cut-over began taking the tables, and cutLSN the
	// source's WAL position after it: what the target must have applied
	// before it takes writes, and what the change feed's relay of the
	// target waits for the source's to pass (shard_arrival).
	cutAt  time.Time
	cutLSN string
	// snapshot is a transaction on the target that sees the copy as the
	// cut-over left it, for verify; nil when this run did not open it.
	snapshot pgx.Tx
}

func (s *session) close() {
	for _, c := range []*pgx.Conn{s.src, s.dst} {
		if c != nil {
			_ = c.Close(context.Background())
		}
	}
	if s.snapshot != nil {
		_ = s.snapshot.Conn().Close(context.Background())
	}
}

// step tells the step done: a progress line, and After.
func (s *session) step(name string) error {
	s.m.progress("shard %d: %s", s.mv.Shard, name)
	if s.m.After != nil {
		return s.m.After(name)
	}
	return nil
}

// run takes the move from its recorded state to verified.
func (s *session) run(ctx context.Context) (Report, error) {
	if s.mv.State == shard.MoveCopying {
		for _, st := range []struct {
			name string
			do   func(context.Context) error
		}{{StepPublished, s.publish}, {StepPrepared, s.prepare}, {StepSubscribed, s.subscribe}, {StepSynced, s.sync}, {StepCut, s.cut}} {
			if err := st.do(ctx); err != nil {
				return Report{Move: s.mv}, fmt.Errorf("shard %d: %s: %w", s.mv.Shard, st.name, err)
			}
			if err := s.step(st.name); err != nil {
				return Report{Move: s.mv}, err
			}
		}
	}
	if s.mv.State == shard.MoveCut {
		if err := s.open(ctx); err != nil {
			return Report{Move: s.mv}, fmt.Errorf("shard %d: %s: %w", s.mv.Shard, StepDone, err)
		}
		s.m.progress("shard %d: writes paused %s (tables locked on %s → writable on %s)", s.mv.Shard, s.mv.Pause, s.mv.Source, s.mv.Target)
		if err := s.step(StepDone); err != nil {
			return Report{Move: s.mv}, err
		}
	}
	if s.mv.State != shard.MoveDone {
		return Report{Move: s.mv}, nil
	}
	if err := s.unsubscribe(ctx); err != nil {
		return Report{Move: s.mv}, fmt.Errorf("shard %d: drop the subscription: %w", s.mv.Shard, err)
	}
	if s.snapshot == nil {
		s.m.progress("shard %d: cut over in an earlier run, which stopped before it verified the copy; the old copy on %s is kept", s.mv.Shard, s.mv.Source)
		return Report{Move: s.mv, Unverified: true}, nil
	}
	sums, err := s.verify(ctx)
	if err != nil {
		return Report{Move: s.mv, Tables: sums}, fmt.Errorf("shard %d: verify: %w", s.mv.Shard, err)
	}
	return Report{Move: s.mv, Tables: sums}, s.step(StepVerified)
}
