package grpc

import (
	"context"
	"fmt"
	"sync"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/shed"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// readFactor × the largest message limit is the largest request message
// gRPC reads at all; a larger one it refuses itself, before any coffer
// code runs, with a bare RESOURCE_EXHAUSTED. A message up to that size is
// read, and one over its rpc's limit is refused by the codec, before it
// is decoded, with payload_too_large and its ErrorInfo. The factor bounds
// the memory a refused message may take.
const readFactor = 2

// codec is gRPC's protobuf codec, except that a request message that does
// not decode is not refused by gRPC itself (with a bare INTERNAL, as if it
// were a bug, before any interceptor runs), and one with a field the
// contract does not have is not served as if it had none (unknownField):
// Unmarshal succeeds and records the refusal, invalid_argument, which
// intercept takes by the request's pointer (refusal) and answers like any
// refused call, after the key (and the namespace of a message that
// decoded) is checked, measured and logged. It is safe for concurrent
// use.
//
// Before decoding, a request message over its rpc's limit is refused
// (payload_too_large), and one that does not fit the byte budget now too
// (overloaded): decoding takes many times the bytes sent (shed.Budget).
// The codec only looks at the budget; intercept holds a message's bytes
// while its call runs. Held from here, they would leak whenever gRPC
// ends a call between its message and the interceptors (a stream
// cancelled before its end, a second message on a unary call).
type codec struct {
	base encoding.CodecV2
	// limit is the most bytes a request message of v's rpc may have.
	limit   func(v any) int
	budget  *shed.Budget
	refused sync.Map // request message pointer → decodeRefusal
}

// decodeRefusal is why a request message is refused, and whether it decoded:
// one with an unknown field did, so its namespace can be authorized as
// HTTP authorizes the path's before it reads the body.
type decodeRefusal struct {
	err     error
	decoded bool
}

func (c *codec) Name() string { return c.base.Name() }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	n := data.Len()
	if limit := c.limit(v); n > limit {
		c.refused.Store(v, decodeRefusal{err: coffer.Errorf(coffer.CodePayloadTooLarge, "the message is larger than %d bytes", limit)})
		return nil
	}
	if err := c.budget.Fits(int64(n)); err != nil {
		c.refused.Store(v, decodeRefusal{err: err})
		return nil
	}
	if err := c.base.Unmarshal(data, v); err != nil {
		c.refused.Store(v, decodeRefusal{err: &coffer.Error{Code: coffer.CodeInvalid, Message: "the request message is not a valid protobuf message of the call", Err: err}})
		return nil
	}
	if m, ok := v.(proto.Message); ok {
		if err := unknownFieldError(m); err != nil {
			c.refused.Store(v, decodeRefusal{err: err, decoded: true})
		}
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

// refusal takes the refusal recorded for req: decoded and nil if none.
func (c *codec) refusal(req any) (decoded bool, err error) {
	if r, ok := c.refused.LoadAndDelete(req); ok {
		d := r.(decodeRefusal)
		return d.decoded, d.err
	}
	return true, nil
}

// callEnds is the stats.Handler that forgets a call's refusal when the
// call ends. gRPC may end a unary call after its message was decoded and
// before any interceptor (a stream cancelled before its end, a second
// message: a cardinality violation), and the refusal, which holds the
// message, would stay in the codec for the life of the process. It sees
// the message of each call (InPayload) and, at its end, removes what
// intercept did not take.
type callEnds struct{ codec *codec }

// callMessage is the context key of a call's message, as callEnds saw it.
type callMessage struct{}

func (h callEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, callMessage{}, new(any))
}

func (h callEnds) HandleRPC(ctx context.Context, s stats.RPCStats) {
	m, _ := ctx.Value(callMessage{}).(*any)
	if m == nil {
		return
	}
	switch s := s.(type) {
	case *stats.InPayload:
		*m = s.Payload
	case *stats.End:
		if *m != nil {
			h.codec.refused.Delete(*m)
		}
	}
}

func (callEnds) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (callEnds) HandleConn(context.Context, stats.ConnStats) {}
