package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/bench"
	"github.com/cofferhq/coffer/migrate"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shard/move"
)

// parseMoves reads --move: a list of shard ids, such as "3" or "3,11".
func parseMoves(list string) ([]coffer.ShardID, error) {
	var ids []coffer.ShardID
	for _, part := range strings.Split(list, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%q is not a list of shard ids, such as 3 or 3,11", list)
		}
		ids = append(ids, coffer.ShardID(id))
	}
	return ids, nil
}

// checkMoves refuses --move where its moves cannot run or its figures
// would not mean what they say.
func (f *benchFlags) checkMoves() error {
	if len(f.Moves) == 0 {
		return nil
	}
	switch {
	case !f.self:
		return errors.New("--move needs --self")
	case f.baseline != "":
		// The baseline's tables are named as a shard's (bench_trx_N):
		// they would move with it.
		return errors.New("--move measures coffer alone: not with --baseline")
	case f.decay > 0:
		return errors.New("--move times its moves by --duration: not with --decay")
	case f.Workload == bench.Batch:
		return errors.New("--move tells the ops of the moved shard from the others' by their player: not with --workload batch, whose calls write many players")
	case slices.Contains(f.servers, 1):
		return errors.New("--move needs two databases at least: not with --databases 1")
	}
	for _, id := range f.Moves {
		if int(id) >= f.shards {
			return fmt.Errorf("--move: shard %d: the stack's shards are 0 … %d (--shards)", id, f.shards-1)
		}
	}
	return nil
}

// stackMover moves a --self stack's shards for --move with coffer shard
// move's code (move.Mover), in the bench's process.
type stackMover struct{ mover *move.Mover }

// newStackMover is the mover of the stack whose config is cfg, whose
// map (as configured) is m; router is the bench's, whose map the moves
// update. The mover's progress lines go to out.
func newStackMover(router *shard.Router, cfg *Config, m *shard.Map, out io.Writer) (*stackMover, error) {
	engine, err := migrate.SchemaEngine(m, cfg.Env)
	if err != nil {
		return nil, err
	}
	return &stackMover{&move.Mover{Router: router, Engine: engine, Out: out, ConnectTimeout: cfg.Pool.ConnectTimeout}}, nil
}

// Move moves shard id to database to as coffer shard move does, then
// drops the old copy as --cleanup does: the shard may move again, back.
func (s *stackMover) Move(ctx context.Context, id coffer.ShardID, to int) (bench.Moved, error) {
	mp := s.mover.Router.Map()
	target := mp.Databases()[to]
	mv := bench.Moved{From: mp.DatabaseOf(id).Config.Name, To: target.Config.Name, Began: time.Now()}
	s.mover.After = func(step string) error {
		switch step {
		case move.StepSynced:
			mv.Synced = time.Now()
		case move.StepDone:
			mv.Done = time.Now()
		}
		return nil
	}
	rep, err := s.mover.Move(ctx, id, target.Name())
	if err == nil && rep.Move.State != shard.MoveVerified {
		err = fmt.Errorf("the move stopped at %s", rep.Move.State)
	}
	if err == nil {
		err = s.mover.Cleanup(ctx, id, false)
	}
	mv.Pause = rep.Move.Pause
	return mv, err
}
