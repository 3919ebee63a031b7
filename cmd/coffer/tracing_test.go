package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/telemetry"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// TestTracesOfAWrite: a change sent with a traceparent, over HTTP and over
// gRPC, is traced as the docs say (docs/operations.md#tracing): the call's
// span is the child of the caller's; the wait in the queue is the call's
// child; the batch is a trace of its own, linked with the call both ways,
// with its size; its round trips are its children, and the COMMIT is a
// child of the last.
func TestTracesOfAWrite(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	s := startTracedService(t, twoServers(t), nil, telemetry.New(sdktrace.NewSimpleSpanProcessor(spans), 1, "test"))
	for i, transport := range []string{"http", "grpc"} {
		caller := trace.SpanContextConfig{TraceFlags: trace.FlagsSampled}
		caller.TraceID[0], caller.TraceID[15] = 0x4b, byte(i+1)
		caller.SpanID[0], caller.SpanID[7] = 0x00, byte(i+1)
		traceparent := fmt.Sprintf("00-%s-%s-01", caller.TraceID, caller.SpanID)
		player, key := 700+i, "traced-"+transport
		if transport == "http" {
			req, err := http.NewRequest("POST", fmt.Sprintf("%s/v1/namespaces/1/players/%d/transactions", s.base, player),
				strings.NewReader(`{"idempotency_key": "`+key+`", "ops": [{"currency": "gold", "amount": 5}]}`))
			must(t, err)
			req.Header.Set("Authorization", "Bearer "+devKey)
			req.Header.Set("traceparent", traceparent)
			resp, err := http.DefaultClient.Do(req)
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("HTTP change: %d", resp.StatusCode)
			}
		} else {
			_, err := s.grpc.Change(metadata.AppendToOutgoingContext(grpcCtx(devKey), "traceparent", traceparent),
				&cofferv1.ChangeRequest{Namespace: 1, PlayerId: int64(player), IdempotencyKey: key, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 5}}})
			must(t, err)
		}
		call := waitSpan(t, spans, func(sp tracetest.SpanStub) bool { return sp.Parent.SpanID() == caller.SpanID })
		checkWriteTrace(t, transport, spans.GetSpans(), call, caller.TraceID)
	}
}

// checkWriteTrace checks the spans of one traced write whose call's span
// is call.
func checkWriteTrace(t *testing.T, transport string, all tracetest.SpanStubs, call tracetest.SpanStub, traceID trace.TraceID) {
	t.Helper()
	if call.SpanContext.TraceID() != traceID || call.SpanKind != trace.SpanKindServer || !strings.Contains(call.Name, "Change") && !strings.Contains(call.Name, "/transactions") {
		t.Errorf("%s: the call's span: %s, trace %s, kind %s", transport, call.Name, call.SpanContext.TraceID(), call.SpanKind)
	}
	if !slices.ContainsFunc(call.Attributes, func(a attribute.KeyValue) bool { return a.Key == "coffer.call" && a.Value.AsString() == "Change" }) {
		t.Errorf("%s: the call's span does not name its call: %v", transport, call.Attributes)
	}
	childOf := func(parent trace.SpanContext, name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, sp := range all {
			if sp.Parent.SpanID() == parent.SpanID() && sp.Name == name {
				out = append(out, sp)
			}
		}
		return out
	}
	if waits := childOf(call.SpanContext, "queue wait"); len(waits) != 1 {
		t.Errorf("%s: the call's waits in a queue: %d, want 1", transport, len(waits))
	}
	var batch *tracetest.SpanStub
	for _, sp := range all {
		if sp.Name == "batch" && slices.ContainsFunc(sp.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == call.SpanContext.SpanID() }) {
			batch = &sp
		}
	}
	if batch == nil {
		t.Fatalf("%s: no batch span links the call", transport)
	}
	if !slices.ContainsFunc(call.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == batch.SpanContext.SpanID() }) {
		t.Errorf("%s: the call's span does not link its batch", transport)
	}
	if batch.Parent.IsValid() || batch.SpanContext.TraceID() == traceID {
		t.Errorf("%s: the batch's span is in the call's trace, not a root of its own", transport)
	}
	if !slices.ContainsFunc(batch.Attributes, func(a attribute.KeyValue) bool { return a.Key == "coffer.batch.size" && a.Value.AsInt64() >= 1 }) {
		t.Errorf("%s: the batch's span has no size: %v", transport, batch.Attributes)
	}
	trips := childOf(batch.SpanContext, "round trip")
	commits := 0
	for _, trip := range trips {
		commits += len(childOf(trip.SpanContext, "commit"))
	}
	if len(trips) < 2 || commits != 1 {
		t.Errorf("%s: the batch's round trips: %d (want 2 or more), commits: %d (want 1)", transport, len(trips), commits)
	}
}

// waitSpan waits, with a generous bound, for a span that ok picks: a
// call's span ends after its answer is sent.
func waitSpan(t *testing.T, spans *tracetest.InMemoryExporter, ok func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, sp := range spans.GetSpans() {
			if ok(sp) {
				return sp
			}
		}
	}
	t.Fatal("no such span in 30 s")
	return tracetest.SpanStub{}
}

// TestTracesSentOverOTLP: with telemetry.otlp_endpoint set, an instance
// sends its spans over OTLP/gRPC; those not sent yet go at shutdown.
func TestTracesSentOverOTLP(t *testing.T) {
	receiver, err := telemetry.Receive()
	must(t, err)
	defer receiver.Stop()
	s := startService(t, twoServers(t), func(cfg *Config) { cfg.Telemetry.OTLPEndpoint = "http://" + receiver.Addr })
	_, _, err = s.dev.Change(ctx, 1, 42, grant("otlp-1", "gold", 5))
	must(t, err)
	s.stop()
	// The call, its wait, its batch, two round trips and the commit.
	if n := receiver.Spans(); n < 6 {
		t.Errorf("spans received over OTLP: %d, want 6 or more", n)
	}
}

// TestCollectorDownFailsNoDrain: spans a collector that is down does not
// take are lost, and said so in the log; the calls and the drain go on.
func TestCollectorDownFailsNoDrain(t *testing.T) {
	receiver, err := telemetry.Receive()
	must(t, err)
	receiver.Stop() // its address now refuses connections
	s := startService(t, twoServers(t), func(cfg *Config) { cfg.Telemetry.OTLPEndpoint = "http://" + receiver.Addr })
	_, _, err = s.dev.Change(ctx, 1, 42, grant("down-1", "gold", 5))
	must(t, err)
	s.stop() // fails the test if the drain fails
	if !strings.Contains(s.logs.String(), "spans not sent at shutdown") {
		t.Errorf("no line about the spans lost in the log:\n%s", s.logs)
	}
}
