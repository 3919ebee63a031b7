// Package telemetry is coffer's tracing, with OpenTelemetry: a span for
// each API call, its parent read from the caller's W3C traceparent; for
// each call that goes through a database's queue, the wait there; a span
// for each group-commit batch, linked with the calls it carries; and,
// through a pgx tracer, a span for each round trip to PostgreSQL and for
// the COMMIT (docs/operations.md#tracing).
//
// Tracing is off unless a Tracing is made, and free then: a nil *Tracing
// starts nothing, and the queue's and the batch's spans, like the round
// trips', start only under a span that records, so the calls of an
// instance without tracing allocate nothing more.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/cofferhq/coffer"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// scope names coffer's spans' instrumentation.
const scope = "github.com/cofferhq/coffer"

// Tracing makes the spans of one service instance. A nil *Tracing is
// tracing off. It is safe for concurrent use.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New returns a Tracing that hands its spans to processor. A call whose
// caller sent a traceparent is traced as the caller chose (its sampled
// flag); one without, with the probability sampleRatio (0 … 1).
func New(processor sdktrace.SpanProcessor, sampleRatio float64, version string) *Tracing {
	p := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(processor),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", "coffer"), attribute.String("service.version", version))))
	return &Tracing{provider: p, tracer: p.Tracer(scope)}
}

// OTLP returns a Tracing (New) that sends its spans in batches over
// OTLP/gRPC to endpoint, a URL: http://host:4317 in clear text,
// https://host:4317 over TLS. The standard OTEL_EXPORTER_OTLP_* variables
// add headers or certificates. It connects lazily, and a batch of spans
// waits for no call: a collector that is down or slow loses spans, never
// delays a call.
func OTLP(ctx context.Context, endpoint string, sampleRatio float64, version string) (*Tracing, error) {
	if err := CheckEndpoint(endpoint); err != nil {
		return nil, err
	}
	client := otlptracegrpc.NewClient(otlptracegrpc.WithEndpointURL(endpoint))
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return New(newProcessor(&exporter{client: client}), sampleRatio, version), nil
}

// CheckEndpoint tells whether endpoint is an OTLP endpoint OTLP takes.
func CheckEndpoint(endpoint string) error {
	if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
		return fmt.Errorf("%q: must be a URL, http://host:4317 or https://host:4317", endpoint)
	}
	return nil
}

// Shutdown sends the spans not sent yet, until ctx ends, and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Call is the span of one API call. Its attributes wait in it for its
// end, to go to the span in one copy with its outcome's: given at its
// start, they were copied into the options, then into the span, which
// the outcome's grew again. Its zero value, from a nil Tracing, does
// nothing.
type Call struct {
	span  trace.Span
	attrs [3]attribute.KeyValue
}

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
	if _, ok := h["Traceparent"]; ok { // Extract would canonicalize the key at each call
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(h))
	}
	ctx, span := r.tracing.tracer.Start(ctx, r.name, serverKind)
	return ctx, Call{span, r.attrs}
}

// StartGRPC starts the span of a gRPC call of rpc (fullMethod:
// /coffer.v1.Wallet/Change), its parent the traceparent metadata, if any.
func (t *Tracing) StartGRPC(ctx context.Context, md map[string][]string, fullMethod, rpc string) (context.Context, Call) {
	if t == nil {
		return ctx, Call{}
	}
	if _, ok := md["traceparent"]; ok {
		ctx = propagation.TraceContext{}.Extract(ctx, metadataCarrier(md))
	}
	ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(fullMethod, "/"), serverKind)
	return ctx, Call{span, [3]attribute.KeyValue{
		attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", rpc), attribute.String("coffer.call", rpc)}}
}

// serverKind is the kind of a call's span, an option made once.
var serverKind = trace.WithSpanKind(trace.SpanKindServer)

// EndHTTP ends an HTTP call's span with the status it answered.
func (c Call) EndHTTP(status int, err error) {
	if c.span == nil {
		return
	}
	c.span.SetAttributes(c.attrs[0], c.attrs[1], c.attrs[2], attribute.Int("http.response.status_code", status))
	c.end(err)
}

// End ends the call's span with its error (nil for success).
func (c Call) End(err error) {
	if c.span == nil {
		return
	}
	c.span.SetAttributes(c.attrs[0], c.attrs[1], c.attrs[2])
	c.end(err)
}

// end ends the span with err: its code in coffer.code, and the span's
// status an error when the server failed (a refusal of the request is
// the caller's, and not the server's, error).
func (c Call) end(err error) {
	if err != nil {
		code := coffer.ErrorCode(err)
		c.span.SetAttributes(attribute.String("coffer.code", string(code)))
		if code.ServerFailure() {
			c.span.SetStatus(codes.Error, string(code))
		}
	}
	c.span.End()
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
