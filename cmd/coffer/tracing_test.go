package main

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/telemetry"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
)

// TestTracesOfAWrite: a change sent with a traceparent, over HTTP and over
// gRPC, is traced as the docs say (docs/operations.md#tracing), in the
// spans a collector receives over OTLP: the call's span is the child of
// the caller's; the wait in the queue is the call's child; the batch is
// a trace of its own, linked with the call both ways, with its size; its
// round trips are its children, and the COMMIT is a child of the last.
func TestTracesOfAWrite(t *testing.T) {
	receiver, err := telemetry.Receive(1000)
	must(t, err)
	defer receiver.Stop()
	s := startService(t, twoServers(t), func(cfg *Config) { cfg.Telemetry.OTLPEndpoint = "http://" + receiver.Addr })
	for i, transport := range []string{"http", "grpc"} {
		var callerTrace [16]byte
		var callerSpan [8]byte
		callerTrace[0], callerTrace[15] = 0x4b, byte(i+1)
		callerSpan[7] = byte(i + 1)
		traceparent := fmt.Sprintf("00-%x-%x-01", callerTrace, callerSpan)
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
		call := waitSpan(t, s.main.Tracing, receiver, func(sp *tracepb.Span) bool { return bytes.Equal(sp.ParentSpanId, callerSpan[:]) })
		checkWriteTrace(t, transport, receiver.Kept(), call, callerTrace[:])
	}
}

// checkWriteTrace checks the spans of one traced write whose call's span
// is call.
func checkWriteTrace(t *testing.T, transport string, all []*tracepb.Span, call *tracepb.Span, traceID []byte) {
	t.Helper()
	if !bytes.Equal(call.TraceId, traceID) || call.Kind != tracepb.Span_SPAN_KIND_SERVER || !strings.Contains(call.Name, "Change") && !strings.Contains(call.Name, "/transactions") {
		t.Errorf("%s: the call's span: %s, trace %x, kind %s", transport, call.Name, call.TraceId, call.Kind)
	}
	if !slices.ContainsFunc(call.Attributes, func(a *commonpb.KeyValue) bool { return a.Key == "coffer.call" && a.Value.GetStringValue() == "Change" }) {
		t.Errorf("%s: the call's span does not name its call: %v", transport, call.Attributes)
	}
	childOf := func(parent *tracepb.Span, name string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range all {
			if bytes.Equal(sp.ParentSpanId, parent.SpanId) && sp.Name == name {
				out = append(out, sp)
			}
		}
		return out
	}
	if waits := childOf(call, "queue wait"); len(waits) != 1 || !bytes.Equal(waits[0].TraceId, traceID) {
		t.Errorf("%s: the call's waits in a queue: %d, want 1, in the call's trace", transport, len(waits))
	}
	linksTo := func(sp *tracepb.Span) func(*tracepb.Span_Link) bool {
		return func(l *tracepb.Span_Link) bool {
			return bytes.Equal(l.SpanId, sp.SpanId) && bytes.Equal(l.TraceId, sp.TraceId)
		}
	}
	i := slices.IndexFunc(all, func(sp *tracepb.Span) bool { return sp.Name == "batch" && slices.ContainsFunc(sp.Links, linksTo(call)) })
	if i < 0 {
		t.Fatalf("%s: no batch span links the call", transport)
	}
	batch := all[i]
	if !slices.ContainsFunc(call.Links, linksTo(batch)) {
		t.Errorf("%s: the call's span does not link its batch", transport)
	}
	if len(batch.ParentSpanId) != 0 || bytes.Equal(batch.TraceId, traceID) {
		t.Errorf("%s: the batch's span is in the call's trace, not a root of its own", transport)
	}
	if !slices.ContainsFunc(batch.Attributes, func(a *commonpb.KeyValue) bool { return a.Key == "coffer.batch.size" && a.Value.GetIntValue() >= 1 }) {
		t.Errorf("%s: the batch's span has no size: %v", transport, batch.Attributes)
	}
	trips := childOf(batch, "round trip")
	commits := 0
	for _, trip := range trips {
		commits += len(childOf(trip, "commit"))
	}
	if len(trips) < 2 || commits != 1 {
		t.Errorf("%s: the batch's round trips: %d (want 2 or more), commits: %d (want 1)", transport, len(trips), commits)
	}
}

// waitSpan waits, with a generous bound, for a span that ok picks, sent
// to receiver: a call's span ends after its answer is sent.
func waitSpan(t *testing.T, tracing *telemetry.Tracing, receiver *telemetry.Receiver, ok func(*tracepb.Span) bool) *tracepb.Span {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		must(t, tracing.Flush(ctx))
		if i := slices.IndexFunc(receiver.Kept(), ok); i >= 0 {
			return receiver.Kept()[i]
		}
	}
	t.Fatal("no such span in 30 s")
	return nil
}

// TestTracesSentOverOTLP: with telemetry.otlp_endpoint set, an instance
// sends its spans over OTLP/gRPC; those not sent yet go at shutdown.
func TestTracesSentOverOTLP(t *testing.T) {
	receiver, err := telemetry.Receive(0)
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
	receiver, err := telemetry.Receive(0)
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
