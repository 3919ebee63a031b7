package coffer

import (
	"encoding/json"
	"strconv"
	"time"
)

// TrxKey identifies a trx among its player's: the emitter of the client
// that sent it and its idempotency key.
type TrxKey struct {
	Emitter        Emitter
	IdempotencyKey string
}

// Key is the scope's trx key.
func (s Scope) Key() TrxKey { return TrxKey{s.Emitter, s.IdempotencyKey} }

// PendingGrant is a grant of a hold, applied at its commit.
type PendingGrant struct {
	Currency  CurrencyID
	Amount    Amount
	Paid      bool
	ExpiresAt *time.Time
	Priority  int32
	Purchase  *Purchase
}

// StoredTrx is a trx as the ledger keeps it: the answer it gave (a replay
// gives it again) and what a hold's commit or rollback needs.
type StoredTrx struct {
	Trx
	// Hash identifies the request's payload: its RequestHash.Sum.
	Hash []byte
	// PendingGrants are a hold's grants, applied at its commit.
	PendingGrants []PendingGrant
	// Begin is a finished hold's first answer, its begin's
	// (Catalog.BeginAnswer): a replay of the begin gives it again, not
	// the hold as it is now.
	Begin *Trx
}

// TrxRow is a trx to insert: a client's, or the record of expiries.
type TrxRow struct {
	ID             int64
	Emitter        Emitter
	IdempotencyKey string
	Hash           []byte
	Kind           TrxKind
	Status         TrxStatus
	Reason         string
	Meta           json.RawMessage
	HoldExpiresAt  *time.Time
	PendingGrants  []PendingGrant
	// Refund is a refund trx's order, kind and shortfall.
	Refund    *RefundRow
	Version   int64
	CreatedAt time.Time
	// Pos is the trx's position in its player's order.
	Pos int64
}

// TrxFinish ends a pending hold: its new status, at the version and time
// of the write that ends it, and the client that ended it (By, 0 for
// coffer's sweeper). The row's version becomes the finish's; it keeps the
// one its begin left as BeginVersion, for the version of a balance at a
// time the hold was pending (PastVersion).
type TrxFinish struct {
	ID           int64
	CreatedAt    time.Time
	Status       TrxStatus
	Version      int64
	BeginVersion int64
	FinishedAt   time.Time
	By           Emitter
}

// OpRow is an op to insert: the planned op, its trx, its place in the trx
// (Seq) and in the player's order (Pos), and the time of its write.
type OpRow struct {
	BookOp
	TrxID     int64
	Seq       int32
	CreatedAt time.Time
	Pos       int64
}

// Plan is what one request does to its player: the answer, and the rows
// that make it so. A plan may write rows and still answer an error (a
// commit that finds its hold expired rolls it back and answers
// hold_expired); a plan without rows writes nothing.
type Plan struct {
	Trx    Trx
	Replay bool
	Err    error
	// Inserts are new trx rows; Finish ends a hold's row; Ops are the
	// new op rows. Lots are written per player (Player.Lots).
	Inserts []TrxRow
	Finish  *TrxFinish
	Ops     []OpRow
	// IDsShort, when not 0, tells the write was not planned: its player
	// lacked that many new ids. Hand them (Player.GiveIDs) and plan it
	// again.
	IDsShort int
}

// Writes tells whether the plan writes anything.
func (p Plan) Writes() bool { return len(p.Inserts) > 0 || p.Finish != nil }

// PlayerState is what a store loads of a player, under its lock, to plan
// its writes: its last version and position, the time of its next write,
// the lots of the currencies the writes touch (or all its lots) that have
// an amount or a reservation, and its stored trx under the keys the writes
// name.
type PlayerState struct {
	Namespace Namespace
	PlayerID  PlayerID
	Version   int64
	Pos       int64
	// At is the database's time when the state was loaded, and LastWrite
	// the time of the player's last write (zero for none). The next write
	// takes At, or a microsecond after LastWrite when At is not after it:
	// a player's times never go back, even where the clock of a failed-over
	// server or of another instance's database is behind.
	At, LastWrite time.Time
	Lots          []*BookLot
	Trx           []*StoredTrx
	// Orders are the store orders the player's refunds name, as its
	// ledger holds them (the lots of their grants, their refund).
	Orders []*OrderState
}

