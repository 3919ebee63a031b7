package postgres

import (
	"context"
	"errors"
	"math/rand/v2"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5/pgconn"
)

// settle runs the writes of one database as one batch and answers each
// (see docs/architecture.md): one PostgreSQL transaction, two round trips
// (the players' state; the rows and COMMIT), whatever the number
// of writes. A write refused by its plan (insufficient_funds, a conflict)
// is answered so and fails no other. A batch that fails as a whole is run
// again, up to RetriesMax times, when it lost a race or its connection;
// split by player (and a player's writes one by one) when the failure may
// come from some of its writes only; so that each write gets the answer it
// would have got alone. After a COMMIT whose answer was lost, the next
// attempt reads whether it was applied, from m (batch_mark). An attempt
// takes the players' locks as it reads, and reads the writes' own keys,
// only when careful (load): one that fails on a key that has a trx (a
// write sent again), or on a player another transaction changed since
// its snapshot (raced), is run again careful, as are the committer's next
// carefulBatches (k), and does not count as a retry; so is one that
// refuses a write (errRefusedAtSnapshot), alone. Each attempt's
// ending is told to the Observer. A batch that met the fence
// of a shard that moved away answers errMoved to that shard's writes
// (Store.route sends them to its new home) and runs again without them.
// The writes an attempt left unplanned when its time ran short (attempt)
// are left unanswered: the committer runs them in a later batch. ctx carries the batch's span, if
// traced, to its round trips; it has no deadline: each attempt has its own.
func (s *Store) settle(ctx context.Context, db int, m *mark, k *keyReads, reqs []*request) {
	var a, unknown *attempt
	careful := k.left > 0
	if careful {
		k.left--
	}
	for try := 0; ; try++ {
		// Before every attempt but one that reads whether a cut COMMIT
		// was applied (its answers are that attempt's, write for write).
		if unknown == nil {
			if reqs = live(reqs); len(reqs) == 0 {
				return
			}
		}
		if err := s.router.Writable(db); err != nil {
			a = &attempt{err: &coffer.Error{Code: coffer.CodeUnavailable, Message: "the player's database is unavailable", Err: err}}
			if unknown == nil {
				s.observe(db, AttemptNotRun)
				failWrites(reqs, a.err)
				return
			}
			break
		}
		a = s.attempt(ctx, db, m, reqs, unknown, careful)
		if again, next := rerunCareful(a.err); again && !careful && unknown == nil {
			careful = true
			if next {
				k.left = carefulBatches
			}
			s.observe(db, AttemptCareful)
			try-- // not one of the retries
			continue
		}
		if a.err == nil {
			for i := range a.plans {
				reqs[i].plan = &a.plans[i]
			}
			s.observe(db, AttemptCommitted)
			return
		}
		if unknown == nil && fenced(a.err) {
			stay := leftBehind(s, db, "writes", reqs, func(r *request) coffer.ShardID { return s.shardOf(r.scope.PlayerID) },
				func(r *request) { r.err = errMoved })
			if len(stay) < len(reqs) {
				s.observe(db, AttemptFenced)
				if reqs = stay; len(reqs) == 0 {
					return
				}
				continue
			}
		}
		switch {
		case a.uncertain:
			unknown = a
		case a.unapplied:
			unknown = nil // a failure of its own may be split again
		}
		if _, connFailed := classify(0, a.err); try == s.opts.RetriesMax || !connFailed && !a.uncertain && !retryable(a.err) {
			break
		}
		s.observe(db, AttemptRetried)
	}
	s.giveUp(ctx, db, m, k, reqs, a, unknown)
}

// rerunCareful tells whether an attempt that read at its snapshot failed
// for want of the locks and the keys a careful one takes: a write sent
// again, its key unread; a player changed since the snapshot; a write
// refused (errRefusedAtSnapshot). The batch then runs again at once,
// careful, and so do its committer's next batches (next) but after a
// refusal, which tells nothing of other instances.
func rerunCareful(err error) (again, next bool) {
	refused := errors.Is(err, errRefusedAtSnapshot)
	return refused || keyStored(err) || raced(err), !refused
}

