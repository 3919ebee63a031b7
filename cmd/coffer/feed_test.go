package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/natsserver"
	"github.com/cofferhq/coffer/internal/pgserver"
)

// TestFeedCommand runs `coffer feed`'s relays on a service's database
// and `coffer feed tail` on their stream: the API's writes come out, one
// line each, in order.
func TestFeedCommand(t *testing.T) {
	pg, err := pgserver.Start(ctx, pgserver.Options{Settings: map[string]string{"wal_level": "logical"}})
	must(t, err)
	t.Cleanup(pg.Remove)
	broker, err := natsserver.Start()
	must(t, err)
	t.Cleanup(broker.Remove)
	s := startService(t, []*pgserver.Server{pg}, func(c *Config) {
		c.Feed.NATS.URL, c.Feed.Listen = broker.URL(), "127.0.0.1:0"
	})
	cfg := s.main.Config
	catalog, _, err := cfg.service()
	must(t, err)
	must(t, cfg.Feed.check(map[int32]bool{1: true, 2: true}))
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relayAll(rctx, cfg, s.m, catalog, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("feed: %v", err)
		}
		dropSlots(t, s)
	})
	// The relay makes its slot at its start: a write before is not in
	// the feed. The writes done, tail reads the stream from its start.
	waitSlots(t, s)
	wantStatus(t, s.call("POST", "/v1/namespaces/1/players/42/transactions", devKey,
		`{"idempotency_key": "a", "ops": [{"currency": "gold", "amount": 5}]}`), 201, "")
	wantStatus(t, s.call("POST", "/v1/namespaces/1/players/42/transactions", devKey,
		`{"idempotency_key": "b", "ops": [{"currency": "gold", "amount": -2}]}`), 201, "")
	out, err := tailAll(&cfg.Feed, "1.*", 2)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 2 || !strings.Contains(lines[0], `ns=1 player=42 v1.0 change`) || !strings.HasSuffix(lines[0], `key="a" gold+5 [gold=5]`) ||
		!strings.HasSuffix(lines[1], `key="b" gold-2 [gold=3]`) {
		t.Fatalf("coffer feed tail --all --count 2: %v; printed:\n%s", err, out)
	}
}

// tailAll is `coffer feed tail --all --count n` on subject, tried again
// (generous bound) while it fails: the stream is made by the relay's
// first session, and a consumer may fail on a busy machine. Each try
// reads from the stream's start: its output is the last try's alone.
func tailAll(f *FeedConfig, subject string, n int) (string, error) {
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		var out strings.Builder
		err := tail(tctx, f, subject, true, n, false, &out)
		if err == nil || tctx.Err() != nil {
			return out.String(), err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitSlots waits (generous bound) until the feed's slot of every
// database of s is made. A slot is listed while it is being made, and
// until it is consistent (confirmed_flush_lsn set) it drops the trx that
// commit: it waits for the transactions running to end, which on a busy
// server takes as long as the bgwriter's next snapshot of them.
func waitSlots(t *testing.T, s *service) {
	t.Helper()
	for i := range s.m.Databases() {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var n int
			must(t, s.main.router.Database(i).QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots
				WHERE slot_name LIKE 'coffer_feed_%' AND database = current_database() AND confirmed_flush_lsn IS NOT NULL`).Scan(&n))
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the feed made no slot")
			}
		}
	}
}

// dropSlots drops the feed's slots, once their reader is gone: a
// database with one cannot be dropped.
func dropSlots(t *testing.T, s *service) {
	for i := range s.m.Databases() {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := s.main.router.Database(i).Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database()")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Error(err)
				break
			}
		}
	}
}

// TestFeedConfigErrors: a feed config that cannot work is refused, the
// key named.
func TestFeedConfigErrors(t *testing.T) {
	for want, tweak := range map[string]func(f *FeedConfig){
		"feed: set nats.url, webhooks or both": func(f *FeedConfig) { f.NATS.URL, f.Webhooks = "", nil },
		"feed.webhooks[0].kinds":               func(f *FeedConfig) { f.Webhooks[0].Kinds = []string{"refunds"} },
		"feed.webhooks[0].secret":              func(f *FeedConfig) { f.Webhooks[0].Secret = "short" },
		"feed.webhooks[0].namespaces":          func(f *FeedConfig) { f.Webhooks[0].Namespaces = []int32{9} },
		"feed.webhooks[1].name":                func(f *FeedConfig) { f.Webhooks = append(f.Webhooks, f.Webhooks[0]) },
		"feed.stream.retention":                func(f *FeedConfig) { f.Stream.Retention = "forever" },
		"feed.nats.subject_prefix":             func(f *FeedConfig) { f.NATS.SubjectPrefix = "coffer.>" },
	} {
		f := defaultFeed()
		f.NATS.URL = "nats://127.0.0.1:4222"
		f.Webhooks = []WebhookConfig{{Name: "finance", URL: "https://example.com/hook", Secret: "0123456789abcdef"}}
		must(t, f.check(map[int32]bool{1: true}))
		tweak(&f)
		if err := f.check(map[int32]bool{1: true}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
