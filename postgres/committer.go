package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/telemetry"
)

// committer gathers the calls bound for one database into batches: each of
// its goroutines (Committers for writes, Readers for reads) takes one job
// (blocking), adds the jobs queued behind it while the batch stays within
// BatchSizeMax, without waiting for more, runs the batch and answers its
// jobs. There is no timer: an idle database runs each call at once, a
// busy one runs the calls that queued while its connections were busy in
// one go. Items are the writes (*request) or the balance reads
// (*readRequest) of a job, kind says which ("writes" or "reads").
type committer[R any] struct {
	s  *Store
	db int
	// database is db's name, as metrics and messages give it, once:
	// building it costs a few allocations, and a batch tells it twice.
	database, kind string
	// goroutines is how many batches run at once.
	goroutines int
	queue      chan *job[R]
	// runner makes, for each goroutine, what runs one of its batches and
	// answers every item of it, with ctx for its round trips (it carries
	// the batch's span, if traced); fail answers the items of a job that
	// cannot run (the store is closed).
	runner func() func(ctx context.Context, db int, items []R)
	fail   func(items []R, err error)
	// unanswered, if set, tells an item its batch left unanswered, to run
	// in a later batch: a batch of writes whose time ran short while it
	// planned them (Store.attempt).
	unanswered func(R) bool

	start sync.Once
	stop  chan struct{}
	wg    sync.WaitGroup
	// mu orders submit and close: a job is queued, and the goroutines
	// started, only while closed is false (read lock), so that close,
	// once it set closed (write lock), waits for every goroutine and
	// drains every job queued.
	mu     sync.RWMutex
	closed bool
}

// job is the items of one call (one write or read, or a batch call's
// writes on one database): they go into one batch, in order. alone tells
// that a batch ran short of time planning the job: what is left of it
// goes to the back of the queue, and runs in a batch of its own, so that
// a call too heavy for one batch slows only itself. queued is the call's
// wait in the queue, if traced.
type job[R any] struct {
	items  []R
	done   chan struct{}
	alone  bool
	queued telemetry.Queued
}

func newCommitter[R any](s *Store, db int, kind string, goroutines int, runner func() func(context.Context, int, []R), fail func([]R, error),
	unanswered func(R) bool) *committer[R] {
	return &committer[R]{s: s, db: db, database: s.router.Map().Databases()[db].Name(), kind: kind, goroutines: goroutines, queue: make(chan *job[R], s.opts.QueueMax),
		runner: runner, fail: fail, unanswered: unanswered, stop: make(chan struct{})}
}

// submit queues items as one job and waits until its batch answered them,
// or until ctx ends. Errors: overloaded, at once, when the queue is full;
// shard_unavailable when ctx ends first or the store is closed (the items
// may still be applied: a retry with the same key tells).
func (c *committer[R]) submit(ctx context.Context, items []R) error {
	j := &job[R]{items: items, done: make(chan struct{}), queued: telemetry.Queue(ctx)}
	if err := c.enqueue(j); err != nil {
		return err
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return &coffer.Error{Code: coffer.CodeUnavailable, Message: "the call ended before its batch was answered; retry with the same key", Err: ctx.Err()}
	}
}

// enqueue queues j, starting the goroutines at the first job, unless the
// store is closed or the queue full.
func (c *committer[R]) enqueue(j *job[R]) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return coffer.Errorf(coffer.CodeUnavailable, "the store is closed")
	}
	c.start.Do(func() {
		for range c.goroutines {
			c.wg.Go(c.loop)
		}
	})
	select {
	case c.queue <- j:
		return nil
	default:
		return coffer.Errorf(coffer.CodeOverloaded, "%d calls (%s) wait for database %s, the most it queues; retry after Retry-After",
			cap(c.queue), c.kind, c.database)
	}
}

// loop runs batches until the store is closed. next are the jobs that
// lead the next batch: one that did not fit the batch before it, or
// those its batch left unanswered without having begun them.
func (c *committer[R]) loop() {
	run := c.runner()
	var next []*job[R]
	for {
		if len(next) == 0 {
			select {
			case j := <-c.queue:
				next = []*job[R]{j}
			case <-c.stop:
				c.drain()
				return
			}
		}
		jobs, items, rest := c.take(next)
		next = rest
	fill:
		for len(next) == 0 && !jobs[0].alone && len(items) < c.s.opts.BatchSizeMax {
			select {
			case j := <-c.queue:
				if j.alone || len(items)+len(j.items) > c.s.opts.BatchSizeMax {
					next = []*job[R]{j}
					break fill
				}
				jobs, items = append(jobs, j), append(items, j.items...)
			default:
				break fill
			}
		}
		var traced telemetry.Batch
		for _, j := range jobs {
			traced.Join(&j.queued)
		}
		ctx := traced.Start(c.database, c.kind, len(items))
		began := time.Now()
		c.runSafely(ctx, run, items)
		c.s.opts.Observer.Batch(c.database, c.kind, len(items), time.Since(began))
		traced.End()
		next = append(c.answered(jobs), next...)
	}
}

// take makes a batch of the jobs that lead next: the first, then those
// that fit with it, and returns the rest. A job alone (job.alone) has a
// batch of its own.
func (c *committer[R]) take(next []*job[R]) (jobs []*job[R], items []R, rest []*job[R]) {
	for i, j := range next {
		if i > 0 && (j.alone || jobs[0].alone || len(items)+len(j.items) > c.s.opts.BatchSizeMax) {
			return jobs, items, next[i:]
		}
		jobs, items = append(jobs, j), append(items, j.items...)
	}
	return jobs, items, nil
}

// answered ends the jobs whose items were all answered, and returns those
// none of whose items were (their batch ran short of time before them),
// to lead the next batch. A job answered in part goes to the back of the
// queue, alone (job.alone), or, if the queue is full or the store
// closed, has the rest of its items answered so.
func (c *committer[R]) answered(jobs []*job[R]) (untouched []*job[R]) {
	for _, j := range jobs {
		var left []R
		if c.unanswered != nil {
			for _, it := range j.items {
				if c.unanswered(it) {
					left = append(left, it)
				}
			}
		}
		switch {
		case len(left) == 0:
			close(j.done)
		case len(left) == len(j.items):
			untouched = append(untouched, j)
		default:
			j.items, j.alone = left, true
			if err := c.enqueue(j); err != nil {
				c.fail(left, err)
				close(j.done)
			}
		}
	}
	return untouched
}

// runSafely runs a batch; a panic (a bug) outside a write's plan (those
// split the batch: request.planOn) answers internal the items not
// answered yet (fail keeps what a part of a split batch answered before
// it) instead of killing the process with every call in flight (counted
// in coffer_errors_total, not as an attempt).
func (c *committer[R]) runSafely(ctx context.Context, run func(context.Context, int, []R), items []R) {
	defer func() {
		if p := recover(); p != nil {
			c.fail(items, coffer.Errorf(coffer.CodeInternal, "a batch of %s failed: %v", c.kind, p))
		}
	}()
	run(ctx, c.db, items)
}

// drain answers the jobs still queued when the store closes.
func (c *committer[R]) drain() {
	for {
		select {
		case j := <-c.queue:
			c.fail(j.items, coffer.Errorf(coffer.CodeUnavailable, "the store is closed"))
			close(j.done)
		default:
			return
		}
	}
}

// close stops the goroutines after their batches in flight.
func (c *committer[R]) close() {
	c.mu.Lock()
	was := c.closed
	c.closed = true
	c.mu.Unlock()
	if was {
		return
	}
	close(c.stop)
	c.wg.Wait()
	c.drain()
}
