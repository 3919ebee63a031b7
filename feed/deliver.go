package feed

import (
	"context"
	"sync"

	"github.com/jackc/pglogrepl"
)

// Sink is where a relay delivers events: JetStream, or webhooks.
type Sink interface {
	// open starts the deliveries of one session of a relay reading
	// database. Errors: the sink cannot be reached or set up.
	open(ctx context.Context, database string) (delivery, error)
	// name names the sink in logs and metrics.
	name() string
}

// delivery delivers the events of one session, each player's in the
// order they are sent. A delivery is used by its relay's goroutine; it
// runs goroutines of its own, which close stops.
type delivery interface {
	// send takes the events of the next committed transaction (maybe
	// none) and the end of its WAL. It blocks while the delivery holds
	// its bound of events in flight, until ctx ends or the delivery
	// fails. Errors: the delivery failed (err), ctx ended.
	send(ctx context.Context, events []Event, end pglogrepl.LSN) error
	// delivered is the end of WAL up to which every transaction's events
	// are delivered: the slot may confirm it.
	delivered() pglogrepl.LSN
	// err is the failure that ends the session, nil while it delivers.
	err() error
	// close stops the delivery's goroutines and waits for them.
	close()
}

// progress tracks which transactions of a session are delivered: each
// one's events are counted down as they are delivered, and the end of
// the longest delivered prefix is what the slot may confirm. It is safe
// for concurrent use.
type progress struct {
	mu   sync.Mutex
	txns []*txnLeft
	done pglogrepl.LSN
}

// txnLeft is a transaction's events not yet delivered.
type txnLeft struct {
	end  pglogrepl.LSN
	left int
}

// add records a transaction of n events to deliver.
func (p *progress) add(n int, end pglogrepl.LSN) *txnLeft {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := &txnLeft{end: end, left: n}
	p.txns = append(p.txns, t)
	p.advance()
	return t
}

// one counts one of t's events delivered.
func (p *progress) one(t *txnLeft) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t.left--
	p.advance()
}

func (p *progress) advance() {
	for len(p.txns) > 0 && p.txns[0].left == 0 {
		p.done = p.txns[0].end
		p.txns = p.txns[1:]
	}
}

func (p *progress) delivered() pglogrepl.LSN {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// failure keeps the first error of a delivery's goroutines and tells
// the others, through done, to stop.
type failure struct {
	once sync.Once
	mu   sync.Mutex
	e    error
	done chan struct{}
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

func (f *failure) set(err error) {
	f.once.Do(func() {
		f.mu.Lock()
		f.e = err
		f.mu.Unlock()
		close(f.done)
	})
}

func (f *failure) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.e
}