// Player plans the writes of one player, one after the other, on its
// state: each plan sees what the plans before it did (a consume the grant
// before it, a second request with one key the trx of the first), as if
// the requests had been sent one at a time. A refused request changes
// nothing. The store writes what the plans return, and the player's lots
// and balance row once, after the last. A Player is used by one goroutine.
type Player struct {
	state   PlayerState
	catalog *Catalog
	book    *Book
	trx     map[TrxKey]*StoredTrx
	orders  map[PurchaseKey]*OrderState
	wrote   bool

	// ids are the new ids the store drew for the player's writes, those
	// before next taken (by a write kept or refused: as a sequence's, an
	// id taken is not given again). short counts the ids the write being
	// planned lacked.
	ids   []int64
	next  int
	short int
}

// NewPlayer loads a player's state, with ids, the new ids its writes'
// trx and lots take (Needs.IDs of its writes). Errors: internal, when
// the lots are damaged (Book.Add).
func NewPlayer(c *Catalog, st PlayerState, ids []int64) (*Player, error) {
	if !st.LastWrite.Before(st.At) {
		st.At = st.LastWrite.Add(time.Microsecond)
	}
	p := &Player{state: st, catalog: c, trx: make(map[TrxKey]*StoredTrx, len(st.Trx)),
		orders: make(map[PurchaseKey]*OrderState, len(st.Orders)), ids: ids}
	p.book = &Book{NewID: p.newID}
	for _, l := range st.Lots {
		if err := p.book.Add(l); err != nil {
			return nil, err
		}
	}
	for _, t := range st.Trx {
		p.trx[TrxKey{t.Emitter, t.IdempotencyKey}] = t
	}
	for _, o := range st.Orders {
		p.orders[o.Key] = o
	}
	p.state.Lots, p.state.Trx, p.state.Orders = nil, nil, nil
	return p, nil
}

// newID takes the next of the player's ids; when none is left it counts
// the write short and gives a negative stand-in, unique in the write (the
// Book tells lots apart by id) and never written: the write is then taken
// back (draft.done).
func (p *Player) newID() int64 {
	if p.next == len(p.ids) {
		p.short++
		return -int64(p.short)
	}
	p.next++
	return p.ids[p.next-1]
}

// GiveIDs hands the player more new ids, for a write whose plan asked for
// them (Plan.IDsShort): planned again, it takes them.
func (p *Player) GiveIDs(ids []int64) { p.ids = append(p.ids, ids...) }

// Lots are the player's lots after the plans: the New ones to insert, the
// Changed ones to update. The slice is the Player's own.
func (p *Player) Lots() []*BookLot {
	p.book.undo() // a refused last write
	return p.book.Lots()
}

// Written tells whether a plan wrote, and the player's row as the plans
// leave it: the last version and position, and the time of the last
// write.
func (p *Player) Written() (version, pos int64, at time.Time, ok bool) {
	return p.state.Version, p.state.Pos, p.state.At.Add(-time.Microsecond), p.wrote
}

// draft is one write of the player in the making, on its book: the
// player keeps it (done) only if the whole write is accepted; the book
// takes back one that is not at the next write's begin (Book.begin).
type draft struct {
	p       *Player
	at      time.Time
	version int64
	pos     int64
	plan    Plan
	// stored is the trx the write files under its key, and credited its
	// grants of purchases, for the player's writes after it: kept only
	// with the write.
	stored   *StoredTrx
	credited []BookOp
	// idsFrom is where the write's ids start in the player's: a write
	// short of ids gives back those it took, to take them again.
	idsFrom int
}

// begin starts a write at the player's next time and version.
func (p *Player) begin() *draft {
	p.book.begin(p.state.At)
	p.short = 0
	return &draft{p: p, at: p.state.At, version: p.state.Version + 1, pos: p.state.Pos, idsFrom: p.next}
}

