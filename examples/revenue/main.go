// Command revenue is an example consumer of coffer's change feed: it
// reads the events from NATS JetStream with a durable consumer and keeps
// a running revenue table per namespace, currency and fiat — what paid
// coins brought in, and what of it was recognised, refunded or expired —
// printed as it changes (docs/events.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sort"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS URL")
	stream := flag.String("stream", "COFFER_EVENTS", "the feed's stream (feed.stream.name)")
	durable := flag.String("durable", "revenue-example", "the consumer's durable name: a restart goes on where it stopped")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *url, *stream, *durable, os.Stdout); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, url, stream, durable string, out io.Writer) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: durable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return err
	}
	t := newTable()
	printed := time.Now()
	for {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return err
		}
		var ev feed.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return err
		}
		t.apply(&ev)
		if err := msg.Ack(); err != nil {
			return err
		}
		if time.Since(printed) > time.Second {
			t.print(out)
			printed = time.Now()
		}
	}
}

// line is one row of the table: a namespace, a currency and a fiat.
type line struct {
	ns       coffer.Namespace
	currency string
	fiat     string
}

// sums are a line's figures, in minor units of its fiat.
type sums struct{ deposited, recognised, refunded, expired coffer.Amount }

// table is the running revenue table. It remembers the events it applied,
// so that one delivered again counts once, and what pending holds
// reserved, recognised at their commit.
type table struct {
	lines   map[line]*sums
	applied map[string]bool
	held    map[int64][]coffer.Op
}

func newTable() *table {
	return &table{lines: map[line]*sums{}, applied: map[string]bool{}, held: map[int64][]coffer.Op{}}
}

func (t *table) sums(ns coffer.Namespace, op coffer.Op) *sums {
	k := line{ns, op.Currency, op.Value.Fiat}
	s, ok := t.lines[k]
	if !ok {
		s = &sums{}
		t.lines[k] = s
	}
	return s
}

// apply counts one event's paid ops: a purchase's grant is deposited; a
// consume recognised (a hold's, at its commit); a refund's consume
// refunded; an expiry expired. Exchanges and releases move value between
// lots and count nothing.
func (t *table) apply(ev *feed.Event) {
	if t.applied[ev.ID] {
		return
	}
	t.applied[ev.ID] = true
	switch ev.Kind {
	case feed.KindHoldBegin:
		t.held[ev.Trx.ID] = ev.Ops
		return
	case feed.KindHoldCommit:
		for _, op := range t.held[ev.Trx.ID] {
			if op.Value != nil && op.Kind == coffer.OpConsume {
				t.sums(ev.Namespace, op).recognised -= op.Value.Amount
			}
		}
		delete(t.held, ev.Trx.ID)
	case feed.KindHoldRollback, feed.KindHoldExpire:
		delete(t.held, ev.Trx.ID)
	}
	for _, op := range ev.Ops {
		if op.Value == nil {
			continue
		}
		s := t.sums(ev.Namespace, op)
		switch {
		case op.Purchase != nil:
			s.deposited += op.Value.Amount
		case op.Kind == coffer.OpExpire:
			s.expired -= op.Value.Amount
		case op.Kind == coffer.OpConsume && op.Cause == coffer.CauseRefund:
			s.refunded -= op.Value.Amount
		case op.Kind == coffer.OpConsume && op.Cause == coffer.CauseChange:
			s.recognised -= op.Value.Amount
		}
	}
}

func (t *table) print(w io.Writer) {
	keys := make([]line, 0, len(t.lines))
	for k := range t.lines {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.ns < b.ns || a.ns == b.ns && (a.currency < b.currency || a.currency == b.currency && a.fiat < b.fiat)
	})
	fmt.Fprintf(w, "%-4s %-10s %-4s %12s %12s %12s %12s\n", "ns", "currency", "fiat", "deposited", "recognised", "refunded", "expired")
	for _, k := range keys {
		s := t.lines[k]
		fmt.Fprintf(w, "%-4d %-10s %-4s %12d %12d %12d %12d\n", k.ns, k.currency, k.fiat, s.deposited, s.recognised, s.refunded, s.expired)
	}
}
