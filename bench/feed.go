package bench

import (
	"fmt"
	"io"
	"time"
)

// FeedFigures are the change feed's, when a --self stack runs it beside
// coffer (coffer bench --feed): then the baseline is the same coffer with
// the feed off, and the per operation table compares the two.
type FeedFigures struct {
	// Events is how many events the stream stored.
	Events int `json:"events"`
	// Lag is from each event's commit in PostgreSQL to its storing in the
	// stream, in milliseconds.
	Lag Latency `json:"lag_ms"`
	// RelayCPUPer1000Events is the relay's (coffer feed's) CPU.
	RelayCPUPer1000Events float64 `json:"relay_cpu_s_per_1000_events"`
}

// NewFeedFigures summarizes the lags of the stored events and the CPU
// seconds the relay spent on them.
func NewFeedFigures(lags []time.Duration, relayCPU float64) *FeedFigures {
	h := newHistogram()
	for _, l := range lags {
		_ = h.RecordValue(min(max(l.Microseconds(), 1), latencyUsMax))
	}
	return &FeedFigures{Events: len(lags), Lag: summarize(h), RelayCPUPer1000Events: 1000 * relayCPU / float64(max(len(lags), 1))}
}

func (f *FeedFigures) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nchange feed: %d events stored; lag from commit to stored ms: p50 %.2f  p99 %.2f  max %.2f; relay CPU s / 1000 events %.3f\n",
		f.Events, f.Lag.P50, f.Lag.P99, f.Lag.Max, f.RelayCPUPer1000Events)
}
