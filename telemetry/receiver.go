package telemetry

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Receiver is an OTLP/gRPC endpoint that counts the spans sent to it and
// keeps the first few: what `coffer bench --trace` points its stack at
// (keeping none), so that tracing's cost is measured with its export,
// where no collector runs, and what the tests read spans from, as a
// collector receives them.
type Receiver struct {
	collector.UnimplementedTraceServiceServer
	server *grpc.Server
	// Addr is the address it listens on, 127.0.0.1:port.
	Addr    string
	spans   atomic.Int64
	keepMax int

	mu   sync.Mutex
	kept []*tracepb.Span
}

// Receive starts a Receiver on a free port of 127.0.0.1 that keeps at
// most keepMax of the spans it receives.
func Receive(keepMax int) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{server: grpc.NewServer(), Addr: ln.Addr().String(), keepMax: keepMax}
	collector.RegisterTraceServiceServer(r.server, r)
	go func() { _ = r.server.Serve(ln) }()
	return r, nil
}

// Export counts the spans of a request, and keeps them while it keeps
// fewer than keepMax.
func (r *Receiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
			if r.keepMax > 0 {
				r.keep(ss.GetSpans())
			}
		}
	}
	r.spans.Add(n)
	return &collector.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) keep(spans []*tracepb.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kept = append(r.kept, spans[:min(len(spans), r.keepMax-len(r.kept))]...)
}

// Spans is how many spans it received.
func (r *Receiver) Spans() int64 { return r.spans.Load() }

// Kept is the spans it kept, in the order received.
func (r *Receiver) Kept() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kept)
}

// Stop stops it.
func (r *Receiver) Stop() { r.server.Stop() }