// done makes the write the player's, unless it lacked ids: then nothing
// of it is kept, and its plan asks for the ids it lacked. A player's
// writes have strictly increasing times (the spend order and the finlog
// rely on it): the next is a microsecond later, the precision PostgreSQL
// keeps.
func (w *draft) done() Plan {
	p := w.p
	if p.short > 0 {
		p.next = w.idsFrom
		return Plan{IDsShort: p.short}
	}
	w.p.book.keepWrite()
	p.state.Version, p.state.Pos, p.state.At, p.wrote = w.version, w.pos, w.at.Add(time.Microsecond), true
	if w.stored != nil {
		p.trx[TrxKey{w.stored.Emitter, w.stored.IdempotencyKey}] = w.stored
	}
	p.credit(w.credited)
	return w.plan
}

func (w *draft) nextPos() int64 {
	w.pos++
	return w.pos
}

// insert adds a trx row and its ops, each at the next position.
func (w *draft) insert(row TrxRow, ops []BookOp) {
	row.Version, row.CreatedAt, row.Pos = w.version, w.at, w.nextPos()
	w.plan.Inserts = append(w.plan.Inserts, row)
	w.ops(row.ID, 0, ops)
}

func (w *draft) ops(trxID int64, seq int32, ops []BookOp) {
	for i, o := range ops {
		w.plan.Ops = append(w.plan.Ops, OpRow{BookOp: o, TrxID: trxID, Seq: seq + int32(i), CreatedAt: w.at, Pos: w.nextPos()})
	}
}

// expiries records expire ops in a trx of their own (kind expire, emitter
// 0), so that the finlog shows when and why currency left.
func (w *draft) expiries(ops []BookOp) {
	if len(ops) == 0 {
		return
	}
	id := w.p.book.NewID()
	w.insert(TrxRow{ID: id, IdempotencyKey: "expire-" + strconv.FormatInt(id, 10), Hash: []byte{}, Kind: TrxExpire,
		Status: StatusCommitted, Reason: "expired"}, ops)
}

// answer is a new committed trx of the ops, as answered to the client.
func (w *draft) answer(id int64, sc Scope, kind TrxKind, reason string, meta json.RawMessage, ops []BookOp) Trx {
	return Trx{ID: id, IdempotencyKey: sc.IdempotencyKey, Emitter: sc.Emitter, Kind: kind, Status: StatusCommitted, Reason: reason, Meta: meta,
		CreatedAt: w.at.UTC(), Version: w.version, Ops: w.p.catalog.Ops(ops), Balances: w.p.catalog.BalancesAfter(ops)}
}

// keep files a new client trx under its key, for the requests after it.
func (w *draft) keep(trx Trx, hash []byte, pending []PendingGrant) {
	w.stored = &StoredTrx{Trx: trx, Hash: hash, PendingGrants: pending}
}

// replay answers a request whose key was used before: the original answer
// if the payload is the same (a finished hold's begin, not the hold as it
// is now), idempotency_conflict otherwise.
func replay(st *StoredTrx, hash RequestHash) Plan {
	if !hash.Same(st.Hash) {
		return Plan{Err: Errorf(CodeIdempotencyConflict, "idempotency_key %q was used for another request (trx %d)", st.IdempotencyKey, st.ID)}
	}
	if st.Begin != nil {
		return Plan{Trx: *st.Begin, Replay: true}
	}
	return Plan{Trx: st.Trx, Replay: true}
}

