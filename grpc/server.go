// Package grpc serves the coffer API as the gRPC service coffer.v1.Wallet.
// Transport only: every call goes to a coffer.Ledger. Errors carry their
// stable code as the reason of a google.rpc.ErrorInfo detail (domain
// "coffer"); a replay answers with the response header coffer-replay: true.
package grpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/metrics"
	"github.com/cofferhq/coffer/shed"
	"github.com/cofferhq/coffer/telemetry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Server is the gRPC transport. Its fields are set once, before NewServer.
type Server struct {
	cofferv1.UnimplementedWalletServer
	Ledger  coffer.Ledger
	Clients *coffer.Clients
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// Tracing traces each call, its parent the caller's traceparent
	// metadata; nil is tracing off.
	Tracing *telemetry.Tracing
	// MessageBytesMax bounds a request message, and BatchMessageBytesMax
	// a BatchChange's instead; a larger one is payload_too_large.
	MessageBytesMax, BatchMessageBytesMax int
	// HeaderBytesMax bounds a request's metadata.
	HeaderBytesMax int
	// StreamsPerConnMax bounds the calls one connection may have open at
	// once; a client with more waits for a stream.
	StreamsPerConnMax int
	// Gate bounds the calls served at once (shared with the HTTP
	// transport); a call beyond it is overloaded at once.
	Gate *shed.Gate
	// Bytes bounds the bytes of request messages held at once (shared
	// with the HTTP transport): a message holds its size from when gRPC
	// has read it, before it is decoded, until its call ends; one beyond
	// it is overloaded, not decoded.
	Bytes *shed.Budget
	// HandshakeTimeout bounds a new connection's setup; IdleTimeout closes
	// a connection with no call open for that long.
	HandshakeTimeout, IdleTimeout time.Duration
	Status                        func(context.Context) coffer.Status
}

// keepalive pings: a client may ping at most every pingMin (gRPC's own
// client refuses a shorter keepalive time), also with no call open; one
// that pings more often is sent away (GOAWAY too_many_pings) instead of
// making the server answer a flood. The server pings a connection quiet for
// pingEvery and drops it when no answer comes in pingTimeout, so a peer
// that vanished does not hold its connection.
const (
	pingMin     = 10 * time.Second
	pingEvery   = time.Minute
	pingTimeout = 20 * time.Second
)

// NewServer returns a grpc.Server with the Wallet service registered and
// every call authenticated, authorized, measured and logged, its message
// held in Bytes before it is decoded (receive), and its connections
// bounded: streams, metadata, handshake, idle time, pings.
func (s *Server) NewServer() *grpc.Server {
	g := grpc.NewServer(
		grpc.ForceServerCodecV2(&codec{base: encoding.GetCodecV2("proto"), limit: s.messageLimit}),
		grpc.MaxRecvMsgSize(readFactor*max(s.MessageBytesMax, s.BatchMessageBytesMax)),
		grpc.MaxHeaderListSize(uint32(s.HeaderBytesMax)),
		grpc.MaxConcurrentStreams(uint32(s.StreamsPerConnMax)),
		grpc.ConnectionTimeout(s.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: pingMin, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.IdleTimeout, Time: pingEvery, Timeout: pingTimeout}),
		grpc.InTapHandle(s.admit),
		grpc.ChainUnaryInterceptor(s.intercept, recoverPanic))
	// The generated handlers decode the message before they run the
	// interceptors; receive runs before that.
	wallet := cofferv1.Wallet_ServiceDesc
	wallet.Methods = slices.Clone(wallet.Methods)
	for i := range wallet.Methods {
		wallet.Methods[i].Handler = s.receive(wallet.Methods[i].Handler)
	}
	g.RegisterService(&wallet, s)
	return g
}

// recoverPanic runs the handler; a panic becomes an internal error
// carrying the stack, logged once under the request id by intercept: one
// request that trips a bug gets INTERNAL, and the process goes on serving
// the others (gRPC does not recover a handler's panic).
func recoverPanic(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return handler(ctx, req)
}

// codeOf maps each error code to its gRPC status code: the one table.
var codeOf = map[coffer.Code]codes.Code{
	coffer.CodeInvalid:                 codes.InvalidArgument,
	coffer.CodeUnauthenticated:         codes.Unauthenticated,
	coffer.CodePermissionDenied:        codes.PermissionDenied,
	coffer.CodeNotFound:                codes.NotFound,
	coffer.CodeMethodNotAllowed:        codes.Unimplemented,
	coffer.CodeInsufficientFunds:       codes.FailedPrecondition,
	coffer.CodeTooManyLots:             codes.FailedPrecondition,
	coffer.CodeIdempotencyConflict:     codes.AlreadyExists,
	coffer.CodeHoldNotPending:          codes.FailedPrecondition,
	coffer.CodeHoldExpired:             codes.FailedPrecondition,
	coffer.CodePurchaseAlreadyCredited: codes.AlreadyExists,
	coffer.CodeAlreadyRefunded:         codes.AlreadyExists,
	coffer.CodePayloadTooLarge:         codes.ResourceExhausted,
	coffer.CodeUnavailable:             codes.Unavailable,
	coffer.CodeOverloaded:              codes.Unavailable,
	coffer.CodeInternal:                codes.Internal,
}

type clientKey struct{}

// requestIDKey holds the request id in a handler's context.
type requestIDKey struct{}

// namespaced is every request that addresses a namespace.
type namespaced interface{ GetNamespace() int32 }

