package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/natsserver"
	"github.com/cofferhq/coffer/shard"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tortureFeed is the change feed of a torture run (--feed): a nats-server,
// the relay as a process of its own (`coffer feed`, through the fault
// proxies like the instances), and a consumer that reads the stream
// while the run goes on. The checks compare what the stream stored with
// the ledger.
type tortureFeed struct {
	broker   *natsserver.Server
	cfg      *Config
	cfgPath  string
	logPath  string
	router   *shard.Router // to the servers themselves: the slots
	consumer *nats.Conn
	// stopConsumer ends the consumer's goroutine.
	stopConsumer context.CancelFunc

	mu     sync.Mutex
	relay  *relayProcess
	stored []feed.Event
	seq    uint64 // the stream sequence of the last event stored
	err    error  // why the consumer stopped, if it did
}

// tortureFeedWait bounds the waits of the feed's checks: the relay
// catching up with the ledger, the consumer with the stream. Generous:
// after a fault the relay retries with a backoff, and the machine may be
// busy.
const tortureFeedWait = 3 * time.Minute

// startTortureFeed starts the broker and sets the config's feed to it.
// The relay starts later (startRelay), once the config is on disk.
func startTortureFeed(cfg *Config, dir string) (*tortureFeed, error) {
	broker, err := natsserver.Start()
	if err != nil {
		return nil, err
	}
	cfg.Feed.NATS.URL, cfg.Feed.Listen = broker.URL(), ""
	// After a fault the relay is back within seconds, not the default's
	// 10 s: the run is short.
	cfg.Feed.Retry.Max = 2 * time.Second
	return &tortureFeed{broker: broker, cfg: cfg, logPath: filepath.Join(dir, "feed.log")}, nil
}

// start starts the relay and the consumer, and returns once every
// database has its slot: every trx written after is in the feed.
func (f *tortureFeed) start(ctx context.Context, cfgPath string, direct *shard.Map) error {
	f.cfgPath = cfgPath
	var err error
	if f.router, err = shard.Open(direct, shard.DefaultPoolConfig()); err != nil {
		return err
	}
	if err := f.startRelay(); err != nil {
		return err
	}
	if !within(ctx, tortureFeedWait, func() bool { return feedSlots(ctx, f.router, f.cfg.Feed.Slot, slotExists) }) {
		return fmt.Errorf("the relay made no slots within %s; its log: %s", tortureFeedWait, f.logPath)
	}
	if f.consumer, err = nats.Connect(f.broker.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return err
	}
	ctx, f.stopConsumer = context.WithCancel(ctx)
	go f.consume(ctx)
	return nil
}

func (f *tortureFeed) startRelay() error {
	p, err := startRelayProcess(f.cfgPath, f.logPath)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.relay = p
	f.mu.Unlock()
	return nil
}

// stopRelay ends the relay: kill -9 when kill, else SIGTERM.
func (f *tortureFeed) stopRelay(kill bool) error {
	f.mu.Lock()
	p := f.relay
	f.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(kill)
}

// consume reads the stream from its start until ctx ends, keeping every
// event in the stream's order. A broker killed ends the consumer, which
// starts again after the last event it read.
func (f *tortureFeed) consume(ctx context.Context) {
	js, err := jetstream.New(f.consumer)
	if err != nil {
		f.fail(err)
		return
	}
	for ctx.Err() == nil {
		f.mu.Lock()
		next := f.seq + 1
		f.mu.Unlock()
		cons, err := js.OrderedConsumer(ctx, f.cfg.Feed.Stream.Name, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next})
		if err != nil {
			// No stream yet, or no broker: the relay makes the stream
			// at its first session.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ctx.Err() == nil {
			msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if errors.Is(err, nats.ErrTimeout) {
				continue
			}
			if err != nil {
				break
			}
			if err := f.keep(msg); err != nil {
				f.fail(err)
				return
			}
		}
	}
}

