package telemetry

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
)

// exporter sends spans with an OTLP client (otlptracegrpc's: its
// connection, TLS, retries and the OTEL_EXPORTER_OTLP_* variables), but
// writes their protobuf itself, into one buffer it reuses: the SDK's
// exporter builds a tree of protobuf structs per span, a few dozen
// allocations, and then marshals it, and both were a third of tracing's
// cost (docs/benchmarks.md). The bytes go as the unknown fields of an
// empty ResourceSpans, which protobuf marshals as they are. Only one
// goroutine at a time calls ExportSpans (the span processor's).
type exporter struct {
	client otlptrace.Client
	buf    []byte
}

// ExportSpans sends spans, of one resource, in one request.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	e.buf = appendResourceSpans(e.buf[:0], spans)
	rs := &tracepb.ResourceSpans{}
	rs.ProtoReflect().SetUnknown(e.buf)
	return e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{rs})
}

// Shutdown closes the client's connection.
func (e *exporter) Shutdown(ctx context.Context) error { return e.client.Stop(ctx) }

// appendResourceSpans appends the fields of an OTLP ResourceSpans holding
// spans, which share the resource of the first: a ScopeSpans for each run
// of spans of one instrumentation scope.
func appendResourceSpans(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	res := spans[0].Resource()
	b = appendResource(b, res)
	for i := 0; i < len(spans); {
		scope := spans[i].InstrumentationScope()
		var at int
		b, at = beginMessage(b, 2) // scope_spans
		b = appendScope(b, scope)
		for ; i < len(spans) && spans[i].InstrumentationScope() == scope; i++ {
			b = appendSpan(b, spans[i])
		}
		b = appendString(b, 3, scope.SchemaURL)
		b = endMessage(b, at)
	}
	return appendString(b, 3, res.SchemaURL())
}

func appendResource(b []byte, res *resource.Resource) []byte {
	b, at := beginMessage(b, 1)
	for iter := res.Iter(); iter.Next(); {
		b = appendKeyValue(b, 1, iter.Attribute())
	}
	return endMessage(b, at)
}

func appendScope(b []byte, scope instrumentation.Scope) []byte {
	if scope == (instrumentation.Scope{}) {
		return b
	}
	b, at := beginMessage(b, 1)
	b = appendString(b, 1, scope.Name)
	b = appendString(b, 2, scope.Version)
	for iter := scope.Attributes.Iter(); iter.Next(); {
		b = appendKeyValue(b, 3, iter.Attribute())
	}
	return endMessage(b, at)
}

// appendSpan appends a Span, field 2 of ScopeSpans, as the SDK's
// exporter converts it.
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	b, at := beginMessage(b, 2)
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendString(b, 3, sc.TraceState().String())
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, 4, psid[:])
	}
	b = appendString(b, 5, s.Name())
	if kind := s.SpanKind(); kind >= trace.SpanKindInternal && kind <= trace.SpanKindConsumer {
		b = appendVarint(b, 6, uint64(kind)) // OTLP numbers the kinds as the API does
	}
	b = appendTime(b, 7, s.StartTime().UnixNano())
	b = appendTime(b, 8, s.EndTime().UnixNano())
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, 9, kv)
	}
	b = appendVarint(b, 10, clamp(s.DroppedAttributes()))
	for _, e := range s.Events() {
		b = appendEvent(b, e)
	}
	b = appendVarint(b, 12, clamp(s.DroppedEvents()))
	for _, l := range s.Links() {
		b = appendLink(b, l)
	}
	b = appendVarint(b, 14, clamp(s.DroppedLinks()))
	b = appendStatus(b, s.Status())
	b = appendFlags(b, 16, sc.TraceFlags(), parent)
	return endMessage(b, at)
}

func appendEvent(b []byte, e sdktrace.Event) []byte {
	b, at := beginMessage(b, 11)
	b = appendTime(b, 1, e.Time.UnixNano())
	b = appendString(b, 2, e.Name)
	for _, kv := range e.Attributes {
		b = appendKeyValue(b, 3, kv)
	}
	b = appendVarint(b, 4, clamp(e.DroppedAttributeCount))
	return endMessage(b, at)
}

func appendLink(b []byte, l sdktrace.Link) []byte {
	b, at := beginMessage(b, 13)
	tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
	b = appendBytes(b, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	b = appendString(b, 3, l.SpanContext.TraceState().String())
	for _, kv := range l.Attributes {
		b = appendKeyValue(b, 4, kv)
	}
	b = appendVarint(b, 5, clamp(l.DroppedAttributeCount))
	b = appendFlags(b, 6, l.SpanContext.TraceFlags(), l.SpanContext)
	return endMessage(b, at)
}

// appendStatus appends a Status, an empty one when unset.
func appendStatus(b []byte, st sdktrace.Status) []byte {
	var code uint64
	switch st.Code {
	case codes.Ok:
		code = uint64(tracepb.Status_STATUS_CODE_OK)
	case codes.Error:
		code = uint64(tracepb.Status_STATUS_CODE_ERROR)
	}
	b, at := beginMessage(b, 15)
	b = appendString(b, 2, st.Description)
	b = appendVarint(b, 3, code)
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
