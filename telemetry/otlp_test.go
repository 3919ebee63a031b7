package telemetry

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// TestExporterWritesWhatTheSDKWould: the protobuf the exporter writes is,
// field for field, what the SDK's OTLP exporter makes of the same spans:
// every kind of attribute value, links (some dropped), a status, a remote
// parent with a tracestate, each kind of span.
func TestExporterWritesWhatTheSDKWould(t *testing.T) {
	spans := sampleSpans()
	res := resource.NewSchemaless(attribute.String("service.name", "coffer"), attribute.String("service.version", "1.2.3"))
	var stubs []sdktrace.ReadOnlySpan
	for _, s := range spans {
		links := make([]sdktrace.Link, len(s.links))
		for i, sc := range s.links {
			links[i] = sdktrace.Link{SpanContext: sc}
		}
		stubs = append(stubs, tracetest.SpanStub{Name: s.name, SpanContext: s.sc, Parent: s.parent, SpanKind: s.kind,
			StartTime: s.start, EndTime: s.end, Attributes: s.attrs[:s.nattrs], Links: links, DroppedLinks: s.droppedLinks,
			Status: sdktrace.Status{Code: s.status, Description: s.description}, Resource: res,
			InstrumentationScope: instrumentation.Scope{Name: scope}}.Snapshot())
	}
	sdk := &uploads{}
	if err := otlptrace.NewUnstarted(sdk).ExportSpans(context.Background(), stubs); err != nil {
		t.Fatal(err)
	}
	ours := &uploads{}
	if err := newExporter(ours, "1.2.3").exportSpans(context.Background(), spans); err != nil {
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

// sampleSpans are spans with something in every field the exporter
// writes, ended.
func sampleSpans() []*span {
	tracing := newTracing(discard{}, 1)
	state, _ := trace.ParseTraceState("vendor=x")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1, 2}, SpanID: [8]byte{3}, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
	_, c := tracing.startCall(context.Background(), remote, "call", [3]attribute.KeyValue{attribute.Bool("b", true), attribute.Int64("i", -7),
		attribute.Float64("f", 1.5)})
	call := c.span
	call.setAttributes(attribute.String("s", "é"), attribute.StringSlice("ss", []string{"x", ""}))
	call.fail("down")
	wait := call.child("queue wait", trace.SpanKindInternal)
	batch := tracing.root("batch")
	batch.setAttributes(attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -2}),
		attribute.Float64Slice("fs", []float64{0.5}), attribute.String("", "empty key"))
	for range linksMax + 2 {
		batch.addLink(call.sc)
	}
	batch.addLink(remote)
	call.addLink(batch.sc)
	trip := batch.child("round trip", trace.SpanKindClient)
	trip.setAttributes(postgresql, attribute.Int("coffer.statements", 3))
	trip.fail(errors.New("broken").Error())
	commit := trip.child("commit", trace.SpanKindInternal)
	spans := []*span{call, wait, batch, trip, commit}
	for i, s := range spans {
		s.start = time.Unix(int64(i), 2)
		s.finishAt(time.Unix(int64(i)+1, 3))
	}
	batch.status = codes.Ok
	return spans
}
