// Package metrics is coffer's Prometheus instrumentation: request latency
// by call and outcome, errors by code, in-flight requests, pool usage and
// availability per database, group commit's batches and queues, and the
// sweepers. All names start with coffer_.
package metrics

import (
	"net/http"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the collectors of one service instance. It is safe for
// concurrent use.
type Metrics struct {
	registry            *prometheus.Registry
	requests            *prometheus.HistogramVec
	errors              *prometheus.CounterVec
	inFlight            prometheus.Gauge
	databaseUp          *prometheus.GaugeVec
	syncStandbys        *prometheus.GaugeVec
	shardsAvailable     prometheus.Gauge
	sweeps              *prometheus.CounterVec
	swept               *prometheus.CounterVec
	batchChanges        *prometheus.CounterVec
	groupCommitSize     *prometheus.HistogramVec
	groupCommitDuration *prometheus.HistogramVec
	groupCommitAttempts *prometheus.CounterVec
	fenced              *prometheus.CounterVec
	moves               prometheus.Counter
	movePause           prometheus.Histogram
	movesInProgress     prometheus.Gauge
}

// latencyBuckets are 0.25 ms … 8 s: a balance change takes about a
// millisecond.
var latencyBuckets = prometheus.ExponentialBuckets(0.00025, 2, 16)

// New registers coffer's collectors, the Go runtime's and the process's,
// and the pool usage of every database of router.
func New(router *shard.Router) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coffer_request_duration_seconds",
			Help:    "Latency of API calls by call and outcome (ok or the error code).",
			Buckets: latencyBuckets,
		}, []string{"call", "outcome"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_errors_total", Help: "API errors by code.",
		}, []string{"code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coffer_requests_in_flight", Help: "API calls being served.",
		}),
		databaseUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_database_up", Help: "1 if the last check reached the shard database and its schema is verified.",
		}, []string{"database"}),
		syncStandbys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "coffer_database_synchronous_standbys",
			Help: "Standbys streaming in sync from the primary of a shard database with several hosts (0: an acknowledged write could be lost at the next failover).",
		}, []string{"database"}),
		shardsAvailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coffer_shards_available", Help: "Shards whose database is up.",
		}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_sweeper_runs_total", Help: "Sweeper passes by sweeper (holds, lots, marks) and outcome (ok, error).",
		}, []string{"sweeper", "outcome"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_sweeper_items_total", Help: "Holds rolled back as expired (holds), players whose expired lots were recorded (lots) and marks of committers gone removed (marks).",
		}, []string{"sweeper"}),
		batchChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_batch_changes_total", Help: "Changes sent in batches, by outcome (ok or the error code).",
		}, []string{"outcome"}),
		groupCommitSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coffer_group_commit_batch_size",
			Help: "Writes or balance reads per group-commit batch, by database and kind (writes, reads): how much each transaction carries.",
			// 1 … 1024: a batch holds batches.size_max writes, or a batch call's up to 1000.
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"database", "kind"}),
		groupCommitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "coffer_group_commit_batch_duration_seconds",
			Help:    "Time a group-commit batch took from its start to its answers, retries and splits included, by database and kind.",
			Buckets: latencyBuckets,
		}, []string{"database", "kind"}),
		groupCommitAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_group_commit_attempts_total",
			Help: "Attempts of group-commit batches of writes by database and how they ended (committed, careful: run again at once taking the locks (a race, a write sent again or refused), retried, split, cut, failed; not_run: a try not made, the database being down).",
		}, []string{"database", "outcome"}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coffer_shard_fenced_total",
			Help: "Writes and balance reads (kind) whose batch met the fence of a shard that moved away from database, sent to the shard's new home.",
		}, []string{"database", "kind"}),
		moves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coffer_shard_moves_total", Help: "Shard moves this instance saw cut over (coffer shard move).",
		}),
		movePause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "coffer_shard_move_pause_seconds",
			Help: "How long each shard move this instance saw cut over paused its shard's writes, as the mover measured it.",
			// 10 ms … 20 s: a cut-over pauses its shard for a fraction of a second.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		movesInProgress: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coffer_shard_moves_in_progress", Help: "Shard moves begun and not cut over (copying) or being cut over.",
		}),
	}
	shards := prometheus.NewGauge(prometheus.GaugeOpts{Name: "coffer_shards", Help: "The shard_count of the deployment."})
	shards.Set(float64(router.Map().ShardCount()))
	m.registry.MustRegister(m.requests, m.errors, m.inFlight, m.databaseUp, m.syncStandbys, m.shardsAvailable, m.sweeps, m.swept, m.batchChanges, m.groupCommitSize, m.groupCommitDuration, m.groupCommitAttempts, shards,
		m.fenced, m.moves, m.movePause, m.movesInProgress,
		poolCollector{router},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Describe sends the description of every metric the instance exports,
// those not observed yet too: what a dashboard or an alert may query
// (deploy/, checked against it by the tests).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { m.registry.Describe(ch) }

// Begin counts a call in flight; the returned func ends it with its error
// (nil for success).
func (m *Metrics) Begin(call string) func(err error) {
	start := time.Now()
	m.inFlight.Inc()
	return func(err error) {
		m.inFlight.Dec()
		m.requests.WithLabelValues(call, m.outcome(err)).Observe(time.Since(start).Seconds())
	}
}

// outcome is "ok" or err's code, which it counts in coffer_errors_total.
func (m *Metrics) outcome(err error) string {
	if err == nil {
		return "ok"
	}
	code := string(coffer.ErrorCode(err))
	m.errors.WithLabelValues(code).Inc()
	return code
}

// BatchChange counts one change of a batch with its error (nil for
// success); a failed change counts in coffer_errors_total too, as a call
// would, so that an alert on a code sees batches.
func (m *Metrics) BatchChange(err error) {
	m.batchChanges.WithLabelValues(m.outcome(err)).Inc()
}

// Batch records a group-commit batch of kind on database: its writes or
// reads, and how long it took.
func (m *Metrics) Batch(database, kind string, items int, took time.Duration) {
	m.groupCommitSize.WithLabelValues(database, kind).Observe(float64(items))
	m.groupCommitDuration.WithLabelValues(database, kind).Observe(took.Seconds())
}

// Attempt records how an attempt of a batch of writes on database ended.
func (m *Metrics) Attempt(database, outcome string) {
	m.groupCommitAttempts.WithLabelValues(database, outcome).Inc()
}

// Fenced records items of kind that met the fence of a shard that moved
// away from database.
func (m *Metrics) Fenced(database, kind string, items int) {
	m.fenced.WithLabelValues(database, kind).Add(float64(items))
}

// Moved records a shard move seen cut over, and the pause it caused.
func (m *Metrics) Moved(pause time.Duration) {
	m.moves.Inc()
	m.movePause.Observe(pause.Seconds())
}

// SetMovesInProgress records how many shard moves are in progress.
func (m *Metrics) SetMovesInProgress(n int) { m.movesInProgress.Set(float64(n)) }

// WatchQueues reads, at each scrape, the jobs waiting for each database's
// committers: queues calls its argument once per database and kind.
func (m *Metrics) WatchQueues(queues func(yield func(database, kind string, jobs int))) {
	m.registry.MustRegister(queueCollector(queues))
}

// WatchBatchPools reads, at each scrape, the connections of each
// database's pool of batches: pools calls its argument once per database.
func (m *Metrics) WatchBatchPools(pools func(yield func(database string, pool *pgxpool.Stat))) {
	m.registry.MustRegister(batchPoolCollector(pools))
}

// WatchRequestBytes reads, at each scrape, the bytes of request bodies
// the calls in flight hold (shed.Budget).
func (m *Metrics) WatchRequestBytes(held func() int64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "coffer_request_bytes_held", Help: "Bytes of request bodies (gRPC: messages) the API calls in flight hold.",
	}, func() float64 { return float64(held()) }))
}

