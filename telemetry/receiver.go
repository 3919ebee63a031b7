package telemetry

import (
	"context"
	"net"
	"sync/atomic"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// Receiver is an OTLP/gRPC endpoint that counts the spans sent to it and
// keeps none: what `coffer bench --trace` points its stack at, so that
// tracing's cost is measured with its export, where no collector runs.
type Receiver struct {
	collector.UnimplementedTraceServiceServer
	server *grpc.Server
	// Addr is the address it listens on, 127.0.0.1:port.
	Addr  string
	spans atomic.Int64
}

// Receive starts a Receiver on a free port of 127.0.0.1.
func Receive() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{server: grpc.NewServer(), Addr: ln.Addr().String()}
	collector.RegisterTraceServiceServer(r.server, r)
	go func() { _ = r.server.Serve(ln) }()
	return r, nil
}

// Export counts the spans of a request.
func (r *Receiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	r.spans.Add(n)
	return &collector.ExportTraceServiceResponse{}, nil
}

// Spans is how many spans it received.
func (r *Receiver) Spans() int64 { return r.spans.Load() }

// Stop stops it.
func (r *Receiver) Stop() { r.server.Stop() }
