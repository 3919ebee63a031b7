package grpc

import (
	"context"
	"errors"
	"fmt"
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

// TestMessageHeldUntilItsCallEnds: a request message holds its bytes in
// the budget from when gRPC has read it, before it is decoded and before
// its call runs, so that the messages decoded at once are bounded; and
// it gives them back when its call ends, even if gRPC ends it before the
// interceptors run: a stream cancelled while its unary call waits for
// the end of its messages, or a second message (a cardinality
// violation).
func TestMessageHeldUntilItsCallEnds(t *testing.T) {
	s, conn := serveWallet(t)
	key := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer k")
	msg := []byte{0x0a, 0x05, 0x61} // field 1 announces 5 bytes, 1 follows: held all the same
	open := func(ctx context.Context) grpc.ClientStream {
		stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, cofferv1.Wallet_GetStatus_FullMethodName, grpc.ForceCodec(rawBytes{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg(msg); err != nil {
			t.Fatal(err)
		}
		return stream
	}
	// The server learns of a call's end after the client: wait for it.
	waitHeld := func(want int, when string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); s.Bytes.Held() != int64(want); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes held, want %d", when, s.Bytes.Held(), want)
			}
		}
	}
	ctx, cancel := context.WithCancel(key)
	open(ctx)
	waitHeld(len(msg), "a message received, its call waiting for the stream's end")
	cancel()
	waitHeld(0, "the call cancelled")

	for i := 0; i < 3; i++ {
		stream := open(key)
		_ = stream.SendMsg(msg)
		_ = stream.CloseSend()
		if err := stream.RecvMsg(new([]byte)); status.Code(err) != codes.Internal {
			t.Fatalf("call %d: %v", i, err)
		}
		waitHeld(0, fmt.Sprintf("call %d ended on its second message", i))
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