// SetDatabaseUp records a database check.
func (m *Metrics) SetDatabaseUp(database string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	m.databaseUp.WithLabelValues(database).Set(v)
}

// SetSynchronousStandbys records how many standbys a database's primary
// has in sync.
func (m *Metrics) SetSynchronousStandbys(database string, n int) {
	m.syncStandbys.WithLabelValues(database).Set(float64(n))
}

// SetShardsAvailable records how many shards are on databases that are up.
func (m *Metrics) SetShardsAvailable(n int) { m.shardsAvailable.Set(float64(n)) }

// Swept records one sweeper pass that handled n items.
func (m *Metrics) Swept(sweeper string, n int, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.sweeps.WithLabelValues(sweeper, outcome).Inc()
	m.swept.WithLabelValues(sweeper).Add(float64(n))
}

// poolCollector reads each database pool's usage at scrape time.
type poolCollector struct{ router *shard.Router }

var poolConns = prometheus.NewDesc("coffer_pool_connections",
	"Connections of a shard database's pool by state (acquired, idle, max).", []string{"database", "state"}, nil)

var poolWaits = prometheus.NewDesc("coffer_pool_acquire_waits_total",
	"Acquires that had to wait for a connection.", []string{"database"}, nil)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolConns
	ch <- poolWaits
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for i, db := range c.router.Map().Databases() {
		st := c.router.Database(i).Stat()
		name := db.Name()
		for state, v := range map[string]int32{"acquired": st.AcquiredConns(), "idle": st.IdleConns(), "max": st.MaxConns()} {
			ch <- prometheus.MustNewConstMetric(poolConns, prometheus.GaugeValue, float64(v), name, state)
		}
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(st.EmptyAcquireCount()), name)
	}
}

// batchPoolCollector reads the batches' pools at scrape time.
type batchPoolCollector func(yield func(database string, pool *pgxpool.Stat))

var batchPoolConns = prometheus.NewDesc("coffer_batch_pool_connections",
	"Connections of a database's pool of group-commit batches (batches.committers + batches.readers) by state (acquired, idle, max).",
	[]string{"database", "state"}, nil)

func (c batchPoolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- batchPoolConns }

func (c batchPoolCollector) Collect(ch chan<- prometheus.Metric) {
	c(func(database string, st *pgxpool.Stat) {
		for state, v := range map[string]int32{"acquired": st.AcquiredConns(), "idle": st.IdleConns(), "max": st.MaxConns()} {
			ch <- prometheus.MustNewConstMetric(batchPoolConns, prometheus.GaugeValue, float64(v), database, state)
		}
	})
}

// queueCollector reads the committers' queues at scrape time.
type queueCollector func(yield func(database, kind string, jobs int))

var queueCalls = prometheus.NewDesc("coffer_group_commit_queue_calls",
	"Calls waiting for a database's committers, by kind (writes, reads); batches.queue_max is the most, beyond which calls are refused (overloaded).",
	[]string{"database", "kind"}, nil)

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueCalls }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	c(func(database, kind string, jobs int) {
		ch <- prometheus.MustNewConstMetric(queueCalls, prometheus.GaugeValue, float64(jobs), database, kind)
	})
}
