package postgres

import (
	"context"
	"slices"
	"sync"

	"github.com/cofferhq/coffer"
)

// committer gathers the calls bound for one database into batches, which
// the calls run themselves. A call queues its job, then waits for its
// answer or for one of Committers runners, whichever comes first. A call
// that gets a runner leads: it takes the jobs at the head of the queue
// while they fit in BatchSizeMax, runs them as one batch on its own
// goroutine, answers them and hands the runner back, to the next call
// waiting. There is no timer: an idle database runs each call at once on
// the caller's goroutine, with no goroutine to wake on the way in or out;
// a busy one runs the calls that queued while its runners were busy in one
// go. Items are the writes (*request) or the balance reads (*readRequest)
// of a job.
type committer[R any] struct {
	s    *Store
	db   int
	what string
	// runners run one batch each and answer every item of it (a write
	// runner owns a mark); fail answers the items of a job that cannot run
	// (the store is closed).
	runners chan func(db int, items []R)
	fail    func(items []R, err error)

	mu     sync.Mutex
	queue  []*job[R]
	closed bool
}

// job is the items of one call (one write or read, or a batch call's
// writes on one database): they go into one batch, in order. taken (under
// the committer's mu) tells a leader took it into a batch.
type job[R any] struct {
	items []R
	done  chan struct{}
	taken bool
}

func newCommitter[R any](s *Store, db int, what string, runner func() func(int, []R), fail func([]R, error)) *committer[R] {
	c := &committer[R]{s: s, db: db, what: what, runners: make(chan func(int, []R), s.opts.Committers), fail: fail}
	for range s.opts.Committers {
		c.runners <- runner()
	}
	return c
}

// submit queues items as one job and waits until a batch answered them,
// leading batches while a runner is free and the job still waits, or
// until ctx ends. Errors: overloaded, at once, when the queue is full;
// shard_unavailable when ctx ends first or the store is closed (the items
// may still be applied if a batch took them: a retry with the same key
// tells).
func (c *committer[R]) submit(ctx context.Context, items []R) error {
	j := &job[R]{items: items, done: make(chan struct{})}
	if err := c.enqueue(j); err != nil {
		return err
	}
	for {
		select {
		case <-j.done:
			return nil
		case run := <-c.runners:
			if jobs := c.take(j); jobs != nil {
				c.runSafely(run, jobs)
			}
			c.runners <- run
			if c.taken(j) {
				select {
				case <-j.done:
					return nil
				case <-ctx.Done():
					return ended(ctx)
				}
			}
		case <-ctx.Done():
			c.withdraw(j)
			return ended(ctx)
		}
	}
}

func ended(ctx context.Context) error {
	return &coffer.Error{Code: coffer.CodeUnavailable, Message: "the call ended before its batch was answered; retry with the same key", Err: ctx.Err()}
}

// enqueue adds j at the tail of the queue, unless the queue is full or
// the store closed.
func (c *committer[R]) enqueue(j *job[R]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return coffer.Errorf(coffer.CodeUnavailable, "the store is closed")
	}
	if len(c.queue) >= c.s.opts.QueueMax {
		return coffer.Errorf(coffer.CodeOverloaded, "%d calls' %s wait for database %s, the most it queues; retry after Retry-After",
			c.s.opts.QueueMax, c.what, c.s.router.Map().Databases()[c.db].Name())
	}
	c.queue = append(c.queue, j)
	return nil
}

// take removes the next batch's jobs from the head of the queue: the first
// whatever its size, then those behind it while the batch stays within
// BatchSizeMax. It returns nil when mine is no longer queued: a leader that
// took it runs it, and mine need not lead.
func (c *committer[R]) take(mine *job[R]) []*job[R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if mine.taken {
		return nil
	}
	n, size := 1, len(c.queue[0].items)
	for n < len(c.queue) && size+len(c.queue[n].items) <= c.s.opts.BatchSizeMax {
		size += len(c.queue[n].items)
		n++
	}
	jobs := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	for _, j := range jobs {
		j.taken = true
	}
	return jobs
}

func (c *committer[R]) taken(j *job[R]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return j.taken
}

// withdraw removes j from the queue if no batch took it yet: a call that
// ended is not run.
func (c *committer[R]) withdraw(j *job[R]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.queue, j); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
}

// runSafely runs the jobs as one batch and answers them; a panic (a bug)
// answers their items internal instead of killing the process with every
// call in flight.
func (c *committer[R]) runSafely(run func(int, []R), jobs []*job[R]) {
	var items []R
	for _, j := range jobs {
		items = append(items, j.items...)
	}
	defer func() {
		if p := recover(); p != nil {
			c.fail(items, coffer.Errorf(coffer.CodeInternal, "a batch of %s failed: %v", c.what, p))
		}
		for _, j := range jobs {
			close(j.done)
		}
	}()
	run(c.db, items)
}

// close answers the jobs still queued shard_unavailable, refuses those
// sent after, and returns once the batches in flight are answered.
func (c *committer[R]) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	queued := c.queue
	c.queue = nil
	for _, j := range queued {
		j.taken = true
	}
	c.mu.Unlock()
	for _, j := range queued {
		c.fail(j.items, coffer.Errorf(coffer.CodeUnavailable, "the store is closed"))
		close(j.done)
	}
	for range cap(c.runners) {
		<-c.runners
	}
}
