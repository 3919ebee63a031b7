package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cofferhq/coffer/bench"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/internal/natsserver"
	"github.com/cofferhq/coffer/shard"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchFeed is the change feed beside a --self stack (--feed): a
// nats-server and the relay (`coffer feed`) as processes of their own.
// The bench's coffer side runs with the feed on, and each of its runs
// ends once the relay has confirmed the run's WAL, so that the decoding
// counts in the run's PostgreSQL CPU. Its baseline is the same coffer
// with the feed off: the relay stopped and its slots dropped, so that
// nothing decodes the WAL. Both run with wal_level = logical, which the
// feed needs, as shard moves do.
type benchFeed struct {
	broker  *natsserver.Server
	cfg     *Config
	cfgPath string
	logPath string
	router  *shard.Router
	relay   *relayProcess
	// relayCPU is the CPU seconds of the relays stopped so far.
	relayCPU float64
}

// benchFeedWait bounds each wait for the relay: its catching up after a
// run, its slots made or dropped.
const benchFeedWait = 2 * time.Minute

// startFeed readies a --feed bench: its PostgreSQL settings for the feed.
// Without --feed it does nothing and returns nil, whose methods do
// nothing.
func (f *benchFlags) startFeed(settings map[string]string, dir string) *benchFeed {
	if !f.feed {
		return nil
	}
	settings["wal_level"] = "logical"
	return &benchFeed{logPath: filepath.Join(dir, "feed.log")}
}

// attach starts the broker and the relay beside the stack st, and makes
// env's sides the feed on and off. They start now, after the stack's
// processes were confined (--pg-cpus): as children of the bench, they
// share its CPUs.
func (b *benchFeed) attach(ctx context.Context, st *localStack, env *bench.Env) error {
	if b == nil {
		return nil
	}
	var err error
	if b.broker, err = natsserver.Start(); err != nil {
		return err
	}
	b.cfg, b.cfgPath, b.router = st.config, st.configPath, env.Router
	b.cfg.Feed.NATS.URL, b.cfg.Feed.Listen = b.broker.URL(), ""
	if err := st.writeConfig(); err != nil {
		return err
	}
	if err := b.relayOn(ctx); err != nil {
		return err
	}
	cofferSide := bench.TargetRunner("coffer", env.Coffer)
	env.CofferRunner = feedSide{Runner: cofferSide, name: "coffer", after: b.caughtUp}
	env.BaselineRunner = feedSide{Runner: cofferSide, name: "feed-off", before: b.relayOff, after: b.relayOn, seed: feedOffSeed}
	return nil
}

// feedSide is coffer driven op by op, with something done before and
// after each of its runs, and its own draw of players and keys (seed is
// added to the run's).
type feedSide struct {
	bench.Runner
	name          string
	before, after func(ctx context.Context) error
	seed          uint64
}

// feedOffSeed sets the feed-off side's draws apart from the coffer side's:
// a round gives both sides the same seed, and the same players and keys
// would make the second side's writes replays of the first's.
const feedOffSeed = 500_000_003

func (s feedSide) Name() string { return s.name }

func (s feedSide) Run(ctx context.Context, cfg bench.RunConfig) (*bench.Result, error) {
	if s.before != nil {
		if err := s.before(ctx); err != nil {
			return nil, err
		}
	}
	cfg.Seed += s.seed
	res, err := s.Runner.Run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return res, s.after(ctx)
}

// relayOn starts the relay and returns once it reads every database's
// slot (which it makes if missing).
func (b *benchFeed) relayOn(ctx context.Context) error {
	var err error
	if b.relay, err = startRelayProcess(b.cfgPath, b.logPath); err != nil {
		return err
	}
	if !within(ctx, benchFeedWait, func() bool { return feedSlots(ctx, b.router, b.cfg.Feed.Slot, slotActive) }) {
		return fmt.Errorf("feed: the relay reads no slots after %s; its log: %s", benchFeedWait, b.logPath)
	}
	return nil
}

// relayOff stops the relay and drops its slots.
func (b *benchFeed) relayOff(ctx context.Context) error {
	if err := b.stopRelay(); err != nil {
		return err
	}
	// True once the slot is gone; an error while its reader goes away.
	const drop = "SELECT count(*) = count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1"
	if !within(ctx, benchFeedWait, func() bool { return feedSlots(ctx, b.router, b.cfg.Feed.Slot, drop) }) {
		return fmt.Errorf("feed: the slots were not dropped within %s", benchFeedWait)
	}
	return nil
}

func (b *benchFeed) stopRelay() error {
	err := b.relay.stop(false)
	b.relayCPU += (b.relay.cmd.ProcessState.UserTime() + b.relay.cmd.ProcessState.SystemTime()).Seconds()
	return err
}

// caughtUp returns once the relay has confirmed every database's WAL
// as it is now.
func (b *benchFeed) caughtUp(ctx context.Context) error {
	lsns, ok, err := waitConfirmed(ctx, b.router, b.cfg.Feed.Slot, benchFeedWait)
	if err == nil && !ok {
		err = fmt.Errorf("feed: the relay did not catch up with the WAL (%v) within %s; its log: %s", lsns, benchFeedWait, b.logPath)
	}
	return err
}

// figures stops the relay and reads the whole stream: how long each event
// took from its commit to its storing, and the relay's CPU per event.
func (b *benchFeed) figures(ctx context.Context) (*bench.FeedFigures, error) {
	if b == nil {
		return nil, nil
	}
	if err := b.stopRelay(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(b.broker.URL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, b.cfg.Feed.Stream.Name)
	if err != nil {
		return nil, fmt.Errorf("feed: stream: %w", err)
	}
	cons, err := js.OrderedConsumer(ctx, b.cfg.Feed.Stream.Name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	var lags []time.Duration
	for last := stream.CachedInfo().State.LastSeq; uint64(len(lags)) < last; {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			return nil, fmt.Errorf("feed: reading the stream's event %d of %d: %w", len(lags)+1, last, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		var ev feed.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return nil, err
		}
		lags = append(lags, meta.Timestamp.Sub(ev.CommittedAt))
	}
	return bench.NewFeedFigures(lags, b.relayCPU), nil
}

// close stops the relay, if it runs, and the broker.
func (b *benchFeed) close() {
	if b == nil {
		return
	}
	if b.relay != nil {
		select {
		case <-b.relay.exited:
		default:
			_ = b.stopRelay()
		}
	}
	if b.broker != nil {
		b.broker.Remove()
	}
}

var errFeedFlags = errors.New("--feed needs --self, and is the baseline: not with --baseline or --databases, nor with --pg-set wal_level other than logical")
