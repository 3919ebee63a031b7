package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/metrics"
	"github.com/cofferhq/coffer/shard"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FeedConfig is the change feed's: `coffer feed` relays every database's
// committed trx to NATS JetStream and webhooks (docs/events.md).
type FeedConfig struct {
	// Slot prefixes each database's replication slot (slot_<dbname>);
	// Publication names the publication made in each database.
	Slot        string `yaml:"slot"`
	Publication string `yaml:"publication"`
	// Listen is the relay's operations listener (/metrics); empty: none.
	Listen   string           `yaml:"listen"`
	NATS     FeedNATSConfig   `yaml:"nats"`
	Stream   FeedStreamConfig `yaml:"stream"`
	Webhooks []WebhookConfig  `yaml:"webhooks,omitempty"`
	Retry    FeedRetryConfig  `yaml:"retry"`
}

// FeedNATSConfig is where events go: empty URL, no JetStream (webhooks only).
type FeedNATSConfig struct {
	URL string `yaml:"url"`
	// CredsFile is a NATS credentials file (user JWT and NKey seed).
	CredsFile     string `yaml:"creds_file,omitempty"`
	SubjectPrefix string `yaml:"subject_prefix"`
	// InFlightMax bounds the events published and not yet acknowledged,
	// per database.
	InFlightMax    int           `yaml:"in_flight_max"`
	PublishTimeout time.Duration `yaml:"publish_timeout"`
}

// FeedStreamConfig is the JetStream stream `coffer feed` creates when it
// is missing; one that exists is kept as it is.
type FeedStreamConfig struct {
	Name string `yaml:"name"`
	// Retention is limits, interest or workqueue (JetStream's policies).
	Retention string `yaml:"retention"`
	// MaxAge and MaxBytes bound what the stream keeps; 0: no bound.
	MaxAge   time.Duration `yaml:"max_age"`
	MaxBytes int64         `yaml:"max_bytes"`
	// DuplicateWindow is how long the stream remembers a message id: a
	// relay that restarts within it stores no event twice.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	Replicas        int           `yaml:"replicas"`
}

// FeedRetryConfig paces the relay's sessions: after a failure the next
// starts after Min, doubling up to Max.
type FeedRetryConfig struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// WebhookConfig is one webhook receiver. BatchMax (events per POST),
// BacklogMax (events waiting, past which the receiver is dropped) and
// Timeout (per POST) default to 100, 100000 and 10s.
type WebhookConfig struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Secret signs each POST (feed.SignatureHeader); write it as
	// "${ENV_VAR}" to keep it out of the file.
	Secret     string        `yaml:"secret"`
	Namespaces []int32       `yaml:"namespaces,omitempty,flow"`
	Kinds      []string      `yaml:"kinds,omitempty,flow"`
	BatchMax   int           `yaml:"batch_max"`
	BacklogMax int           `yaml:"backlog_max"`
	Timeout    time.Duration `yaml:"timeout"`
}

// defaultFeed is the feed's config before the file is read.
func defaultFeed() FeedConfig {
	return FeedConfig{Slot: "coffer_feed", Publication: "coffer_feed", Listen: "127.0.0.1:8082",
		NATS:   FeedNATSConfig{SubjectPrefix: "coffer.events", InFlightMax: 1024, PublishTimeout: 5 * time.Second},
		Stream: FeedStreamConfig{Name: "COFFER_EVENTS", Retention: "limits", DuplicateWindow: 10 * time.Minute, Replicas: 1},
		Retry:  FeedRetryConfig{Min: 200 * time.Millisecond, Max: 10 * time.Second},
	}
}

// check validates the feed's config; errors name the key at fault.
func (f *FeedConfig) check(namespaces map[int32]bool) error {
	switch {
	case f.NATS.URL == "" && len(f.Webhooks) == 0:
		return errors.New("feed: set nats.url, webhooks or both: the feed has nowhere to deliver")
	case f.Slot == "" || f.Publication == "":
		return errors.New("feed.slot, feed.publication: must not be empty")
	case f.NATS.InFlightMax <= 0 || f.NATS.PublishTimeout <= 0:
		return errors.New("feed.nats: in_flight_max and publish_timeout must be > 0")
	case f.NATS.SubjectPrefix == "" || strings.ContainsAny(f.NATS.SubjectPrefix, "*> \t"):
		return errors.New("feed.nats.subject_prefix: must be a subject without wildcards")
	case f.Stream.Name == "" || f.Stream.DuplicateWindow <= 0 || f.Stream.Replicas <= 0:
		return errors.New("feed.stream: name, duplicate_window and replicas must be set")
	case f.Retry.Min <= 0 || f.Retry.Max < f.Retry.Min:
		return errors.New("feed.retry: min must be > 0 and max at least min")
	}
	if _, err := retention(f.Stream.Retention); err != nil {
		return err
	}
	names := map[string]bool{}
	for i, w := range f.Webhooks {
		switch {
		case w.Name == "" || names[w.Name]:
			return fmt.Errorf("feed.webhooks[%d].name: must be set and unique", i)
		case !strings.HasPrefix(w.URL, "https://") && !strings.HasPrefix(w.URL, "http://"):
			return fmt.Errorf("feed.webhooks[%d].url: must be an http(s) URL", i)
		case len(w.Secret) < 16:
			return fmt.Errorf("feed.webhooks[%d].secret: must be at least 16 characters", i)
		case w.BatchMax < 0 || w.BacklogMax < 0 || w.Timeout < 0:
			return fmt.Errorf("feed.webhooks[%d]: batch_max, backlog_max and timeout must not be negative", i)
		}
		names[w.Name] = true
		for _, ns := range w.Namespaces {
			if !namespaces[ns] {
				return fmt.Errorf("feed.webhooks[%d].namespaces: %d is not a configured namespace", i, ns)
			}
		}
		for _, k := range w.Kinds {
			if !isKind(feed.Kind(k)) {
				return fmt.Errorf("feed.webhooks[%d].kinds: %q is not an event kind (%v)", i, k, feed.Kinds)
			}
		}
	}
	return nil
}