// intercept wraps every call: request id, its span, metrics, a slot in Gate,
// authorization in the namespace of the client admit authenticated
// (before any database work), the codec's refusal of the message, error
// mapping, one log line.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	rpc := rpcName(info.FullMethod)
	md, _ := metadata.FromIncomingContext(ctx)
	id := requestID(md)
	ctx, span := s.Tracing.StartGRPC(ctx, md, info.FullMethod, rpc)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-request-id", id))
	done := s.Metrics.Begin(rpc)
	m := messageOf(ctx)
	if !m.decoded {
		req = nil // what decoded of it, if anything, is not the request
	}
	client := clientOf(ctx)
	var resp any
	err := s.Gate.Enter()
	if err == nil {
		err = authorize(client, rpc, req)
		if err == nil {
			err = m.refusal
		}
		if err == nil {
			resp, err = handler(context.WithValue(ctx, requestIDKey{}, id), req)
		}
		s.Gate.Leave()
	}
	done(err)
	s.log(ctx, rpc, id, client, err, time.Since(start))
	span.End(err)
	if err != nil {
		return nil, toStatus(err, id)
	}
	return resp, nil
}

// admit runs when a call's headers arrive, before gRPC reads its message
// (InTapHandle): a call whose key does not authenticate, or whose client
// lacks the call's permission in every namespace, is refused there, as
// HTTP refuses one before it reads the body. gRPC reads a message of up
// to readFactor times the batch limit before any interceptor runs;
// without this, a caller with no key, or with a key of another
// permission (read or ops only), could make the server hold that much
// for every stream it opens. The client the key names goes on in the
// call's context (clientOf), for intercept to authorize in the message's
// namespace.
func (s *Server) admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	rpc := rpcName(info.FullMethodName)
	perms := api.Permissions(rpc) // none for a name the caller made up: gRPC answers it, reading nothing
	key, err := api.APIKey(info.Header.Get("authorization"))
	var c *coffer.Client
	if err == nil {
		c, err = s.Clients.Authenticate(key)
	}
	if err == nil && perms != nil {
		err = c.AllowPermission(perms...)
	}
	if err == nil {
		return context.WithValue(ctx, clientKey{}, c), nil
	}
	id := requestID(info.Header)
	if perms != nil { // a name the caller made up is no label
		s.Metrics.Begin(rpc)(err)
	}
	s.log(ctx, rpc, id, c, err, 0)
	return ctx, toStatus(err, id)
}

// rpcName is the rpc of a gRPC method's full name (/coffer.v1.Wallet/Change).
func rpcName(fullMethod string) string { return fullMethod[strings.LastIndexByte(fullMethod, '/')+1:] }

// authorize checks that client c may make call rpc with req.
func authorize(c *coffer.Client, rpc string, req any) error {
	perms := api.Permissions(rpc)
	if perms == nil {
		// Not reached today (gRPC answers an unknown method itself, and
		// api.Routes gives every rpc a permission); kept so that a call
		// with no permission is refused, never let through.
		return coffer.Errorf(coffer.CodeNotFound, "no rpc %s", rpc)
	}
	r, ok := req.(namespaced)
	if !ok {
		// An ops call addresses no namespace; from a request that did not
		// decode (nil) none can be read, and its refusal comes after this.
		return c.AllowPermission(perms...)
	}
	if r.GetNamespace() <= 0 {
		return coffer.Errorf(coffer.CodeInvalid, "namespace must be > 0")
	}
	return c.Allow(coffer.Namespace(r.GetNamespace()), perms...)
}

// messageLimit is the most bytes a request message v may have: its rpc's
// limit. gRPC bounds what it receives by the largest (a batch's), so the
// codec checks a message of any other rpc against its own.
func (s *Server) messageLimit(v any) int {
	if _, batch := v.(*cofferv1.BatchChangeRequest); batch {
		return s.BatchMessageBytesMax
	}
	return s.MessageBytesMax
}

func toStatus(err error, requestID string) error {
	code := coffer.ErrorCode(err)
	grpcCode, ok := codeOf[code]
	if !ok {
		code, grpcCode = coffer.CodeInternal, codes.Internal
	}
	msg := "internal error; the server log has the details under request id " + requestID
	var e *coffer.Error
	if errors.As(err, &e) && code != coffer.CodeInternal {
		msg = e.Message
	}
	st, derr := status.New(grpcCode, msg).WithDetails(&errdetails.ErrorInfo{
		Reason: string(code), Domain: "coffer", Metadata: map[string]string{"request_id": requestID},
	})
	if derr != nil {
		return status.Error(grpcCode, msg)
	}
	return st.Err()
}

// Code is the stable coffer code of an error returned by a Wallet call, as
// a gRPC client sees it: the ErrorInfo reason, or "" if there is none.
func Code(err error) coffer.Code {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == "coffer" {
			return coffer.Code(info.Reason)
		}
	}
	return ""
}

func (s *Server) log(ctx context.Context, rpc, id string, c *coffer.Client, err error, d time.Duration) {
	level := slog.LevelDebug
	code := coffer.ErrorCode(err)
	if code.ServerFailure() {
		level = slog.LevelError
	}
	if !s.Logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("request_id", id), slog.String("transport", "grpc"), slog.String("call", rpc),
		slog.Float64("duration_ms", float64(d.Microseconds())/1000)}
	if c != nil {
		attrs = append(attrs, slog.String("client", c.Name))
	}
	if err != nil {
		attrs = append(attrs, slog.String("code", string(code)), slog.String("error", err.Error()))
	}
	s.Logger.LogAttrs(ctx, level, "request", attrs...)
}

// requestID is the caller's x-request-id if it is sane, or a new one
// (api.RequestID).
func requestID(md metadata.MD) string {
	var given string
	if v := md.Get("x-request-id"); len(v) > 0 {
		given = v[0]
	}
	return api.RequestID(given)
}

func clientOf(ctx context.Context) *coffer.Client { return ctx.Value(clientKey{}).(*coffer.Client) }