// Change plans a one-phase change, or with Hold a hold's begin: its
// consumes reserve what they take, its grants wait for the commit. Due
// expiries in the currencies of its ops are recorded first; those of
// other currencies are left to the sweeper, so a write's cost does not
// grow with every currency the player holds. A known key is a replay or
// idempotency_conflict. Errors: insufficient_funds, too_many_lots,
// invalid_argument (a balance past BalanceMax), idempotency_conflict,
// internal.
func (p *Player) Change(v ValidChange) Plan {
	if st := p.trx[v.Key()]; st != nil {
		return replay(st, v.Hash)
	}
	// Checked once the key is known new: a retry of a grant that was
	// applied gets its first answer even after its expiry passed.
	if err := v.CheckExpiries(p.state.At); err != nil {
		return Plan{Err: err}
	}
	w := p.begin()
	expired := w.p.book.Expire(v.Currencies())
	id := w.p.book.NewID()
	w.p.book.TrxID = id
	var ops []BookOp
	var pending []PendingGrant
	for _, op := range v.Ops {
		switch {
		case op.Amount < 0:
			taken, _, err := w.p.book.Consume(op.Currency, -op.Amount, CauseChange, v.Hold)
			if err != nil {
				return Plan{Err: err}
			}
			ops = append(ops, taken...)
		case v.Hold:
			pending = append(pending, PendingGrant{Currency: op.Currency.ID, Amount: op.Amount, Paid: op.Paid,
				ExpiresAt: op.ExpiresAt, Priority: op.Priority, Purchase: op.Purchase})
		default:
			g, err := w.p.book.Grant(op, CauseChange)
			if err != nil {
				return Plan{Err: err}
			}
			ops = append(ops, g)
		}
	}
	trx := w.answer(id, v.Scope, TrxChange, v.Reason, v.Meta, ops)
	if v.Hold {
		until := w.at.Add(v.HoldTTL).UTC()
		trx.Kind, trx.HoldExpiresAt = TrxHold, &until
		trx = p.catalog.BeginAnswer(trx, w.version, ops, pending)
	}
	w.expiries(expired)
	w.insert(TrxRow{ID: id, Emitter: v.Emitter, IdempotencyKey: v.IdempotencyKey, Hash: v.Hash.Sum, Kind: trx.Kind,
		Status: trx.Status, Reason: v.Reason, Meta: v.Meta, HoldExpiresAt: trx.HoldExpiresAt, PendingGrants: pending}, ops)
	w.keep(trx, v.Hash.Sum, pending)
	w.credited = ops
	w.plan.Trx = trx
	return w.done()
}

// Exchange plans an exchange: it consumes From in spend order and grants
// To at the rate; the paid share carries over (Rate.Exchange), in a paid
// lot per paid lot consumed, with its value and store order
// (exchangePaid). Paid From that becomes paid To is converted, not
// consumed: revenue is recognised only for paid coins that become free
// (all of them when To cannot be paid). Errors: as Change's, and
// invalid_argument when the exchange yields nothing.
func (p *Player) Exchange(v ValidExchange) Plan {
	if st := p.trx[v.Key()]; st != nil {
		return replay(st, v.Hash)
	}
	w := p.begin()
	expired := w.p.book.Expire(v.Currencies())
	id := w.p.book.NewID()
	w.p.book.TrxID = id
	cause := CauseChange
	if v.To.Paid {
		cause = CauseExchange
	}
	ops, paidTaken, err := w.p.book.Consume(v.From, v.Amount, cause, false)
	if err != nil {
		return Plan{Err: err}
	}
	total, paid, ok := v.Rate.Exchange(v.Amount, paidTaken, v.To.Paid)
	if !ok || total <= 0 {
		return Plan{Err: Errorf(CodeInvalid, "exchange yields nothing")}
	}
	// Into a currency that can be paid, even when the whole paid part
	// rounds to nothing: the paid coins that made no paid lot became free
	// ones, their consume is revenue (exchangePaid).
	if v.To.Paid {
		grants, err := exchangePaid(w.p.book, v, ops)
		if err != nil {
			return Plan{Err: err}
		}
		ops = append(ops, grants...)
	}
	if total > paid {
		g, err := w.p.book.Grant(ValidOp{Currency: v.To, Amount: total - paid}, CauseExchange)
		if err != nil {
			return Plan{Err: err}
		}
		ops = append(ops, g)
	}
	trx := w.answer(id, v.Scope, TrxExchange, v.Reason, v.Meta, ops)
	w.expiries(expired)
	w.insert(TrxRow{ID: id, Emitter: v.Emitter, IdempotencyKey: v.IdempotencyKey, Hash: v.Hash.Sum, Kind: TrxExchange,
		Status: StatusCommitted, Reason: v.Reason, Meta: v.Meta}, ops)
	w.keep(trx, v.Hash.Sum, nil)
	p.exchanged(id, ops)
	w.plan.Trx = trx
	return w.done()
}