func isKind(k feed.Kind) bool {
	for _, known := range feed.Kinds {
		if k == known {
			return true
		}
	}
	return false
}

func retention(name string) (jetstream.RetentionPolicy, error) {
	switch name {
	case "limits":
		return jetstream.LimitsPolicy, nil
	case "interest":
		return jetstream.InterestPolicy, nil
	case "workqueue":
		return jetstream.WorkQueuePolicy, nil
	}
	return 0, fmt.Errorf("feed.stream.retention: must be limits, interest or workqueue")
}

// stream is the JetStream stream config of the feed.
func (f *FeedConfig) stream() jetstream.StreamConfig {
	sc := feed.StreamFor(f.Stream.Name, f.NATS.SubjectPrefix, f.Stream.DuplicateWindow)
	sc.Retention, _ = retention(f.Stream.Retention)
	sc.MaxAge, sc.MaxBytes, sc.Replicas = f.Stream.MaxAge, f.Stream.MaxBytes, f.Stream.Replicas
	if sc.MaxBytes == 0 {
		sc.MaxBytes = -1
	}
	return sc
}

// receivers are the webhook receivers of the config.
func (f *FeedConfig) receivers() []*feed.Receiver {
	var out []*feed.Receiver
	for _, w := range f.Webhooks {
		r := &feed.Receiver{Name: w.Name, URL: w.URL, Secret: []byte(w.Secret), BatchMax: or(w.BatchMax, 100),
			BacklogMax: or(w.BacklogMax, 100_000), Timeout: or(w.Timeout, 10*time.Second), RetryMin: f.Retry.Min, RetryMax: f.Retry.Max}
		for _, ns := range w.Namespaces {
			r.Namespaces = append(r.Namespaces, coffer.Namespace(ns))
		}
		for _, k := range w.Kinds {
			r.Kinds = append(r.Kinds, feed.Kind(k))
		}
		out = append(out, r)
	}
	return out
}

