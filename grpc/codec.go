package grpc

import (
	"sync"

	"github.com/cofferhq/coffer"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// readFactor × the largest message limit is the largest request message
// gRPC reads at all; a larger one it refuses itself, before any coffer
// code runs, with a bare RESOURCE_EXHAUSTED. A message up to that size is
// read, and one over its rpc's limit is refused by checkSize with
// payload_too_large and its ErrorInfo. The factor bounds the memory a
// refused message may take.
const readFactor = 2

// codec is gRPC's protobuf codec, except that a request message that does
// not decode is not refused by gRPC itself (with a bare INTERNAL, as if it
// were a bug, before any interceptor runs): Unmarshal succeeds with an
// empty request and records the refusal, invalid_argument, which intercept
// takes by the request's pointer (refusal) and answers like any refused
// call, after the key is checked, measured and logged. It is safe for
// concurrent use.
type codec struct {
	base    encoding.CodecV2
	refused sync.Map // request message pointer → *coffer.Error
}

func (c *codec) Name() string { return c.base.Name() }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.base.Unmarshal(data, v); err != nil {
		c.refused.Store(v, &coffer.Error{Code: coffer.CodeInvalid, Message: "the request message is not a valid protobuf message of the call", Err: err})
	}
	return nil
}

// refusal takes the refusal recorded for req, or nil if it decoded.
func (c *codec) refusal(req any) *coffer.Error {
	if r, ok := c.refused.LoadAndDelete(req); ok {
		return r.(*coffer.Error)
	}
	return nil
}
