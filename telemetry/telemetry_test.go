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
	on := newTracing(discard{}, 1)
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

func (discard) exportSpans(context.Context, []*span) error { return nil }
func (discard) shutdown(context.Context) error             { return nil }

// TestSampling: a call with a traceparent is traced as its caller chose,
// in the caller's trace, under its tracestate; one without, at the
// sample ratio, on the same traces as the SDK's ratio sampler picks (the
// other services of a deployment); a batch with a traced call is traced.
func TestSampling(t *testing.T) {
	kept := &keeping{}
	tracing := newTracing(kept, 0)
	w := newWrite(tracing)
	w.header.Set("Tracestate", "vendor=x")
	w.run()
	tracing.Flush(context.Background())
	if len(kept.spans) != 3 {
		t.Fatalf("a sampled traceparent, ratio 0: %d spans, want 3 (call, wait, batch)", len(kept.spans))
	}
	call := kept.spans[2]
	if call.sc.TraceID().String() != traceparent[3:35] || call.parent.SpanID().String() != traceparent[36:52] ||
		!call.parent.IsRemote() || call.sc.TraceState().String() != "vendor=x" {
		t.Errorf("the call's span: trace %s, parent %s (remote %v), tracestate %q", call.sc.TraceID(), call.parent.SpanID(),
			call.parent.IsRemote(), call.sc.TraceState())
	}
	w.header.Set("Traceparent", traceparent[:53]+"00")
	w.run()
	delete(w.header, "Traceparent")
	w.run()
	tracing.Flush(context.Background())
	if len(kept.spans) != 3 {
		t.Errorf("a traceparent not sampled, and none at ratio 0: %d spans, want none", len(kept.spans)-3)
	}
	for _, ratio := range []float64{0, 0.3, 1} {
		tracing, sdk := newTracing(discard{}, ratio), sdktrace.TraceIDRatioBased(ratio)
		defer tracing.Shutdown(context.Background())
		for range 1000 {
			id := newTraceID()
			want := sdk.ShouldSample(sdktrace.SamplingParameters{TraceID: id}).Decision == sdktrace.RecordAndSample
			if tracing.samples(id) != want {
				t.Fatalf("ratio %v, trace %s: sampled %v, the SDK's %v", ratio, id, !want, want)
			}
		}
	}
}

// keeping is an exporter that keeps what it is given.
type keeping struct{ spans []*span }

func (k *keeping) exportSpans(_ context.Context, spans []*span) error {
	k.spans = append(k.spans, spans...)
	return nil
}
func (k *keeping) shutdown(context.Context) error { return nil }

// TestBatchOfAnEndedCall: a call that gave up waiting ends before its
// batch starts; the batch still links it, and ends its wait, but the
// call's span, already the exporter's, is left as it ended.
func TestBatchOfAnEndedCall(t *testing.T) {
	kept := &keeping{}
	tracing := newTracing(kept, 1)
	w := newWrite(tracing)
	ctx, call := w.route.Start(context.Background(), w.header)
	queued := Queue(ctx)
	call.End(context.DeadlineExceeded)
	tracing.Flush(context.Background()) // the call's span is being exported
	var batch Batch
	batch.Join(&queued)
	batch.Start("coffer_0", "writes", 1)
	batch.End()
	tracing.Flush(context.Background())
	if len(kept.spans) != 3 || len(kept.spans[0].links) != 0 || len(kept.spans[2].links) != 1 {
		t.Fatalf("spans %d (want the call, its wait and the batch); the call's links %v, want none", len(kept.spans), kept.spans[0].links)
	}
}