// or is v, or def when v is zero.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// runFeed is `coffer feed -c CONFIG`: a relay per database of the config,
// until SIGINT or SIGTERM. `coffer feed tail` watches the stream instead.
func runFeed(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "tail" {
		return runFeedTail(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("feed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configPath string
	fs.StringVar(&configPath, "c", "", "config file")
	fs.StringVar(&configPath, "config-file", "", "same as -c")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, m, catalog, err := loadFeedConfig(configPath)
	if err != nil {
		fmt.Fprintln(stderr, "coffer feed:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := newLogger(stdout, cfg.Log.Level)
	if err := relayAll(ctx, cfg, m, catalog, logger); err != nil {
		logger.Error("feed stopped", "err", err)
		return 1
	}
	return 0
}

// loadFeedConfig reads the config for the feed's commands.
func loadFeedConfig(path string) (*Config, *shard.Map, *coffer.Catalog, error) {
	if path == "" {
		return nil, nil, nil, errors.New("-c CONFIG is required")
	}
	cfg, m, err := loadConfig(path)
	if err != nil {
		return nil, nil, nil, err
	}
	catalog, _, err := cfg.service()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	namespaces := map[int32]bool{}
	for _, ns := range cfg.Namespaces {
		namespaces[ns.ID] = true
	}
	if err := cfg.Feed.check(namespaces); err != nil {
		return nil, nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, m, catalog, nil
}

// relayAll runs a relay per database until ctx ends or one fails for
// good (its slot lost, say).
func relayAll(ctx context.Context, cfg *Config, m *shard.Map, catalog *coffer.Catalog, logger *slog.Logger) error {
	f := &cfg.Feed
	obs := metrics.NewFeed()
	if f.Listen != "" {
		ln, err := net.Listen("tcp", f.Listen)
		if err != nil {
			return fmt.Errorf("feed.listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", obs.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: cfg.Timeouts.ReadHeader}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	var nc *nats.Conn
	if f.NATS.URL != "" {
		opts := []nats.Option{nats.Name("coffer-feed"), nats.MaxReconnects(-1),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { logger.Warn("feed: nats", "err", err) })}
		if f.NATS.CredsFile != "" {
			opts = append(opts, nats.UserCredentials(f.NATS.CredsFile))
		}
		var err error
		if nc, err = nats.Connect(f.NATS.URL, append(opts, nats.RetryOnFailedConnect(true))...); err != nil {
			return fmt.Errorf("feed.nats.url: %w", err)
		}
		defer nc.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(m.Databases()))
	sources := map[string]feed.Source{}
	for _, d := range m.Databases() {
		sources[d.Name()] = feed.Source{ConnString: d.Config.ConnString(int(cfg.Pool.ConnectTimeout.Seconds())), Slot: feed.SlotName(f.Slot, d.Config.Name)}
	}
	for _, d := range m.Databases() {
		src := sources[d.Name()]
		r := &feed.Relay{Database: d.Name(), ConnString: src.ConnString, Sources: sources,
			Catalog: catalog, Slot: src.Slot, Publication: f.Publication, Logger: logger, Observer: obs,
			StatusInterval: time.Second, PauseMin: f.Retry.Min, PauseMax: f.Retry.Max, SlotCheckInterval: 10 * time.Second,
			RequireStandby: cfg.RequireSynchronousStandby}
		if nc != nil {
			r.Sinks = append(r.Sinks, &feed.JetStream{Conn: nc, Stream: f.stream(), SubjectPrefix: f.NATS.SubjectPrefix,
				InFlightMax: f.NATS.InFlightMax, PublishTimeout: f.NATS.PublishTimeout, Observer: obs})
		}
		if len(f.Webhooks) > 0 {
			r.Sinks = append(r.Sinks, &feed.Webhooks{Receivers: f.receivers(), Client: &http.Client{}, Logger: logger, Observer: obs})
		}
		logger.Info("feed: relaying", "database", d.Name(), "slot", r.Slot)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", d.Label(), err)
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

// runFeedTail is `coffer feed tail -c CONFIG`: prints the stream's events
// as they come, one line each, until Ctrl-C (or --count of them).
func runFeedTail(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("feed tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configPath string
	fs.StringVar(&configPath, "c", "", "config file")
	fs.StringVar(&configPath, "config-file", "", "same as -c")
	ns := fs.String("ns", "*", "only this namespace")
	kind := fs.String("kind", "*", "only this event kind")
	all := fs.Bool("all", false, "from the stream's first event, not only new ones")
	count := fs.Int("count", 0, "stop after this many events (0: never)")
	asJSON := fs.Bool("json", false, "print each event as its JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, _, _, err := loadFeedConfig(configPath)
	if err == nil && cfg.Feed.NATS.URL == "" {
		err = errors.New("feed.nats.url is not set: there is no stream to tail")
	}
	if err != nil {
		fmt.Fprintln(stderr, "coffer feed tail:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := tail(ctx, &cfg.Feed, *ns+"."+*kind, *all, *count, *asJSON, stdout); err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, "coffer feed tail:", err)
		return 1
	}
	return 0
}

// tail prints the events of the stream under subject (after the prefix).
func tail(ctx context.Context, f *FeedConfig, subject string, all bool, count int, asJSON bool, w io.Writer) error {
	var opts []nats.Option
	if f.NATS.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(f.NATS.CredsFile))
	}
	nc, err := nats.Connect(f.NATS.URL, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.NATS.SubjectPrefix + "." + subject}, DeliverPolicy: jetstream.DeliverNewPolicy}
	if all {
		cc.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := js.OrderedConsumer(ctx, f.Stream.Name, cc)
	if err != nil {
		return err
	}
	for n := 0; count == 0 || n < count; n++ {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return err
		}
		if asJSON {
			fmt.Fprintf(w, "%s\n", msg.Data())
			continue
		}
		var ev feed.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return fmt.Errorf("message %s: %w", msg.Subject(), err)
		}
		fmt.Fprintln(w, eventLine(&ev))
	}
	return nil
}

// eventLine is an event in one line: when, whose, which, and what moved.
func eventLine(ev *feed.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s ns=%d player=%d v%d.%d %-13s trx=%d key=%q", ev.At.Format(time.RFC3339Nano), ev.Namespace, ev.PlayerID,
		ev.Version, ev.Seq, ev.Kind, ev.Trx.ID, ev.Trx.IdempotencyKey)
	for _, op := range ev.Ops {
		fmt.Fprintf(&b, " %s%+d", op.Currency, op.Amount)
		if op.Paid {
			b.WriteString("(paid)")
		}
	}
	for _, bal := range ev.Balances {
		fmt.Fprintf(&b, " [%s=%d]", bal.Currency, bal.Total)
	}
	return b.String()
}
