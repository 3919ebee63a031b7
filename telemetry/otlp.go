package telemetry

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// exporter sends spans with an OTLP client (otlptracegrpc's: its
// connection, TLS, retries and the OTEL_EXPORTER_OTLP_* variables), and
// writes their protobuf itself, into one buffer it reuses: the SDK's
// exporter builds a tree of protobuf structs per span, a few dozen
// allocations, and then marshals it (docs/benchmarks.md). The bytes go
// as the unknown fields of an empty ResourceSpans, which protobuf
// marshals as they are. Only one goroutine at a time calls exportSpans
// (the span processor's).
type exporter struct {
	client otlptrace.Client
	// resource is the Resource field of every request, written once.
	resource []byte
	buf      []byte
}

func newExporter(client otlptrace.Client, version string) *exporter {
	b, at := beginMessage(nil, 1)
	b = appendKeyValue(b, 1, attribute.String("service.name", "coffer"))
	b = appendKeyValue(b, 1, attribute.String("service.version", version))
	return &exporter{client: client, resource: endMessage(b, at)}
}

// exportSpans sends spans in one request.
func (e *exporter) exportSpans(ctx context.Context, spans []*span) error {
	if len(spans) == 0 {
		return nil
	}
	e.buf = appendScopeSpans(append(e.buf[:0], e.resource...), spans)
	rs := &tracepb.ResourceSpans{}
	rs.ProtoReflect().SetUnknown(e.buf)
	return e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{rs})
}

// shutdown closes the client's connection.
func (e *exporter) shutdown(ctx context.Context) error { return e.client.Stop(ctx) }

// appendScopeSpans appends the ScopeSpans of spans, field 2 of
// ResourceSpans: coffer's scope, and the spans.
func appendScopeSpans(b []byte, spans []*span) []byte {
	b, at := beginMessage(b, 2)
	b, scopeAt := beginMessage(b, 1)
	b = endMessage(appendString(b, 1, scope), scopeAt)
	for _, s := range spans {
		b = appendSpan(b, s)
	}
	return endMessage(b, at)
}

// appendSpan appends a Span, field 2 of ScopeSpans, as the SDK's
// exporter converts one.
func appendSpan(b []byte, s *span) []byte {
	b, at := beginMessage(b, 2)
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendString(b, 3, s.sc.TraceState().String())
	if psid := s.parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, 4, psid[:])
	}
	b = appendString(b, 5, s.name)
	b = appendVarint(b, 6, uint64(s.kind)) // OTLP numbers the kinds as the API does
	b = appendTime(b, 7, s.start.UnixNano())
	b = appendTime(b, 8, s.end.UnixNano())
	for _, kv := range s.attrs[:s.nattrs] {
		b = appendKeyValue(b, 9, kv)
	}
	for _, l := range s.links {
		b = appendLink(b, l)
	}
	b = appendVarint(b, 14, clamp(s.droppedLinks))
	b = appendStatus(b, s.status, s.description)
	b = appendFlags(b, 16, s.sc.TraceFlags(), s.parent)
	return endMessage(b, at)
}

// appendLink appends a Link, without the tracestate of the span it
// links, as the SDK's exporter does.
func appendLink(b []byte, sc trace.SpanContext) []byte {
	b, at := beginMessage(b, 13)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendFlags(b, 6, sc.TraceFlags(), sc)
	return endMessage(b, at)
}

// appendStatus appends a Status, an empty one when unset.
func appendStatus(b []byte, code codes.Code, description string) []byte {
	var c uint64
	switch code {
	case codes.Ok:
		c = uint64(tracepb.Status_STATUS_CODE_OK)
	case codes.Error:
		c = uint64(tracepb.Status_STATUS_CODE_ERROR)
	}
	b, at := beginMessage(b, 15)
	b = appendString(b, 2, description)
	b = appendVarint(b, 3, c)
	return endMessage(b, at)
}

// appendFlags appends the W3C trace flags, with whether parent is remote.
func appendFlags(b []byte, field protowire.Number, flags trace.TraceFlags, parent trace.SpanContext) []byte {
	f := uint32(flags) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	b = protowire.AppendTag(b, field, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, f)
}

// appendKeyValue appends a KeyValue as field.
func appendKeyValue(b []byte, field protowire.Number, kv attribute.KeyValue) []byte {
	b, at := beginMessage(b, field)
	b = appendString(b, 1, string(kv.Key))
	b = appendValue(b, 2, kv.Value)
	return endMessage(b, at)
}

// appendValue appends an AnyValue as field.
func appendValue(b []byte, field protowire.Number, v attribute.Value) []byte {
	b, at := beginMessage(b, field)
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = appendArray(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		list, in := beginMessage(b, 6)
		for _, kv := range v.AsMap() {
			list = appendKeyValue(list, 1, kv)
		}
		b = endMessage(list, in)
	case attribute.EMPTY:
	default:
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "INVALID")
	}
	return endMessage(b, at)
}

// appendArray appends an ArrayValue, field 5 of AnyValue, of vs.
func appendArray[T any](b []byte, vs []T, value func(T) attribute.Value) []byte {
	b, at := beginMessage(b, 5)
	for _, v := range vs {
		b = appendValue(b, 1, value(v))
	}
	return endMessage(b, at)
}

// beginMessage appends the tag of an embedded message as field; its
// fields follow, and endMessage puts its length before them.
func beginMessage(b []byte, field protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return b, len(b)
}

// endMessage inserts the length of the message begun at at, its fields
// having been appended: a message's length is known only once written,
// and moving its bytes along is cheaper than sizing it first.
func endMessage(b []byte, at int) []byte {
	n := len(b) - at
	size := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, size)...)
	copy(b[at+size:], b[at:at+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

// appendString, appendBytes and appendVarint leave out a field of
// proto3's default value, as protobuf does.
func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendTime appends a time in nanoseconds since the Unix epoch, or
// nothing for a time before it.
func appendTime(b []byte, field protowire.Number, unixNano int64) []byte {
	if unixNano <= 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, uint64(unixNano))
}

func clamp(n int) uint64 { return uint64(min(max(n, 0), math.MaxUint32)) }