// exchangePaid grants the paid part of an exchange into a currency that
// can be paid: one lot per paid lot consumed (ops, the exchange's
// consumes, in spend order), holding that lot's share of the paid part —
// the paid part of the consumes up to and including it, at the rate,
// less that of those before it, so that the shares add up to the paid
// part (Rate.Exchange) — and all the value the consume took, with the
// consumed lot's store order and fiat: a refund of the order follows its
// coins there. A paid lot whose share rounds to nothing has its coins
// turned into free ones: its consume becomes revenue (cause change), as
// into a currency that cannot be paid.
func exchangePaid(book *Book, v ValidExchange, ops []BookOp) ([]BookOp, error) {
	var grants []BookOp
	var paidSoFar, sharesBefore Amount
	for i := range ops {
		o := &ops[i]
		if !o.Paid {
			continue
		}
		paidSoFar -= o.Amount // a consume's amount is negative; the sum is at most v.Amount
		_, shares, _ := v.Rate.Exchange(paidSoFar, paidSoFar, true)
		share := shares - sharesBefore
		sharesBefore = shares
		if share == 0 {
			o.Cause = CauseChange
			continue
		}
		from := book.byID[o.LotID].Worth
		from.Value = -o.Value
		g, err := book.grant(ValidOp{Currency: v.To, Amount: share, Paid: true}, from, CauseExchange)
		if err != nil {
			return nil, err
		}
		grants = append(grants, g)
	}
	return grants, nil
}

// Commit plans a pending hold's commit by the client of emitter by (the
// hold's own, or a support agent's), which the trx records
// (Trx.FinishedBy): its reservations are settled and its grants applied.
// A hold past its TTL is rolled back instead (status expired), and the
// answer is hold_expired. Committing a committed hold is a replay, which
// names the client that committed it. Errors: not_found,
// hold_not_pending (rolled back, or not a hold), hold_expired,
// invalid_argument and too_many_lots (a grant past a bound: the hold
// stays pending), internal.
func (p *Player) Commit(k TrxKey, by Emitter) Plan { return p.finish(Finish{k, FinishCommit, by}) }

// Rollback plans a pending hold's rollback by the client of emitter by,
// as Commit: its reservations return to the very lots they came from; no
// bound can refuse it. Rolling back a rolled-back or expired hold is a
// replay. Errors: not_found, hold_not_pending (committed, or not a hold),
// internal.
func (p *Player) Rollback(k TrxKey, by Emitter) Plan { return p.finish(Finish{k, FinishRollback, by}) }

// ExpireHold plans the hold sweeper's rollback of a hold past its TTL
// (status expired), by coffer (FinishedBy 0). A hold not due, or finished
// already, is left as it is: the answer is its stored trx, as a replay.
func (p *Player) ExpireHold(k TrxKey) Plan { return p.finish(Finish{Key: k, Step: FinishExpire}) }

// ExpireLots plans the lot sweeper's write: an expire op for every lot
// that expired with an amount left, in every loaded currency. A player
// with none writes nothing.
func (p *Player) ExpireLots() Plan {
	w := p.begin()
	expired := w.p.book.Expire(nil)
	if len(expired) == 0 {
		return Plan{}
	}
	w.expiries(expired)
	return w.done()
}

