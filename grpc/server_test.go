package grpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/metrics"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/shed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestStatusForEveryCode: every code maps to its gRPC code and comes back
// from the status as the ErrorInfo reason; internal shows no detail.
func TestStatusForEveryCode(t *testing.T) {
	for _, code := range coffer.Codes {
		err := toStatus(coffer.Errorf(code, "secret detail"), "rid")
		st, _ := status.FromError(err)
		if _, ok := codeOf[code]; !ok || st.Code() != codeOf[code] || Code(err) != code {
			t.Errorf("%s: %v (reason %q)", code, err, Code(err))
		}
		if (code == coffer.CodeInternal) == (st.Message() == "secret detail") {
			t.Errorf("%s: message %q", code, st.Message())
		}
	}
	if err := toStatus(errors.New("bare"), "rid"); status.Code(err) != codes.Internal || Code(err) != coffer.CodeInternal {
		t.Errorf("bare error: %v", err)
	}
	if Code(errors.New("not a status")) != "" {
		t.Error("Code of a non-status error")
	}
}

// TestHandlerPanicIsInternal serves the Wallet with no Status func, so
// that GetStatus trips on it as a handler with a bug would: each call gets
// INTERNAL with the coffer code, the server goes on serving, and the call's
// slot is given back (the gate admits one call).
func TestHandlerPanicIsInternal(t *testing.T) {
	_, conn := serveWallet(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer k")
	for i := 0; i < 3; i++ {
		_, err := cofferv1.NewWalletClient(conn).GetStatus(ctx, &cofferv1.StatusRequest{})
		if status.Code(err) != codes.Internal || Code(err) != coffer.CodeInternal {
			t.Fatalf("call %d: %v (code %q)", i, err, Code(err))
		}
	}
}

// TestRefusalForgottenWhenCallEnds: gRPC may end a unary call after its
// message was decoded and before the interceptors run (here: a second
// message, a cardinality violation). The codec's refusal of the message
// is forgotten when the call ends all the same, not kept, with the
// message, for the life of the process.
func TestRefusalForgottenWhenCallEnds(t *testing.T) {
	s, conn := serveWallet(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer k")
	for i := 0; i < 3; i++ {
		stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, cofferv1.Wallet_GetStatus_FullMethodName, grpc.ForceCodec(rawBytes{}))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			_ = stream.SendMsg([]byte{0x0a, 0x05, 0x61}) // field 1 announces 5 bytes, 1 follows
		}
		_ = stream.CloseSend()
		if err := stream.RecvMsg(new([]byte)); status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	kept := func() (n int) {
		s.codec.refused.Range(func(any, any) bool { n++; return true })
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); kept() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // the call's end is told after its answer is sent
			t.Fatalf("%d refusals kept after their calls ended", kept())
		}
	}
}

// rawBytes sends and receives messages as the bytes given.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawBytes) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawBytes) Name() string                       { return "proto" }

// serveWallet serves the Wallet on a loopback port, with a gate of one
// call and a key "k" of the ops permission only, over a database never
// reached; it returns the server and a connection to it.
func serveWallet(t *testing.T) (*Server, *grpc.ClientConn) {
	t.Helper()
	m, err := shard.NewMap(shard.Config{ShardCount: 1, DistributionMode: "auto", ShardOnDB: 1,
		Databases: []shard.DatabaseConfig{{Name: "never_used", Host: "127.0.0.1", Port: 1, Type: "postgres", User: "u"}}})
	if err != nil {
		t.Fatal(err)
	}
	router, err := shard.Open(m, shard.DefaultPoolConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(router.Close)
	clients, err := coffer.NewClients([]coffer.Client{{Name: "monitor", Emitter: 1, KeyHashes: []coffer.KeyHash{coffer.HashKey("k")},
		Permissions: []coffer.Permission{coffer.PermOps}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Clients: clients, Metrics: metrics.New(router), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		MessageBytesMax: 1 << 16, HeaderBytesMax: 1 << 14, StreamsPerConnMax: 8, Gate: shed.NewGate("calls", 1), Bytes: shed.NewBudget("request bytes", 1<<16),
		HandshakeTimeout: time.Second, IdleTimeout: time.Minute}
	g := s.NewServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, conn
}
