package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// span is one of coffer's spans: what its OTLP Span carries, and no
// more. coffer makes its spans itself, where the SDK's take a lock to
// start, copy and de-duplicate their attributes, snapshot themselves at
// their end and draw their ids under a lock: that was most of tracing's
// cost (docs/benchmarks.md, ADR 0021). A span is written by the
// goroutine that started it until its end, except its links (addLink),
// and read by the exporter after it.
type span struct {
	tracing    *Tracing
	name       string
	kind       trace.SpanKind
	sc, parent trace.SpanContext
	start, end time.Time
	// attrs[:nattrs] are its attributes; a call's span has the most, five.
	attrs  [5]attribute.KeyValue
	nattrs int
	status codes.Code
	// description says why the status is an error.
	description string

	// mu guards links and ended: a batch links the spans of its calls,
	// which may end meanwhile (a call that gave up waiting).
	mu           sync.Mutex
	links        []trace.SpanContext
	droppedLinks int
	ended        bool
}

// linksMax bounds a span's links, as the SDK's limits do: a batch links
// each call it carries.
const linksMax = 128

// child starts a span of name and kind, the child of s.
func (s *span) child(name string, kind trace.SpanKind) *span {
	return &span{tracing: s.tracing, name: name, kind: kind, sc: s.sc.WithSpanID(newSpanID()), parent: s.sc, start: time.Now()}
}

// root starts a span of name, the root of a trace of its own, sampled.
func (t *Tracing) root(name string) *span {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: newTraceID(), SpanID: newSpanID(), TraceFlags: trace.FlagsSampled})
	return &span{tracing: t, name: name, kind: trace.SpanKindInternal, sc: sc, start: time.Now()}
}

// setAttributes adds attributes; it panics beyond len(span.attrs), a bug.
func (s *span) setAttributes(kvs ...attribute.KeyValue) {
	if s.nattrs+len(kvs) > len(s.attrs) {
		panic("telemetry: a span of more attributes than it holds")
	}
	s.nattrs += copy(s.attrs[s.nattrs:], kvs)
}

// fail makes the span's status an error, for why.
func (s *span) fail(why string) {
	s.status, s.description = codes.Error, why
}

// addLink links s to sc, unless s has ended.
func (s *span) addLink(sc trace.SpanContext) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
	case len(s.links) == linksMax:
		s.droppedLinks++
	default:
		s.links = append(s.links, sc)
	}
}

// finish ends s now and hands it to the processor. After it, s is the
// exporter's.
func (s *span) finish() {
	s.finishAt(s.start.Add(time.Since(s.start))) // the monotonic clock's: never before start
}

func (s *span) finishAt(end time.Time) {
	s.mu.Lock()
	s.ended, s.end = true, end
	s.mu.Unlock()
	s.tracing.processor.onEnd(s)
}

// newTraceID and newSpanID draw random ids from the runtime's generator,
// which takes no lock; an id of zero bits is invalid.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	binary.BigEndian.PutUint64(id[:8], rand.Uint64())
	binary.BigEndian.PutUint64(id[8:], rand.Uint64())
	if !id.IsValid() {
		id[15] = 1
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], rand.Uint64())
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// spanKey is the key of the span a context runs under.
type spanKey struct{}

func withSpan(ctx context.Context, s *span) context.Context {
	return context.WithValue(ctx, spanKey{}, s)
}

// spanOf is the span ctx runs under, or nil: none, or one not sampled.
func spanOf(ctx context.Context) *span {
	s, _ := ctx.Value(spanKey{}).(*span)
	return s
}
