package feed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream delivers events to a NATS JetStream stream, each on subject
// SubjectPrefix.<ns>.<kind> with its id as the message id (Nats-Msg-Id),
// so that the stream drops an event published again within its
// duplicate window. A player's next event is published only once the
// stream acknowledged the one before, so that a failed publish can never
// let a later event of the player be stored before it.
type JetStream struct {
	// Conn is the connection to NATS; its owner closes it.
	Conn *nats.Conn
	// Stream is created with this config when it does not exist; an
	// existing stream is kept as it is.
	Stream        jetstream.StreamConfig
	SubjectPrefix string
	// InFlightMax bounds the events published and not yet acknowledged.
	InFlightMax int
	// PublishTimeout bounds one publish; past it the session ends and the
	// next one publishes again from the slot's position.
	PublishTimeout time.Duration
	Observer       Observer
}

func (j *JetStream) name() string { return "jetstream" }

// StreamFor is the default stream of the feed: name, every subject under
// prefix, and a duplicate window.
func StreamFor(name, prefix string, duplicates time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Duplicates: duplicates, Storage: jetstream.FileStorage}
}

func (j *JetStream) open(ctx context.Context, database string) (delivery, error) {
	js, err := jetstream.New(j.Conn)
	if err != nil {
		return nil, err
	}
	if _, err := js.Stream(ctx, j.Stream.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, j.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create stream %s: %w", j.Stream.Name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("stream %s: %w", j.Stream.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &jsDelivery{j: j, js: js, database: database, ctx: ctx, cancel: cancel, fail: newFailure(),
		slots: make(chan struct{}, j.InFlightMax), busy: map[playerKey][]*outgoing{}}, nil
}

// jsDelivery is one session's publishing to JetStream.
type jsDelivery struct {
	j        *JetStream
	js       jetstream.JetStream
	database string
	ctx      context.Context
	cancel   context.CancelFunc
	fail     *failure
	progress progress
	// slots holds a token per event in flight (published or waiting for
	// its player's previous one).
	slots chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// busy holds, for a player with an event being published, its events
	// waiting behind that one.
	busy map[playerKey][]*outgoing
}

// outgoing is an event on its way, with the transaction it counts for.
type outgoing struct {
	ev  *Event
	txn *txnLeft
}

func (d *jsDelivery) send(ctx context.Context, events []Event, end pglogrepl.LSN) error {
	t := d.progress.add(len(events), end)
	for i := range events {
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.fail.done:
			return d.fail.err()
		}
		o := &outgoing{ev: &events[i], txn: t}
		d.mu.Lock()
		k := o.ev.player()
		waiting, busy := d.busy[k]
		if busy {
			d.busy[k] = append(waiting, o)
		} else {
			d.busy[k] = nil
		}
		d.mu.Unlock()
		if !busy {
			d.start(o)
		}
	}
	return nil
}

func (d *jsDelivery) start(o *outgoing) {
	d.wg.Add(1)
	go d.publish(o)
}

// publish publishes o, then the events of its player that waited for it.
func (d *jsDelivery) publish(o *outgoing) {
	defer d.wg.Done()
	for o != nil {
		if err := d.publishOne(o.ev); err != nil {
			d.fail.set(fmt.Errorf("publish %s: %w", o.ev.ID, err))
			return
		}
		<-d.slots
		d.progress.one(o.txn)
		d.mu.Lock()
		k := o.ev.player()
		o = nil
		if waiting := d.busy[k]; len(waiting) > 0 {
			o, d.busy[k] = waiting[0], waiting[1:]
		} else {
			delete(d.busy, k)
		}
		d.mu.Unlock()
	}
}

func (d *jsDelivery) publishOne(ev *Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.j.PublishTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: ev.Subject(d.j.SubjectPrefix), Data: data, Header: nats.Header{}}
	ack, err := d.js.PublishMsg(ctx, msg, jetstream.WithMsgID(ev.ID), jetstream.WithExpectStream(d.j.Stream.Name))
	if err != nil {
		return err
	}
	if d.j.Observer != nil {
		d.j.Observer.Delivered(d.database, "jetstream", ack.Duplicate, time.Since(ev.CommittedAt))
	}
	return nil
}

func (d *jsDelivery) delivered() pglogrepl.LSN { return d.progress.delivered() }

func (d *jsDelivery) err() error { return d.fail.err() }

func (d *jsDelivery) close() {
	d.cancel()
	d.wg.Wait()
}
