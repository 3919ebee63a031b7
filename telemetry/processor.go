package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
)

// The processor's bounds: those of the SDK's batch span processor.
const (
	spanBatchMax      = 512
	spanQueueMax      = 2048
	spanExportEvery   = 5 * time.Second
	spanExportTimeout = 30 * time.Second
)

// spanExporter sends spans that ended; one goroutine at a time calls it.
type spanExporter interface {
	exportSpans(ctx context.Context, spans []*span) error
	shutdown(ctx context.Context) error
}

// processor is a batch span processor that costs a span's end an append
// under a lock: the SDK's sends every span on a channel to its goroutine,
// which wakes for each (docs/benchmarks.md). Its goroutine wakes when a
// batch is full, or every spanExportEvery, and exports what is queued
// in batches of at most spanBatchMax. A full queue drops spans, said at
// the next export: a collector that is down or slow loses spans, and
// never delays a call.
type processor struct {
	exporter spanExporter
	full     chan struct{} // a batch is queued; holds one wake-up
	stop     chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	queue   []*span
	dropped int
	closed  bool

	// exporting is held by whoever exports: the exporter is called by
	// one goroutine at a time. spare is the queue exported last, kept
	// for the next swap.
	exporting sync.Mutex
	spare     []*span
}

func newProcessor(e spanExporter) *processor {
	p := &processor{exporter: e, full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		queue: make([]*span, 0, spanQueueMax), spare: make([]*span, 0, spanQueueMax)}
	go p.run()
	return p
}

// onEnd queues s, and wakes the goroutine when it completes a batch.
func (p *processor) onEnd(s *span) {
	p.mu.Lock()
	if p.closed || len(p.queue) == spanQueueMax {
		p.dropped++
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, s)
	n := len(p.queue)
	p.mu.Unlock()
	if n == spanBatchMax {
		select {
		case p.full <- struct{}{}:
		default:
		}
	}
}

func (p *processor) run() {
	defer close(p.done)
	tick := time.NewTicker(spanExportEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.full:
		case <-tick.C:
		case <-p.stop:
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), spanExportTimeout)
		if err := p.flush(ctx); err != nil {
			otel.Handle(err)
		}
		cancel()
	}
}

// flush exports the spans queued, until ctx ends.
func (p *processor) flush(ctx context.Context) error {
	p.exporting.Lock()
	defer p.exporting.Unlock()
	p.mu.Lock()
	spans := p.queue
	p.queue, p.spare = p.spare, nil
	dropped := p.dropped
	p.dropped = 0
	p.mu.Unlock()
	var err error
	if dropped > 0 {
		err = fmt.Errorf("%d spans dropped: the export queue was full", dropped)
	}
	for batch := range slices.Chunk(spans, spanBatchMax) {
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
			break
		}
		err = errors.Join(err, p.exporter.exportSpans(ctx, batch))
	}
	clear(spans)
	p.spare = spans[:0]
	return err
}

// shutdown stops the goroutine, exports the spans queued, until ctx
// ends, and shuts the exporter down.
func (p *processor) shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	return errors.Join(p.flush(ctx), p.exporter.shutdown(ctx))
}
