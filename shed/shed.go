// Package shed bounds how many calls of one kind an instance serves at
// once. A call beyond the bound is refused at once with overloaded (503
// and Retry-After) instead of queueing: a queue without a bound holds
// memory, connections and callers' time until everything is late, while a
// fast refusal lets the client retry, with the same idempotency key, on
// another instance or a moment later.
package shed

import "github.com/cofferhq/coffer"

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
