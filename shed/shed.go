// Package shed bounds how many calls of one kind an instance serves at
// once, and the bytes their requests hold. A call beyond the bound is
// refused at once with overloaded (503 and Retry-After) instead of
// queueing: a queue without a bound holds memory, connections and
// callers' time until everything is late, while a fast refusal lets the
// client retry, with the same idempotency key, on another instance or a
// moment later.
package shed

import (
	"sync/atomic"

	"github.com/cofferhq/coffer"
)

// Gate admits at most a fixed number of calls at once. It is safe for
// concurrent use.
type Gate struct {
	what  string
	slots chan struct{}
}

// NewGate admits up to max calls at once; what names them in the refusal
// ("requests in flight", say). max must be > 0.
func NewGate(what string, max int) *Gate {
	if max <= 0 {
		panic("shed: a gate admits at least one call")
	}
	return &Gate{what: what, slots: make(chan struct{}, max)}
}

// Enter takes a slot, or fails at once when all are taken. Errors:
// overloaded. After a nil error the caller must Leave.
func (g *Gate) Enter() error {
	select {
	case g.slots <- struct{}{}:
		return nil
	default:
		return coffer.Errorf(coffer.CodeOverloaded, "%d %s, the most this instance serves at once; retry after Retry-After", cap(g.slots), g.what)
	}
}

// Leave gives back the slot of a call that entered.
func (g *Gate) Leave() { <-g.slots }

// Budget admits calls while the bytes their requests hold together stay
// within a bound. The Gate bounds how many calls run, not how large they
// are, and decoding a request takes many times its size (a JSON tree, or
// protobuf messages: up to about 65 times for a body of tiny values), so
// without it the calls a Gate admits may hold that many maximum-size
// bodies at once. It is safe for concurrent use.
type Budget struct {
	what string
	max  int64
	held atomic.Int64
}

// NewBudget admits up to max bytes at once; what names them in the
// refusal ("request bytes"). max must be > 0.
func NewBudget(what string, max int64) *Budget {
	if max <= 0 {
		panic("shed: a budget admits at least one byte")
	}
	return &Budget{what: what, max: max}
}

// Take holds n more bytes, or fails at once when that would pass the
// bound. Errors: overloaded. After a nil error the caller must Give n back.
func (b *Budget) Take(n int64) error {
	for {
		held := b.held.Load()
		if held+n > b.max {
			return b.refusal()
		}
		if b.held.CompareAndSwap(held, held+n) {
			return nil
		}
	}
}

// refusal is the error of bytes that do not fit.
func (b *Budget) refusal() error {
	return coffer.Errorf(coffer.CodeOverloaded, "%d %s held by the calls in flight, the most this instance holds at once; retry after Retry-After", b.max, b.what)
}

// Give gives back n bytes taken.
func (b *Budget) Give(n int64) { b.held.Add(-n) }

// Held is the bytes held now.
func (b *Budget) Held() int64 { return b.held.Load() }