// keep adds msg's event to those stored.
func (f *tortureFeed) keep(msg jetstream.Msg) error {
	meta, err := msg.Metadata()
	if err != nil {
		return err
	}
	var ev feed.Event
	if err := json.Unmarshal(msg.Data(), &ev); err != nil {
		return fmt.Errorf("message %d: %w", meta.Sequence.Stream, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if meta.Sequence.Stream <= f.seq {
		return nil // read again after a reconnect
	}
	if meta.Sequence.Stream != f.seq+1 {
		return fmt.Errorf("the consumer skipped from stream sequence %d to %d", f.seq, meta.Sequence.Stream)
	}
	f.stored, f.seq = append(f.stored, ev), meta.Sequence.Stream
	return nil
}

func (f *tortureFeed) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// relaying tells whether the relay reads every database's slot and the
// consumer is connected to the broker.
func (f *tortureFeed) relaying(ctx context.Context) bool {
	return f.consumer.IsConnected() && feedSlots(ctx, f.router, f.cfg.Feed.Slot, slotActive)
}

// check waits until the relay has confirmed every database's WAL as it
// is now (the writes have stopped) and the consumer has read the whole
// stream, then compares the stream with the ledger. It returns the
// feed's line of the report and the violations. The ledger is read
// through placed, a router that found each shard where the moves put it:
// the moves name their databases as the instances' config does, through
// the proxies, and f.router's names are the servers' own.
func (f *tortureFeed) check(ctx context.Context, placed *shard.Router) (string, []string, error) {
	var violations []string
	lsns, ok, err := waitConfirmed(ctx, f.router, f.cfg.Feed.Slot, tortureFeedWait)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		violations = append(violations, fmt.Sprintf("feed: the relay did not confirm the WAL up to %v within %s", lsns, tortureFeedWait))
	}
	js, err := jetstream.New(f.consumer)
	if err != nil {
		return "", nil, err
	}
	stream, err := js.Stream(ctx, f.cfg.Feed.Stream.Name)
	if err != nil {
		return "", nil, fmt.Errorf("stream: %w", err)
	}
	last := stream.CachedInfo().State.LastSeq
	if !within(ctx, tortureFeedWait, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.seq >= last || f.err != nil }) {
		violations = append(violations, fmt.Sprintf("feed: the consumer did not read the stream's %d events within %s", last, tortureFeedWait))
	}
	f.mu.Lock()
	stored, consumeErr := f.stored, f.err
	f.mu.Unlock()
	if consumeErr != nil {
		return "", nil, fmt.Errorf("consumer: %w", consumeErr)
	}
	catalog, _, err := f.cfg.service()
	if err != nil {
		return "", nil, err
	}
	ledger, err := (&audit.Checker{Router: placed}).FeedLedger(ctx, catalog)
	if err != nil {
		return "", nil, err
	}
	rep := audit.CompareFeed(stored, ledger)
	line := fmt.Sprintf("feed: %d events stored, %d trx changes committed: %d missing, %d duplicates, %d phantom\n",
		rep.Stored, rep.Committed, rep.Missing, rep.Duplicates, rep.Phantoms)
	return line, append(violations, rep.Violations...), nil
}

func (f *tortureFeed) close() {
	_ = f.stopRelay(false)
	if f.consumer != nil {
		f.stopConsumer()
		f.consumer.Close()
	}
	if f.router != nil {
		f.router.Close()
	}
	f.broker.Remove()
}

var errNoFeed = errors.New("the feed's faults need --feed")

// KillRelay is part of torture.Target.
func (t *tortureRun) KillRelay() error {
	if t.feedRun == nil {
		return errNoFeed
	}
	return t.feedRun.stopRelay(true)
}

// RestartRelay is part of torture.Target.
func (t *tortureRun) RestartRelay() error {
	if t.feedRun == nil {
		return errNoFeed
	}
	return t.feedRun.startRelay()
}

// KillBroker is part of torture.Target.
func (t *tortureRun) KillBroker() error {
	if t.feedRun == nil {
		return errNoFeed
	}
	return t.feedRun.broker.Kill()
}

// RestartBroker is part of torture.Target: on the same port, with its
// stored streams.
func (t *tortureRun) RestartBroker() error {
	if t.feedRun == nil {
		return errNoFeed
	}
	return t.feedRun.broker.Start()
}

// WaitFeed is part of torture.Target.
func (t *tortureRun) WaitFeed(ctx context.Context) {
	if t.feedRun != nil {
		waitUntil(ctx, func() bool { return t.feedRun.relaying(ctx) })
	}
}
