package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
)

// TestProcessorBatchesAndBounds: the processor exports in batches of at
// most spanBatchMax, holds at most spanQueueMax spans while its exporter
// is busy, says how many it dropped, and exports what is left at
// shutdown.
func TestProcessorBatchesAndBounds(t *testing.T) {
	var reported []error
	defer otel.SetErrorHandler(otel.GetErrorHandler())
	var mu sync.Mutex
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }))
	e := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	tracing := newTracing(e, 1)
	end := func(n int) {
		for range n {
			tracing.root("span").finish()
		}
	}
	end(spanBatchMax) // a full batch wakes the goroutine, whose export blocks
	<-e.entered
	end(spanQueueMax + 5) // the queue fills while it does
	close(e.release)
	err := tracing.Shutdown(context.Background())
	mu.Lock()
	reported = append(reported, err)
	mu.Unlock()
	if e.spans != spanBatchMax+spanQueueMax || e.largest > spanBatchMax {
		t.Errorf("exported %d spans, batches of at most %d; want %d, at most %d", e.spans, e.largest, spanBatchMax+spanQueueMax, spanBatchMax)
	}
	if !strings.Contains(errors.Join(reported...).Error(), "5 spans dropped") {
		t.Errorf("the drops are not said: %v", reported)
	}
	if !e.shut {
		t.Error("the exporter was not shut down")
	}
}

// blocking is an exporter whose first export waits for release.
type blocking struct {
	entered, release chan struct{}
	once             sync.Once
	spans, largest   int
	shut             bool
}

func (b *blocking) exportSpans(_ context.Context, spans []*span) error {
	b.once.Do(func() { close(b.entered); <-b.release })
	b.spans += len(spans)
	b.largest = max(b.largest, len(spans))
	return nil
}

func (b *blocking) shutdown(context.Context) error { b.shut = true; return nil }
