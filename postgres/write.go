package postgres

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/cofferhq/coffer"
)

// request is one write waiting for its batch (committer): its player's
// scope and the write. The batch sets plan, what the domain decided, or
// err, when the batch could not run it.
type request struct {
	ctx   context.Context
	scope coffer.Scope
	write coffer.Write

	// plan is the write's answer once its batch committed or refused it;
	// err once it failed. Either is set once: a later part of a split
	// batch that fails (a panic) must not take back what an earlier part
	// committed.
	plan *coffer.Plan
	err  error
	// unsent is the error of a job the write could not be queued in, or
	// whose answer its caller stopped waiting for: set by the caller's
	// goroutine (route) only, and answered before plan or err, which a
	// committer may still set.
	unsent error
}

// planOn asks the player's plan for the write. A panic in the plan (a
// bug) becomes an error that splits the batch (writesFailure), its stack
// in the error for the log (a client is told internal only): the writes
// around it are planned again without it, and the one that panics, alone,
// is answered internal. The player may be half changed by then; the
// attempt is dropped, and its parts load their state again.
func (r *request) planOn(p *coffer.Player) (plan coffer.Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &writesFailure{&coffer.Error{Code: coffer.CodeInternal, Message: "planning the write failed",
				Err: fmt.Errorf("panic: %v\n%s", v, debug.Stack())}}
		}
	}()
	return r.write.Plan(p), nil
}

// answer is the write's answer to its caller.
func (r *request) answer() (coffer.Trx, bool, error) {
	if r.unsent != nil {
		return coffer.Trx{}, false, r.unsent
	}
	if r.err != nil {
		return coffer.Trx{}, false, r.err
	}
	return r.plan.Trx, r.plan.Replay, r.plan.Err
}

// failWrites answers err to the writes not answered yet.
func failWrites(reqs []*request, err error) {
	for _, r := range reqs {
		if unanswered(r) {
			r.err = err
		}
	}
}

// unanswered tells that r has no answer yet: its batch failed, or left it
// unplanned when its time ran short (Store.attempt).
func unanswered(r *request) bool { return r.plan == nil && r.err == nil }

// write sends writes (of one database's shards, as the map placed them)
// as one job, in order, and waits for their answers; the store's Timeout
// bounds the wait. Writes whose shard moved meanwhile follow it to its
// new home (route). Each write gets its answer, or the job's error:
// shard_unavailable at once while the database is known to be down,
// overloaded.
func (s *Store) write(ctx context.Context, reqs []*request) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	for _, r := range reqs {
		r.ctx = ctx
	}
	s.route(ctx, reqs, hopsMax)
}

// route queues writes of shards that were on one database as one job on
// the database that serves each now (home), and queues again, up to hops
// times, those whose batch met their shard's fence (errMoved): in order,
// so that a player's writes keep theirs.
func (s *Store) route(ctx context.Context, reqs []*request, hops int) {
	for len(reqs) > 0 {
		db, err := s.home(ctx, s.shardOf(reqs[0].scope.PlayerID), s.router.Writable)
		job, rest := reqs, []*request(nil)
		if err == nil {
			job, rest = s.sameDatabase(db, reqs)
			err = s.writers[db].submit(ctx, job)
		}
		if err != nil {
			for _, r := range job {
				r.unsent = err
			}
			reqs = rest
			continue
		}
		var moved []*request
		for _, r := range job {
			if r.err == errMoved && hops > 0 {
				r.err = nil
				moved = append(moved, r)
			}
		}
		s.route(ctx, moved, hops-1)
		reqs = rest
	}
}

// sameDatabase parts writes into the first and those that database db
// serves now, and the others, each in order.
func (s *Store) sameDatabase(db int, reqs []*request) (on, others []*request) {
	on = reqs[:1:1]
	for _, r := range reqs[1:] {
		if s.router.DatabaseIndex(s.shardOf(r.scope.PlayerID)) == db {
			on = append(on, r)
		} else {
			others = append(others, r)
		}
	}
	return on, others
}

// shardOf is the shard of player.
func (s *Store) shardOf(player coffer.PlayerID) coffer.ShardID { return s.router.Map().ShardOf(player) }

// writeOne sends one write and answers it.
func (s *Store) writeOne(ctx context.Context, r *request) (coffer.Trx, bool, error) {
	s.write(ctx, []*request{r})
	return r.answer()
}

// Change applies a one-phase change or begins a hold, in the next batch
// of its database (settle). A change that credits a purchase first
// claims its order (claimPurchases: one round trip more per database
// holding a claim).
func (s *Store) Change(ctx context.Context, req coffer.ChangeRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateChange(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	// One Timeout bounds the claims and the write together.
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.claimPurchases(ctx, v); err != nil {
		return coffer.Trx{}, false, err
	}
	return s.writeOne(ctx, &request{scope: req.Scope, write: v})
}

// Exchange consumes From in spend order and grants To at the rate
// (coffer.Player.Exchange).
func (s *Store) Exchange(ctx context.Context, req coffer.ExchangeRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateExchange(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	return s.writeOne(ctx, &request{scope: req.Scope, write: v})
}

// Refund takes a store order credited to the player back
// (coffer.Player.Refund). It touches the player's database only: the
// order's credit, its lots and its refund, if any, are the player's rows,
// read under the player's lock (docs/adr/0014-refunds.md).
func (s *Store) Refund(ctx context.Context, req coffer.RefundRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateRefund(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	return s.writeOne(ctx, &request{scope: req.Scope, write: v})
}

// Commit applies a pending hold's grants (coffer.Player.Commit).
func (s *Store) Commit(ctx context.Context, req coffer.FinishRequest) (coffer.Trx, bool, error) {
	return s.finish(ctx, req, coffer.FinishCommit)
}

// Rollback returns a pending hold's reservations to their lots
// (coffer.Player.Rollback).
func (s *Store) Rollback(ctx context.Context, req coffer.FinishRequest) (coffer.Trx, bool, error) {
	return s.finish(ctx, req, coffer.FinishRollback)
}

// finish ends the hold of req as step says, recording req.By.
func (s *Store) finish(ctx context.Context, req coffer.FinishRequest, step coffer.FinishStep) (coffer.Trx, bool, error) {
	if err := req.Validate(); err != nil {
		return coffer.Trx{}, false, err
	}
	return s.writeOne(ctx, &request{scope: req.Scope, write: coffer.Finish{Key: req.Key(), Step: step, By: req.By}})
}
