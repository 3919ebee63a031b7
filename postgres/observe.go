package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Observer is told what the committers do, for an operator's metrics:
// how many writes or reads each batch carries, how long it takes, and how
// each attempt of a batch of writes ends. It is called on the committers'
// goroutines: it must be quick and safe for concurrent use.
type Observer interface {
	// Batch: a committer of database ran a batch of kind ("writes" or
	// "reads") of items writes or reads, in took, its retries and
	// splits included.
	Batch(database, kind string, items int, took time.Duration)
	// Attempt: an attempt of a batch of writes on database ended so (one
	// of the Attempt… outcomes).
	Attempt(database, outcome string)
	// Fenced: items of kind ("writes" or "reads") met the fence of a
	// shard that moved away from database, and were sent to its new home.
	Fenced(database, kind string, items int)
}

// How an attempt of a batch of writes ends (Store.settle).
const (
	// AttemptCommitted: its COMMIT was applied.
	AttemptCommitted = "committed"
	// AttemptRetried: it lost a race (a deadlock, a serialization
	// failure, a key another instance inserted) or its connection, or
	// its COMMIT was cut off: the batch is tried again.
	AttemptRetried = "retried"
	// AttemptCareful: it read at its snapshot, without the locks, and
	// met another transaction (a player changed since, or locked), or a
	// write sent again, whose key it did not read, or it refused a
	// write: the batch runs again at once, careful
	// (docs/adr/0026-batch-snapshot.md), not as one of its retries.
	AttemptCareful = "careful"
	// AttemptSplit: a player's lock timed out, or the database refused
	// a value: the batch runs again in parts, by player, then by write.
	AttemptSplit = "split"
	// AttemptCut: it failed, and an earlier attempt's COMMIT was cut off
	// with an outcome no attempt could read (the retries ran out, the
	// database went down, a failure not retried): each write answers
	// shard_unavailable, and a retry with the same key tells whether it
	// was applied.
	AttemptCut = "cut"
	// AttemptFailed: each write answers the error (shard_unavailable
	// once the retries ran out, internal).
	AttemptFailed = "failed"
	// AttemptNotRun: a try not made, nothing of the batch having been
	// applied: the database is known down, or lacks its required
	// synchronous standby; each write answers shard_unavailable.
	AttemptNotRun = "not_run"
	// AttemptFenced: it met the fence of a shard that moved to another
	// database (coffer shard move): that shard's writes go to its new
	// home, the batch is tried again without them.
	AttemptFenced = "fenced"
)

// observe tells the Observer how an attempt of a batch of writes on
// database db ended.
func (s *Store) observe(db int, outcome string) {
	s.opts.Observer.Attempt(s.writers[db].database, outcome)
}

// Queues calls yield with the jobs (a call's writes or its read) waiting
// now for each database's committers, by kind: what a full queue would
// refuse (overloaded) is near.
func (s *Store) Queues(yield func(database, kind string, jobs int)) {
	for _, c := range s.writers {
		yield(c.database, c.kind, len(c.queue))
	}
	for _, c := range s.readers {
		yield(c.database, c.kind, len(c.queue))
	}
}

// BatchPools calls yield with each database's pool of the batches'
// connections (the committers' and readers', apart from the router's
// pool), as metrics name the database.
func (s *Store) BatchPools(yield func(database string, pool *pgxpool.Stat)) {
	for i := range s.batchPools {
		yield(s.writers[i].database, s.BatchPoolStat(i))
	}
}

// BatchPoolStat is the state of database db's pool of the batches' connections.
func (s *Store) BatchPoolStat(db int) *pgxpool.Stat { return s.batchPools[db].Stat() }

// unobserved is the Observer of a store given none.
type unobserved struct{}

func (unobserved) Batch(string, string, int, time.Duration) {}
func (unobserved) Attempt(string, string)                   {}
func (unobserved) Fenced(string, string, int)               {}
