package grpc

import (
	"context"
	"fmt"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/shed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// readFactor × the largest message limit is the largest request message
// gRPC reads at all; a larger one it refuses itself, on its length,
// before any coffer code runs, with a bare RESOURCE_EXHAUSTED. A message
// up to that size is read whole (gRPC tells its size only then), and one
// over its rpc's limit is refused by the codec, before it is decoded,
// with payload_too_large and its ErrorInfo. The factor bounds the memory
// a refused message may take.
const readFactor = 2

// codec is gRPC's protobuf codec, except that a request message that does
// not decode is not refused by gRPC itself (with a bare INTERNAL, as if it
// were a bug, before any interceptor runs), and one with a field the
// contract does not have is not served as if it had none (unknownField):
// Unmarshal succeeds and records the refusal, invalid_argument, in the
// call's message, which intercept answers like any refused call, after
// the key (and the namespace of a message that decoded) is checked,
// measured and logged. It is safe for concurrent use.
//
// Before decoding, a request message over its rpc's limit is refused
// (payload_too_large), and its bytes are taken in the byte budget, or it
// is refused (overloaded) if they do not fit: decoding takes many times
// the bytes sent (shed.Budget), so what is decoded at once must be
// bounded before it is decoded, not after.
type codec struct {
	base encoding.CodecV2
	// limit is the most bytes a request message of v's rpc may have.
	limit func(v any) int
}

// message is the request message of one call as gRPC receives it
// (receive): the codec decodes it into req, holds its bytes in budget
// from then until the call ends, and records why it is refused, if it
// is.
type message struct {
	req    any
	budget *shed.Budget
	held   int64
	// refusal is why the message is refused; decoded tells whether req
	// holds it even so: one with an unknown field does, so its namespace
	// can be authorized as HTTP authorizes the path's before it reads
	// the body.
	refusal error
	decoded bool
}

// messageKey holds a call's *message in its context.
type messageKey struct{}

// receive wraps the handler of a method, which has gRPC read and decode
// the call's request message and then runs the interceptors: the message
// is decoded through a message value, in the call's context for
// intercept, whose bytes are given back when the handler returns, however
// the call ends (answered, refused, cancelled while its message arrives,
// a second message on a unary call).
func (s *Server) receive(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, next grpc.UnaryServerInterceptor) (any, error) {
		m := &message{budget: s.Bytes}
		defer m.release()
		return h(srv, context.WithValue(ctx, messageKey{}, m), func(req any) error {
			m.req = req
			return dec(m)
		}, next)
	}
}

// messageOf is the message of the call of ctx, as the codec received it.
func messageOf(ctx context.Context) *message { return ctx.Value(messageKey{}).(*message) }

// release gives back the bytes the message holds. A call whose message
// is empty holds none, and leaves the budget's shared counter alone.
func (m *message) release() {
	if m.held > 0 {
		m.budget.Give(m.held)
		m.held = 0
	}
}

func (c *codec) Name() string { return c.base.Name() }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal decodes a request message into m.req, v being the *message
// of its call (receive). gRPC calls it a second time on a unary call
// that sends a second message, which it then refuses: that message's
// bytes are held too until the call ends.
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*message)
	if !ok {
		return fmt.Errorf("a request message of type %T, not received through receive", v)
	}
	n := data.Len()
	if limit := c.limit(m.req); n > limit {
		m.refusal = coffer.Errorf(coffer.CodePayloadTooLarge, "the message is larger than %d bytes", limit)
		return nil
	}
	if n > 0 {
		if err := m.budget.Take(int64(n)); err != nil {
			m.refusal = err
			return nil
		}
		m.held += int64(n)
	}
	if err := c.base.Unmarshal(data, m.req); err != nil {
		m.refusal = &coffer.Error{Code: coffer.CodeInvalid, Message: "the request message is not a valid protobuf message of the call", Err: err}
		return nil
	}
	m.decoded = true
	if r, ok := m.req.(proto.Message); ok {
		m.refusal = unknownFieldError(r)
	}
	return nil
}

// batchChanges is the field whose messages a batch answers one by one: an
// unknown field in one of them fails that change alone (BatchChange), as
// HTTP answers a change it cannot decode, so the codec does not look in it.
var batchChanges = (&cofferv1.BatchChangeRequest{}).ProtoReflect().Descriptor().Fields().ByName("changes")

// unknownFieldError refuses m, invalid_argument, if it or a message in it
// has a field the contract does not have; nil if none.
func unknownFieldError(m proto.Message) error {
	if path, num, found := unknownField(m.ProtoReflect()); found {
		return coffer.Errorf(coffer.CodeInvalid, "request%s: field number %d is not in the contract", path, num)
	}
	return nil
}

// unknownField finds the first field of m, or of a message in it, that
// the contract does not have: its number, and the path from m to the
// message that holds it ("", ".ops[0]"). Protobuf keeps such fields aside
// and reads the rest, so a request that means more than the contract
// says (a client's own dry_run) would be served as if it had not sent it;
// the HTTP transport likewise refuses an unknown name. A batch's changes
// are left to BatchChange.
func unknownField(m protoreflect.Message) (path string, num protowire.Number, found bool) {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, _ = protowire.ConsumeTag(raw)
		return "", num, true
	}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		var in string
		switch {
		case f == batchChanges:
		case f.IsList() && f.Message() != nil:
			for i := 0; i < v.List().Len() && !found; i++ {
				if in, num, found = unknownField(v.List().Get(i).Message()); found {
					path = fmt.Sprintf(".%s[%d]%s", f.Name(), i, in)
				}
			}
		case f.IsMap() && f.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				if in, num, found = unknownField(e.Message()); found {
					path = fmt.Sprintf(".%s[%q]%s", f.Name(), k.String(), in)
				}
				return !found
			})
		case !f.IsList() && !f.IsMap() && f.Message() != nil:
			if in, num, found = unknownField(v.Message()); found {
				path = "." + string(f.Name()) + in
			}
		}
		return !found
	})
	return path, num, found
}
