package coffer

import "slices"

// Write is one write of a player: a value that says what its plan reads
// (Needs), which the store loads in one round trip, and plans
// itself on the player (Plan). The writes are ValidChange, ValidExchange,
// ValidRefund, Finish and ExpireLots.
type Write interface {
	Needs() Needs
	Plan(p *Player) Plan
}

// Needs is what the plans of a player's writes read, loaded under its
// lock, and how many new ids they take.
type Needs struct {
	// AllLots tells a plan reads every lot of the player that holds
	// something; Currencies are those it reads otherwise.
	AllLots    bool
	Currencies []CurrencyID
	// Keys are the stored trx a plan reads by key (a hold's commit reads
	// the hold). Own are the keys the writes store their own trx under:
	// new unless a write is sent again, when the stored trx makes it a
	// replay. A store may leave an own key unread where storing a trx
	// under a key that has one fails (a unique key), and then read it
	// only for a write whose plan stores no trx under it (one refused);
	// a key in both is read.
	Keys []TrxKey
	Own  []TrxKey
	// Orders are the store orders a refund reads.
	Orders []PurchaseKey
	// IDs is how many new ids the plans take, as far as the writes alone
	// tell: a plan that finds it needs more asks for them (Plan.IDsShort).
	IDs int
}

// Add joins o's needs to n's: a batch loads once what its writes of one
// player need.
func (n *Needs) Add(o Needs) {
	n.AllLots = n.AllLots || o.AllLots
	n.Currencies = union(n.Currencies, o.Currencies)
	n.Keys = union(n.Keys, o.Keys)
	n.Own = union(n.Own, o.Own)
	n.Orders = union(n.Orders, o.Orders)
	n.IDs += o.IDs
}

// union appends to a the elements of b it lacks.
func union[T comparable](a, b []T) []T {
	for _, x := range b {
		if !slices.Contains(a, x) {
			a = append(a, x)
		}
	}
	return a
}

// Needs: the lots of the change's currencies, its key's trx; ids for its
// trx, a trx of expiries and a lot per op.
func (v ValidChange) Needs() Needs {
	return Needs{Currencies: v.Currencies(), Own: []TrxKey{v.Key()}, IDs: 2 + len(v.Ops)}
}

// Plan plans the change (Player.Change).
func (v ValidChange) Plan(p *Player) Plan { return p.Change(v) }

// Currencies are the currencies of a change's ops: the lots its write
// reads, and whose due expiries it records.
func (v ValidChange) Currencies() []CurrencyID {
	out := make([]CurrencyID, 0, len(v.Ops))
	for _, op := range v.Ops {
		if !slices.Contains(out, op.Currency.ID) {
			out = append(out, op.Currency.ID)
		}
	}
	return out
}

// Needs: the lots of the exchange's two currencies, its key's trx; ids
// for its trx, a trx of expiries, a paid and a free lot (one that
// consumes several paid lots asks for a paid lot's id for each).
func (v ValidExchange) Needs() Needs {
	return Needs{Currencies: v.Currencies(), Own: []TrxKey{v.Key()}, IDs: 4}
}

// Currencies are the two currencies of an exchange.
func (v ValidExchange) Currencies() []CurrencyID { return []CurrencyID{v.From.ID, v.To.ID} }

// Plan plans the exchange (Player.Exchange).
func (v ValidExchange) Plan(p *Player) Plan { return p.Exchange(v) }

// Needs: every lot (the order's coins may be in any currency its
// exchanges made), the refund's key's trx and its order; ids for its trx
// and a trx of expiries.
func (v ValidRefund) Needs() Needs {
	return Needs{AllLots: true, Own: []TrxKey{v.Key()}, Orders: []PurchaseKey{v.Order}, IDs: 2}
}

// Plan plans the refund (Player.Refund).
func (v ValidRefund) Plan(p *Player) Plan { return p.Refund(v) }

// FinishStep is how a Finish ends a pending hold.
type FinishStep int

// Finish steps: a client's commit or rollback, or the hold sweeper's
// rollback of a hold past its TTL.
const (
	FinishCommit FinishStep = iota
	FinishRollback
	FinishExpire
)

// Finish ends the pending hold of Key (Player.Commit, Player.Rollback,
// Player.ExpireHold). By is the emitter of the client that ends it: the
// hold's own, or a support agent's; 0 for the hold sweeper.
type Finish struct {
	Key  TrxKey
	Step FinishStep
	By   Emitter
}

// Needs: every lot (a hold returns to, or grants in, lots of any
// currency) and the hold's trx; ids for two trx of expiries and, for a
// commit, a few of its grants' lots (a hold with more asks for them).
func (f Finish) Needs() Needs {
	n := Needs{AllLots: true, Keys: []TrxKey{f.Key}, IDs: 2}
	if f.Step == FinishCommit {
		n.IDs += OpsMax / 8
	}
	return n
}

// Plan plans the finish.
func (f Finish) Plan(p *Player) Plan { return p.finish(f) }

// ExpireLots is the lot sweeper's write of a player (Player.ExpireLots).
type ExpireLots struct{}

// Needs: every lot; an id for the trx of expiries.
func (ExpireLots) Needs() Needs { return Needs{AllLots: true, IDs: 1} }

// Plan plans the player's expiries.
func (ExpireLots) Plan(p *Player) Plan { return p.ExpireLots() }
