package bench

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to 60 s, with 3
// significant digits.
const latencyUsMax = 60_000_000

func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, latencyUsMax, 3) }

// Latency is a latency summary in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	Std  float64 `json:"stddev"`
}

// latencyUs is d as a histogram records it.
func latencyUs(d time.Duration) int64 { return min(max(d.Microseconds(), 1), latencyUsMax) }

// summarize reads a histogram of microseconds as milliseconds.
func summarize(h *hdrhistogram.Histogram) Latency {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		P50: ms(h.ValueAtQuantile(50)), P95: ms(h.ValueAtQuantile(95)), P99: ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)), Max: ms(h.Max()), Mean: h.Mean() / 1000, Std: h.StdDev() / 1000,
	}
}

// Point is one interval of a run's time series.
type Point struct {
	Second float64 `json:"t"`
	TPS    float64 `json:"tps"`
	MeanMs float64 `json:"mean_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// recorder collects the latencies and errors of a run. It is safe for
// concurrent use.
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	total    *hdrhistogram.Histogram
	second   *hdrhistogram.Histogram // since the last series point
	progress *hdrhistogram.Histogram // since the last progress line
	// ops counts the ops completed; secondOps and progressOps those since
	// the last series point and progress line. A call of the Batch
	// workload is its grants, its latency one value.
	ops, secondOps, progressOps int64
	errors                      map[string]int64
	series                      []Point
	lastTick                    time.Time
	lastProg                    time.Time
}

func newRecorder(start time.Time) *recorder {
	return &recorder{start: start, lastTick: start, lastProg: start, total: newHistogram(), second: newHistogram(),
		progress: newHistogram(), errors: map[string]int64{}}
}

// record adds a completed call of n ops; code is "" for success.
func (r *recorder) record(d time.Duration, code string, n int64) {
	us := latencyUs(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops += n
	r.secondOps += n
	r.progressOps += n
	_ = r.total.RecordValue(us)
	_ = r.second.RecordValue(us)
	_ = r.progress.RecordValue(us)
	if code != "" {
		r.errors[code]++
	}
}

// tick closes a series interval.
func (r *recorder) tick(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.series = append(r.series, point(r.second, r.secondOps, now.Sub(r.start), now.Sub(r.lastTick)))
	r.second.Reset()
	r.secondOps = 0
	r.lastTick = now
}

// progressLine closes a progress interval and returns its summary.
func (r *recorder) progressLine(now time.Time) (Point, Latency) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, l := point(r.progress, r.progressOps, now.Sub(r.start), now.Sub(r.lastProg)), summarize(r.progress)
	r.progress.Reset()
	r.progressOps = 0
	r.lastProg = now
	return p, l
}

// point is an interval of ops ops whose calls' latencies are in h.
func point(h *hdrhistogram.Histogram, ops int64, at, span time.Duration) Point {
	return Point{Second: at.Seconds(), TPS: float64(ops) / span.Seconds(),
		MeanMs: h.Mean() / 1000, P99Ms: float64(h.ValueAtQuantile(99)) / 1000}
}

// median of xs (0 for none); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio is a/b, or NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
