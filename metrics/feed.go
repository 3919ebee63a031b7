package metrics

import (
	"net/http"
	"time"

	"github.com/cofferhq/coffer/feed"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Feed holds the collectors of a `coffer feed` process; it implements
// feed.Observer. It is safe for concurrent use.
type Feed struct {
	registry  *prometheus.Registry
	events    *prometheus.CounterVec
	lag       *prometheus.HistogramVec
	retained  *prometheus.GaugeVec
	lost      *prometheus.GaugeVec
	sessions  *prometheus.CounterVec
	backlog   *prometheus.GaugeVec
	receivers *prometheus.GaugeVec
	held      *prometheus.GaugeVec
}

// NewFeed registers the feed's collectors, the Go runtime's and the
// process's.
func NewFeed() *Feed {
	f := &Feed{
		registry: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_feed_events_total",
			Help: "Events delivered, by database, sink (jetstream or webhook:<name>) and outcome (new, or duplicate: the receiving end had it already).",
		}, []string{"database", "sink", "outcome"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coffer_feed_lag_seconds",
			Help:    "Time from an event's commit in PostgreSQL to its delivery, by database and sink.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"database", "sink"}),
		retained: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_feed_slot_retained_bytes",
			Help: "WAL the relay's replication slot keeps from removal: grows while events are not delivered (broker down); past max_slot_wal_keep_size the slot is lost.",
		}, []string{"database"}),
		lost: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_feed_slot_lost",
			Help: "1 when the relay's slot was invalidated (wal_status lost): events are missing, consumers rebuild from the finlog (docs/events.md).",
		}, []string{"database"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_feed_sessions_ended_total",
			Help: "Relay sessions ended by a failure (the broker, the database, a receiver); the next one delivers again from the slot.",
		}, []string{"database"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_feed_webhook_backlog",
			Help: "Events waiting for a webhook receiver, by database and receiver.",
		}, []string{"database", "receiver"}),
		receivers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_feed_webhook_failing",
			Help: "1 while a webhook receiver fails its deliveries; 2 once it was dropped, its backlog past its bound (it misses events until the relay restarts).",
		}, []string{"database", "receiver"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_feed_held_seconds",
			Help: "How long the relay's stream has been held so far, 0 when it is not: a shard moved to the database, and the relay of its old home has not yet delivered the shard's events there (docs/events.md#shard-moves).",
		}, []string{"database"}),
	}
	f.registry.MustRegister(f.events, f.lag, f.retained, f.lost, f.sessions, f.backlog, f.receivers, f.held,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return f
}

// Handler serves the metrics in the Prometheus text format.
func (f *Feed) Handler() http.Handler { return promhttp.HandlerFor(f.registry, promhttp.HandlerOpts{}) }

// Delivered implements feed.Observer.
func (f *Feed) Delivered(database, sink string, duplicate bool, lag time.Duration) {
	outcome := "new"
	if duplicate {
		outcome = "duplicate"
	}
	f.events.WithLabelValues(database, sink, outcome).Inc()
	f.lag.WithLabelValues(database, sink).Observe(lag.Seconds())
}

// Slot implements feed.Observer.
func (f *Feed) Slot(database string, st feed.SlotState) {
	f.retained.WithLabelValues(database).Set(float64(st.RetainedBytes))
	lost := 0.0
	if st.WALStatus == "lost" {
		lost = 1
	}
	f.lost.WithLabelValues(database).Set(lost)
}

// SessionEnded implements feed.Observer.
func (f *Feed) SessionEnded(database string, err error) { f.sessions.WithLabelValues(database).Inc() }

// Held implements feed.Observer.
func (f *Feed) Held(database string, held time.Duration) {
	f.held.WithLabelValues(database).Set(held.Seconds())
}

// Receiver implements feed.ReceiverObserver.
func (f *Feed) Receiver(database, name string, backlog int, state feed.ReceiverState) {
	f.backlog.WithLabelValues(database, name).Set(float64(backlog))
	f.receivers.WithLabelValues(database, name).Set(float64(state))
}
