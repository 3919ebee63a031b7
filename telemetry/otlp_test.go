package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// TestExporterWritesWhatTheSDKWould: the protobuf the exporter writes
// itself is, field for field, what the SDK's OTLP exporter converts the
// same spans to: every kind of attribute value, events, links, a status,
// a remote parent, two instrumentation scopes.
func TestExporterWritesWhatTheSDKWould(t *testing.T) {
	spans := sampleSpans(t)
	sdk := &uploads{}
	if err := otlptrace.NewUnstarted(sdk).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	ours := &uploads{}
	if err := (&exporter{client: ours}).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	if len(sdk.requests) != 1 || len(ours.requests) != 1 {
		t.Fatalf("requests: SDK %d, ours %d", len(sdk.requests), len(ours.requests))
	}
	// What a collector receives: the request as marshalled, read back.
	var got collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(ours.requests[0], &got); err != nil {
		t.Fatal(err)
	}
	var want collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(sdk.requests[0], &want); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&want, &got) {
		t.Errorf("ours:\n%s\nthe SDK's:\n%s", prototext.Format(&got), prototext.Format(&want))
	}
}

// uploads is an OTLP client that keeps the requests it is given, marshalled.
type uploads struct{ requests [][]byte }

func (u *uploads) Start(context.Context) error { return nil }
func (u *uploads) Stop(context.Context) error  { return nil }
func (u *uploads) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&collector.ExportTraceServiceRequest{ResourceSpans: rs})
	u.requests = append(u.requests, b)
	return err
}

// sampleSpans are spans with something in every field the exporter writes.
func sampleSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	p := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithResource(resource.NewSchemaless(
		attribute.String("service.name", "coffer"), attribute.Int("n", 3))))
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1, 2}, SpanID: [8]byte{3}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	a := p.Tracer("a", trace.WithInstrumentationVersion("1.0"), trace.WithInstrumentationAttributes(attribute.Bool("x", true)))
	ctx, call := a.Start(ctx, "call", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(time.Unix(1, 2)))
	call.SetAttributes(attribute.Bool("b", true), attribute.Int64("i", -7), attribute.Float64("f", 1.5), attribute.String("s", "é"),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2}), attribute.Float64Slice("fs", []float64{0.5}),
		attribute.StringSlice("ss", []string{"x", ""}), attribute.String("", "empty key"))
	call.AddEvent("event", trace.WithAttributes(attribute.Int("e", 1)))
	call.RecordError(errors.New("failed"))
	call.SetStatus(codes.Error, "down")
	_, wait := a.Start(ctx, "queue wait")
	wait.End()
	_, batch := p.Tracer("b").Start(context.Background(), "batch", trace.WithNewRoot(), trace.WithLinks(
		trace.Link{SpanContext: call.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("l", "v")}}, trace.Link{SpanContext: remote}))
	call.End(trace.WithTimestamp(time.Unix(2, 3)))
	batch.SetStatus(codes.Ok, "")
	batch.End()
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans", len(ended))
	}
	return ended
}
