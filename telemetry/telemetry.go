// Package telemetry is coffer's tracing, in OpenTelemetry's terms and
// wire format: a span for each API call, its parent read from the
// caller's W3C traceparent; for each call that goes through a database's
// queue, the wait there; a span for each group-commit batch, linked with
// the calls it carries; and, through a pgx tracer, a span for each round
// trip to PostgreSQL and for the COMMIT (docs/operations.md#tracing).
// coffer makes the spans and writes their OTLP itself (ADR 0021).
//
// Tracing is off unless a Tracing is made, and free then: a nil *Tracing
// starts nothing, and the queue's and the batch's spans, like the round
// trips', start only under a call's span, so the calls of an instance
// without tracing allocate nothing more.
package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// scope names coffer's spans' instrumentation.
const scope = "github.com/cofferhq/coffer"

// Tracing makes the spans of one service instance. A nil *Tracing is
// tracing off. It is safe for concurrent use.
type Tracing struct {
	processor *processor
	// A call without a traceparent is traced when sampleAll, or when
	// the last 8 bytes of its trace id, shifted right once, are below
	// sampleBound: the SDK's TraceIDRatioBased, so that coffer and the
	// services beside it keep the same traces.
	sampleAll   bool
	sampleBound uint64
}

// newTracing returns a Tracing that exports its spans with e and
// samples as OTLP says.
func newTracing(e spanExporter, sampleRatio float64) *Tracing {
	return &Tracing{processor: newProcessor(e), sampleAll: sampleRatio >= 1, sampleBound: uint64(max(sampleRatio, 0) * (1 << 63))}
}

// OTLP returns a Tracing that sends its spans in batches over OTLP/gRPC
// to endpoint, a URL: http://host:4317 in clear text, https://host:4317
// over TLS. The standard OTEL_EXPORTER_OTLP_* variables add headers or
// certificates. It connects lazily, and a batch of spans waits for no
// call: a collector that is down or slow loses spans, never delays a
// call. A call whose caller sent a traceparent is traced as the caller
// chose (its sampled flag); one without, with the probability
// sampleRatio (0 … 1).
func OTLP(ctx context.Context, endpoint string, sampleRatio float64, version string) (*Tracing, error) {
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	client := otlptracegrpc.NewClient(otlptracegrpc.WithEndpointURL(endpoint))
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return newTracing(newExporter(client, version), sampleRatio), nil
}

// CheckEndpoint tells whether endpoint is an OTLP endpoint OTLP takes.
func CheckEndpoint(endpoint string) error {
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return fmt.Errorf("%q: must be a URL, http://host:4317 or https://host:4317", endpoint)
	}
	return nil
}

// Flush sends the spans ended so far, until ctx ends.
func (t *Tracing) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.processor.flush(ctx)
}

// Shutdown sends the spans not sent yet, until ctx ends, and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.processor.shutdown(ctx)
}

// Call is the span of one API call. Its zero value, from a nil Tracing
// or for a call not sampled, does nothing.
type Call struct{ span *span }

// Route is what the spans of an HTTP route's calls share, made once.
type Route struct {
	tracing *Tracing
	name    string
	attrs   [3]attribute.KeyValue
}

// HTTPRoute returns the Route of the calls of rpc on route (its pattern:
// /v1/namespaces/{ns}/…) with method, or nil with tracing off.
func (t *Tracing) HTTPRoute(method, route, rpc string) *Route {
	if t == nil {
		return nil
	}
	return &Route{t, method + " " + route, [3]attribute.KeyValue{
		attribute.String("http.request.method", method), attribute.String("http.route", route), attribute.String("coffer.call", rpc)}}
}

// Start starts the span of a call of r, its parent the traceparent
// header, if any. A nil Route starts nothing.
func (r *Route) Start(ctx context.Context, h http.Header) (context.Context, Call) {
	if r == nil {
		return ctx, Call{}
	}
	var parent trace.SpanContext
	if _, ok := h["Traceparent"]; ok { // Extract would canonicalize the key at each call
		parent = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(h)))
	}
	return r.tracing.startCall(ctx, parent, r.name, r.attrs)
}

// StartGRPC starts the span of a gRPC call of rpc (fullMethod:
// /coffer.v1.Wallet/Change), its parent the traceparent metadata, if any.
func (t *Tracing) StartGRPC(ctx context.Context, md map[string][]string, fullMethod, rpc string) (context.Context, Call) {
	if t == nil {
		return ctx, Call{}
	}
	var parent trace.SpanContext
	if _, ok := md["traceparent"]; ok {
		parent = trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, metadataCarrier(md)))
	}
	return t.startCall(ctx, parent, strings.TrimPrefix(fullMethod, "/"), [3]attribute.KeyValue{
		attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", rpc), attribute.String("coffer.call", rpc)})
}

// startCall starts the span of a call, of name and attrs, the child of
// parent (a caller's; none if invalid), if it is sampled: as parent says,
// or, without one, at the sample ratio.
func (t *Tracing) startCall(ctx context.Context, parent trace.SpanContext, name string, attrs [3]attribute.KeyValue) (context.Context, Call) {
	traceID := parent.TraceID()
	if !parent.IsValid() {
		traceID = newTraceID()
		if !t.samples(traceID) {
			return ctx, Call{}
		}
	} else if !parent.IsSampled() {
		return ctx, Call{}
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: newSpanID(),
		TraceFlags: parent.TraceFlags().WithSampled(true), TraceState: parent.TraceState()})
	s := &span{tracing: t, name: name, kind: trace.SpanKindServer, sc: sc, parent: parent, start: time.Now()}
	s.setAttributes(attrs[:]...)
	return withSpan(ctx, s), Call{s}
}

// samples tells whether a call of a new trace, id, is traced.
func (t *Tracing) samples(id trace.TraceID) bool {
	return t.sampleAll || binary.BigEndian.Uint64(id[8:])>>1 < t.sampleBound
}

// EndHTTP ends an HTTP call's span with the status it answered.
func (c Call) EndHTTP(status int, err error) {
	if c.span == nil {
		return
	}
	c.span.setAttributes(attribute.Int("http.response.status_code", status))
	c.End(err)
}

// End ends the call's span with its error (nil for success): its code
// in coffer.code, and the span's status an error when the server failed
// (a refusal of the request is the caller's, and not the server's,
// error).
func (c Call) End(err error) {
	if c.span == nil {
		return
	}
	if err != nil {
		code := coffer.ErrorCode(err)
		c.span.setAttributes(attribute.String("coffer.code", string(code)))
		if code.ServerFailure() {
			c.span.fail(string(code))
		}
	}
	c.span.finish()
}

// metadataCarrier reads the traceparent of gRPC metadata, whose keys are
// lower case.
type metadataCarrier map[string][]string

func (m metadataCarrier) Get(key string) string {
	if v := m[strings.ToLower(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (m metadataCarrier) Set(key, value string) { m[strings.ToLower(key)] = []string{value} }

func (m metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