// finish ends the hold of k as step says; FinishExpire is the hold
// sweeper's: it rolls back only a hold past its TTL. Due expiries in every loaded
// currency are recorded first. A grant or a reservation may land on a lot
// whose expiry has passed: it expires at once, in a trx of its own after
// the hold's ops, so that no lot is left with a due expiry unrecorded
// behind the lot sweeper's window.
func (p *Player) finish(f Finish) Plan {
	k, commit, sweep := f.Key, f.Step == FinishCommit, f.Step == FinishExpire
	h := p.trx[k]
	if h == nil {
		return Plan{Err: Errorf(CodeNotFound, "no trx with idempotency_key %q", k.IdempotencyKey)}
	}
	due := h.Status == StatusPending && !h.HoldExpiresAt.After(p.state.At)
	if sweep && h.Kind == TrxHold && !due {
		// Finished meanwhile (by a client, or another sweeper), or not
		// due yet: the sweeper leaves it.
		return Plan{Trx: h.Trx, Replay: true}
	}
	// Finished already: a replay or a conflict, nothing to write.
	if err := holdState(h, commit); err != nil || h.Status != StatusPending {
		return Plan{Trx: h.Trx, Replay: err == nil, Err: err}
	}
	w := p.begin()
	expired := w.p.book.Expire(nil)
	w.p.book.TrxID = h.ID
	status, after := StatusCommitted, error(nil)
	var ops []BookOp
	var err error
	if commit && !due {
		ops, err = commitHold(w.p.book, p.catalog, h)
	} else {
		status = StatusRolledBack
		if due {
			status = StatusExpired
		}
		ops, err = releaseHold(w.p.book, h)
		if commit {
			after = holdExpired(h)
		}
	}
	if err != nil {
		return Plan{Err: err}
	}
	expiredAfter := w.p.book.Expire(nil)
	settled := settledOps(h.Ops)
	out := h.Trx
	out.Status, out.Version, out.FinishedBy = status, w.version, f.By
	out.Ops = append(settled, p.catalog.Ops(ops)...)
	out.Balances = p.catalog.BalancesAfter(ops)
	w.expiries(expired)
	w.plan.Finish = &TrxFinish{ID: h.ID, CreatedAt: h.CreatedAt, Status: status, Version: w.version, BeginVersion: h.Version, FinishedAt: w.at, By: f.By}
	w.ops(h.ID, int32(len(settled)), ops)
	w.expiries(expiredAfter)
	if status == StatusCommitted {
		w.credited = ops
	}
	begin := h.Trx
	finished := *h
	finished.Trx, finished.Begin = out, &begin
	w.stored = &finished
	w.plan.Trx, w.plan.Err = out, after
	return w.done()
}

// holdState decides what a commit or rollback of h does when h is not a
// pending hold: a replay (nil) or a conflict. The hold state machine:
// pending → committed (commit), rolled_back (rollback) or expired (past
// its TTL: the sweeper, or a commit that finds it so).
func holdState(h *StoredTrx, commit bool) error {
	if h.Kind != TrxHold {
		return Errorf(CodeHoldNotPending, "trx %q is a %s, not a hold", h.IdempotencyKey, h.Kind)
	}
	switch h.Status {
	case StatusPending:
		return nil
	case StatusCommitted:
		if commit {
			return nil
		}
		return Errorf(CodeHoldNotPending, "hold %q is committed; it cannot be rolled back", h.IdempotencyKey)
	case StatusRolledBack:
		if commit {
			return Errorf(CodeHoldNotPending, "hold %q was rolled back; it cannot be committed", h.IdempotencyKey)
		}
		return nil
	default: // expired
		if commit {
			return holdExpired(h)
		}
		return nil
	}
}

func holdExpired(h *StoredTrx) error {
	return Errorf(CodeHoldExpired, "hold %q expired at %s and was rolled back", h.IdempotencyKey, h.HoldExpiresAt.Format(time.RFC3339))
}

// settledOps drops the pending grants listed in a pending hold's ops.
func settledOps(ops []Op) []Op {
	out := []Op{} // none is [], as a stored trx's ops read back
	for _, o := range ops {
		if !o.Pending {
			out = append(out, o)
		}
	}
	return out
}

// commitHold settles each reservation of hold h on its lot and applies
// its grants.
func commitHold(book *Book, c *Catalog, h *StoredTrx) ([]BookOp, error) {
	for _, o := range h.Ops {
		if o.Kind == OpConsume {
			if err := book.Settle(o.LotID, -o.Amount, -o.value()); err != nil {
				return nil, err
			}
		}
	}
	var ops []BookOp
	for _, g := range h.PendingGrants {
		op, err := book.Grant(ValidOp{Currency: c.CurrencyOf(g.Currency), Amount: g.Amount, Paid: g.Paid, ExpiresAt: g.ExpiresAt, Priority: g.Priority, Purchase: g.Purchase}, CauseChange)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// releaseHold returns each reservation of hold h to its lot, and what a
// lot owes a refund on to the refund. The lots must be loaded (a lot a
// pending hold reserves from is held).
func releaseHold(book *Book, h *StoredTrx) ([]BookOp, error) {
	var ops []BookOp
	for _, o := range h.Ops {
		if o.Kind != OpConsume {
			continue
		}
		released, err := book.Release(o.LotID, -o.Amount, -o.value())
		if err != nil {
			return nil, err
		}
		ops = append(ops, released...)
	}
	return ops, nil
}
