package telemetry

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/cofferhq/coffer"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// TestOffAllocatesNothing: with tracing off (a nil Tracing), every seam a
// call passes — its span over either transport, its wait in a queue, its
// batch — allocates nothing, even for a call that sent a traceparent.
func TestOffAllocatesNothing(t *testing.T) {
	var off *Tracing
	md := map[string][]string{"traceparent": {traceparent}}
	failure := &coffer.Error{Code: coffer.CodeUnavailable, Err: errors.New("down")}
	w := newWrite(off)
	allocs := testing.AllocsPerRun(1000, func() {
		w.run()
		_, call := off.StartGRPC(context.Background(), md, "/coffer.v1.Wallet/Change", "Change")
		call.End(failure)
	})
	if allocs != 0 {
		t.Errorf("tracing off: %v allocations per call, want 0", allocs)
	}
}

// BenchmarkCall is what tracing adds to one write that is alone in its
// batch, off and on (its spans exported to nowhere): its call's span over
// HTTP, its wait in the queue and its batch; the round trips' spans are
// postgres.RoundTrips's, two or three more per batch.
//
//	go test -run '^$' -bench Call -benchmem ./telemetry
func BenchmarkCall(b *testing.B) {
	on := New(newProcessor(discard{}), 1, "bench")
	defer on.Shutdown(context.Background())
	for name, tracing := range map[string]*Tracing{"off": nil, "on": on} {
		b.Run(name, func(b *testing.B) {
			w := newWrite(tracing)
			for b.Loop() {
				w.run()
			}
		})
	}
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// write is one write sent over HTTP with a traceparent, alone in its
// batch. Its wait is a field of its job in the queue, which the queue
// allocates anyway.
type write struct {
	route  *Route
	header http.Header
	job    struct{ queued Queued }
}

func newWrite(tracing *Tracing) *write {
	return &write{route: tracing.HTTPRoute("POST", "/v1/namespaces/{ns}/players/{player}/transactions", "Change"),
		header: http.Header{"Traceparent": {traceparent}}}
}

// run passes the write through the seams tracing has: its call's span,
// its wait in the queue, its batch.
func (w *write) run() {
	ctx, call := w.route.Start(context.Background(), w.header)
	w.job.queued = Queue(ctx)
	var batch Batch
	batch.Join(&w.job.queued)
	_ = batch.Start("coffer_0", "writes", 1)
	batch.End()
	call.EndHTTP(http.StatusCreated, nil)
}

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