// giveUp answers the writes of a batch whose last attempt, a, failed
// and is not tried again: "cut off" if unknown, an earlier attempt's
// COMMIT, may have been applied; else the failure's error to each, or,
// where it may come from some writes only, the batch settled again in
// parts (split).
func (s *Store) giveUp(ctx context.Context, db int, m *mark, k *keyReads, reqs []*request, a, unknown *attempt) {
	s.failed(db, a.err)
	if unknown != nil {
		s.observe(db, AttemptCut)
		failWrites(reqs, &coffer.Error{Code: coffer.CodeUnavailable,
			Message: "the batch's commit was cut off and its outcome could not be read; retry with the same key", Err: a.err})
		return
	}
	parts := split(reqs, a.err)
	if parts == nil {
		s.observe(db, AttemptFailed)
		for _, r := range reqs {
			r.err, _ = classify(s.shardOf(r.scope.PlayerID), a.err)
		}
		return
	}
	s.observe(db, AttemptSplit)
	for _, part := range parts {
		s.settle(ctx, db, m, k, part)
	}
}

// mark is a committer's row in batch_mark (the baseline's V0001): each batch
// it commits sets the row's token in its own transaction, so that the
// next attempt of a batch whose COMMIT's answer was lost reads whether
// that COMMIT was applied. A committer runs one batch at a time, a
// batch's attempts one after the other, and its tokens only grow: the row
// holds the greatest token of its committer's COMMITs applied.
type mark struct {
	committer, token int64
}

// keyReads is how many more batches of a committer read the writes' own
// keys (settle's careful attempts): after a batch found one stored, the
// next carefulBatches do, so that a client that sends its writes again
// and again costs its database's batches one failed attempt in
// carefulBatches at most, not one in each.
type keyReads struct{ left int }

const carefulBatches = 16

// settler is what runs one committer goroutine's batches of writes, with
// a mark of its own.
func (s *Store) settler() func(ctx context.Context, db int, reqs []*request) {
	m, k := &mark{committer: rand.Int64()}, &keyReads{}
	return func(ctx context.Context, db int, reqs []*request) { s.settle(ctx, db, m, k, reqs) }
}

// live answers the writes whose caller is gone and returns the others:
// a batch does not run what nobody waits for.
func live(reqs []*request) []*request {
	out := reqs[:0:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.err = &coffer.Error{Code: coffer.CodeUnavailable, Message: "the call ended before its batch ran", Err: err}
			continue
		}
		out = append(out, r)
	}
	return out
}

// split parts writes that failed together with err into batches to run
// one after the other: one per player, or, for one player, one per write.
// It returns nil when parting cannot help: err is not one that some
// writes only may cause (isolable), or a player's lock timed out (its
// writes all wait for it).
func split(reqs []*request, err error) [][]*request {
	if len(reqs) < 2 || !isolable(err) {
		return nil
	}
	players, of := byPlayer(reqs)
	parts := make([][]*request, len(players))
	for i, r := range reqs {
		parts[of[i]] = append(parts[of[i]], r)
	}
	if len(parts) > 1 {
		return parts
	}
	if lockTimedOut(err) {
		return nil
	}
	parts = parts[:0]
	for _, r := range reqs {
		parts = append(parts, []*request{r})
	}
	return parts
}

type playerKey struct {
	ns coffer.Namespace
	id coffer.PlayerID
}

// byPlayer groups writes by player: the players in the order they first
// appear, and each write's player (of, an index into players).
func byPlayer(reqs []*request) (players []playerKey, of []int) {
	at := map[playerKey]int{}
	of = make([]int, len(reqs))
	for i, r := range reqs {
		k := playerKey{r.scope.Namespace, r.scope.PlayerID}
		j, ok := at[k]
		if !ok {
			j = len(players)
			at[k] = j
			players = append(players, k)
		}
		of[i] = j
	}
	return players, of
}

// writesFailure is an attempt's error that comes from some of its
// writes, not from the batch: a plan that panicked (request.planOn), or
// the damaged state (a lot that does not add up, a trx that does not
// decode) of a player with several writes in the batch, which, alone,
// each load only what they read. isolable splits the batch on it, so
// that each write answers as it would alone.
type writesFailure struct{ err error }

func (f *writesFailure) Error() string { return f.err.Error() }
func (f *writesFailure) Unwrap() error { return f.err }

// uncertain tells whether err, from the round trip that ends with COMMIT,
// leaves the outcome unknown: the connection failed or the call timed out
// (the COMMIT may have run), rather than the database refusing a
// statement (the transaction is then aborted, and nothing applied) or
// the error coming before anything was sent (a time that ran out before
// the round trip began: the COMMIT was never sent).
func uncertain(err error) bool {
	if errors.As(err, new(*commitUnproven)) {
		return true
	}
	if pgconn.SafeToRetry(err) {
		return false
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		class := pg.Code[:2]
		return class == classConnectionException || class == classOperatorIntervention
	}
	return true
}
