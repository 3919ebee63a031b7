package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Change applies a one-phase change or begins a hold. Cost: one round
// trip for a change of one grant (grantTrx; a replay one more), otherwise
// two (lock and reads; writes and commit; a replay two more); a change
// that credits a purchase first claims its order (claimPurchases: one
// more per database holding a claim).
func (s *Store) Change(ctx context.Context, req coffer.ChangeRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateChange(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	// One Timeout bounds the claims and the write together.
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.claimPurchases(ctx, v); err != nil {
		return coffer.Trx{}, false, err
	}
	if !req.Hold && len(v.Ops) == 1 && v.Ops[0].Amount > 0 {
		return s.grantTrx(ctx, v)
	}
	return s.planChange(ctx, v)
}

// planChange writes a validated change as the service plans it.
func (s *Store) planChange(ctx context.Context, v coffer.ValidChange) (coffer.Trx, bool, error) {
	req := v.ChangeRequest
	currencies := make([]int32, len(v.Ops))
	for i, op := range v.Ops {
		currencies[i] = int32(op.Currency.ID)
	}
	return s.writeTrx(ctx, req.Scope, v.Hash, currencies, 2+len(v.Ops), func(t *playerTx, book *coffer.Book) (coffer.Trx, []coffer.BookOp, []byte, error) {
		if err := v.CheckExpiries(t.now); err != nil {
			return coffer.Trx{}, nil, nil, err
		}
		var ops []coffer.BookOp
		var pending []pendingGrant
		for _, op := range v.Ops {
			switch {
			case op.Amount < 0:
				taken, _, err := book.Consume(op.Currency, -op.Amount, coffer.CauseChange, req.Hold)
				if err != nil {
					return coffer.Trx{}, nil, nil, err
				}
				ops = append(ops, taken...)
			case req.Hold:
				pending = append(pending, pendingGrant{Currency: op.Currency.ID, Amount: op.Amount, Paid: op.Paid,
					ExpiresAt: op.ExpiresAt, Priority: op.Priority, Purchase: op.Purchase})
			default:
				g, err := book.Grant(op.Currency, op.Amount, op.Paid, op.ExpiresAt, op.Priority, op.Purchase, coffer.CauseChange)
				if err != nil {
					return coffer.Trx{}, nil, nil, err
				}
				ops = append(ops, g)
			}
		}
		out := s.newTrx(t, t.nextID(), req.IdempotencyKey, coffer.TrxChange, req.Reason, v.Meta, ops)
		if !req.Hold {
			return out, ops, nil, nil
		}
		out.Kind, out.Status = coffer.TrxHold, coffer.StatusPending
		until := t.now.Add(v.HoldTTL).UTC()
		out.HoldExpiresAt = &until
		for _, g := range pending {
			out.Ops = append(out.Ops, coffer.Op{Currency: s.code(g.Currency), Amount: g.Amount, Kind: coffer.OpGrant,
				Paid: g.Paid, Pending: true, Purchase: g.Purchase})
		}
		pendingJSON, _ := json.Marshal(pending)
		return out, ops, pendingJSON, nil
	})
}

// writeTrx runs a new trx for scope under the player's lock: it loads the
// lots of the currencies plan may touch, records their due expiries, lets
// plan move lots on the book, and writes the trx, its ops and lots. nIDs
// guesses how many ids plan needs. Due expiries in other currencies wait
// for the sweeper: their op chains are not touched here, so they stay in
// order, and a write's cost does not grow with every currency the player
// holds.
//
// A new key is the common case, so the key is not looked up first: the
// trx insert's unique index finds a known key, the transaction rolls back
// with nothing applied, and the stored trx answers (a replay, or
// idempotency_conflict). A plan that fails looks the key up too, so that a
// retry of a request that succeeded gets its first answer even when it
// would fail now.
func (s *Store) writeTrx(ctx context.Context, sc coffer.Scope, hash coffer.RequestHash, currencies []int32, nIDs int,
	plan func(t *playerTx, book *coffer.Book) (coffer.Trx, []coffer.BookOp, []byte, error)) (coffer.Trx, bool, error) {
	var out coffer.Trx
	var replayed bool
	err := s.withPlayer(ctx, sc.Namespace, sc.PlayerID, func(t *playerTx) error {
		t.emitter = sc.Emitter
		book := &coffer.Book{NewID: t.nextID}
		b := &pgx.Batch{}
		queueLots(b, t, book, currencies)
		if err := t.start(b, nIDs); err != nil {
			return err
		}
		book.Now = t.now
		expired := book.Expire()
		trx, ops, pending, err := plan(t, book)
		if err != nil {
			out, replayed, err = s.known(t, sc, hash, err)
			return err
		}
		out = trx
		w := &pgx.Batch{}
		s.queueExpireTrx(w, t, expired)
		queueTrxRow(w, t, out, t.emitter, hash.Sum, pending)
		queueOps(w, t, out.ID, 0, ops)
		queueLotWrites(w, t, book, out.ID)
		if t.idErr != nil {
			return t.idErr
		}
		err = t.finish(w)
		if keyTaken(t, err) {
			if err := t.rollback(); err != nil {
				return err
			}
			out, replayed, err = s.known(t, sc, hash, err)
		}
		return err
	})
	return out, replayed, err
}

// known answers a write whose key may have been used: the stored trx's
// replay or idempotency_conflict, or failed if the key is new. One round
// trip.
func (s *Store) known(t *playerTx, sc coffer.Scope, hash coffer.RequestHash, failed error) (coffer.Trx, bool, error) {
	var existing *storedTrx
	b := &pgx.Batch{}
	s.queueTrxByKey(b, t, sc, &existing)
	if err := t.conn.SendBatch(t.ctx, b).Close(); err != nil {
		return coffer.Trx{}, false, err
	}
	if existing == nil {
		return coffer.Trx{}, false, failed
	}
	return replay(existing, hash)
}

// keyTaken tells whether err is the trx insert finding its idempotency key
// already stored.
func keyTaken(t *playerTx, err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505" && pg.ConstraintName == t.q.idempotencyIndex
}

// newTrx is a committed trx of the ops, as answered to the client.
func (s *Store) newTrx(t *playerTx, id int64, key string, kind coffer.TrxKind, reason string, meta json.RawMessage, ops []coffer.BookOp) coffer.Trx {
	return coffer.Trx{ID: id, IdempotencyKey: key, Kind: kind, Status: coffer.StatusCommitted,
		Reason: reason, Meta: meta, CreatedAt: t.now.UTC(), Version: t.version, Ops: s.apiOps(ops), Balances: s.balancesAfter(ops)}
}

// metaText is a trx's meta as stored: its canonical text, the bytes
// every answer carries, or NULL when there is none.
func metaText(meta json.RawMessage) *string {
	if len(meta) == 0 {
		return nil
	}
	text := string(meta)
	return &text
}

// grantTrx writes a one-phase change of one grant in one statement,
// grant_trx_N: the lock, the plan and the writes run in the database, so
// the write costs one round trip and an implicit transaction, where
// writeTrx costs two. The function writes the rows Book.Grant plans; where
// that plan would do more (a due expiry to record first) or may fail (near
// a bound: the balance past coffer.BalanceMax, a lot beyond
// coffer.LotsMax), it raises CF001 having written nothing, and the service
// plans the write (planChange), which decides.
func (s *Store) grantTrx(ctx context.Context, v coffer.ValidChange) (coffer.Trx, bool, error) {
	var out coffer.Trx
	var replayed, planHere bool
	sc, g := v.Scope, v.Ops[0]
	err := s.withPlayer(ctx, sc.Namespace, sc.PlayerID, func(t *playerTx) error {
		op := coffer.BookOp{Currency: g.Currency.ID, Kind: coffer.OpGrant, Cause: coffer.CauseChange,
			Amount: g.Amount, Paid: g.Paid, Purchase: g.Purchase}
		var id int64
		err := t.conn.QueryRow(t.ctx, t.q.grantTrx, t.ns, t.player, sc.Emitter, sc.IdempotencyKey, v.Hash.Sum,
			v.Reason, metaText(v.Meta), int32(g.Currency.ID), int64(g.Amount), g.Paid, g.ExpiresAt, g.Priority,
			purchaseJSON(g.Purchase), int64(coffer.BalanceMax), coffer.LotsMax).Scan(&id, &op.LotID, &t.version, &t.now, &op.BalanceAfter, &op.PaidAfter)
		var pg *pgconn.PgError
		switch {
		case errors.As(err, &pg) && pg.Code == "CF001":
			planHere = true
			return nil
		case keyTaken(t, err):
			out, replayed, err = s.known(t, sc, v.Hash, err)
			return err
		case err != nil:
			return err
		}
		ops := []coffer.BookOp{op}
		out = s.newTrx(t, id, sc.IdempotencyKey, coffer.TrxChange, v.Reason, v.Meta, ops)
		return nil
	})
	if planHere {
		return s.planChange(ctx, v)
	}
	return out, replayed, err
}

// Exchange consumes From in spend order and grants To at the rate; the paid
// share carries over (see coffer.Rate.Exchange).
func (s *Store) Exchange(ctx context.Context, req coffer.ExchangeRequest) (coffer.Trx, bool, error) {
	v, err := s.catalog.ValidateExchange(req)
	if err != nil {
		return coffer.Trx{}, false, err
	}
	return s.writeTrx(ctx, req.Scope, v.Hash, []int32{int32(v.From.ID), int32(v.To.ID)}, 4, func(t *playerTx, book *coffer.Book) (coffer.Trx, []coffer.BookOp, []byte, error) {
		// Paid A that becomes paid B is converted, not consumed: revenue is
		// recognised only when B cannot be paid.
		cause := coffer.CauseChange
		if v.To.Paid {
			cause = coffer.CauseExchange
		}
		ops, paidTaken, err := book.Consume(v.From, v.Amount, cause, false)
		if err != nil {
			return coffer.Trx{}, nil, nil, err
		}
		total, paid, ok := v.Rate.Exchange(v.Amount, paidTaken, v.To.Paid)
		if !ok || total <= 0 {
			return coffer.Trx{}, nil, nil, coffer.Errorf(coffer.CodeInvalid, "exchange yields nothing")
		}
		for _, part := range []struct {
			amount coffer.Amount
			paid   bool
		}{{paid, true}, {total - paid, false}} {
			if part.amount == 0 {
				continue
			}
			g, err := book.Grant(v.To, part.amount, part.paid, nil, 0, nil, coffer.CauseExchange)
			if err != nil {
				return coffer.Trx{}, nil, nil, err
			}
			ops = append(ops, g)
		}
		return s.newTrx(t, t.nextID(), req.IdempotencyKey, coffer.TrxExchange, req.Reason, v.Meta, ops), ops, nil, nil
	})
}

// Commit applies a pending hold's grants. A hold past its TTL is rolled
// back on the spot (status expired) and reported as hold_expired.
func (s *Store) Commit(ctx context.Context, sc coffer.Scope) (coffer.Trx, bool, error) {
	if err := sc.Validate(); err != nil {
		return coffer.Trx{}, false, err
	}
	return s.finishHold(ctx, sc, true, false)
}

// Rollback returns a pending hold's reservations to their lots.
func (s *Store) Rollback(ctx context.Context, sc coffer.Scope) (coffer.Trx, bool, error) {
	if err := sc.Validate(); err != nil {
		return coffer.Trx{}, false, err
	}
	return s.finishHold(ctx, sc, false, false)
}

// finishHold commits or releases a hold under the player's lock. sweep is
// the hold sweeper's call: release only if the hold is past its TTL.
func (s *Store) finishHold(ctx context.Context, sc coffer.Scope, commit, sweep bool) (coffer.Trx, bool, error) {
	var out coffer.Trx
	var replayed bool
	var after error // reported after a successful write (hold_expired)
	err := s.withPlayer(ctx, sc.Namespace, sc.PlayerID, func(t *playerTx) error {
		var h *storedTrx
		book := &coffer.Book{NewID: t.nextID}
		b := &pgx.Batch{}
		s.queueTrxByKey(b, t, sc, &h)
		queueLots(b, t, book, nil)
		if err := t.start(b, 2+coffer.OpsMax/8); err != nil {
			return err
		}
		if h == nil {
			return coffer.Errorf(coffer.CodeNotFound, "no trx with idempotency_key %q", sc.IdempotencyKey)
		}
		book.Now = t.now
		expiredNow := h.Status == coffer.StatusPending && !h.HoldExpiresAt.After(t.now)
		// Finished already (a replay or a conflict), or, for the sweeper,
		// not due yet: nothing to write.
		if err := holdState(h, commit); err != nil || h.Status != coffer.StatusPending || (sweep && !expiredNow) {
			out, replayed = h.Trx, err == nil
			return err
		}
		var ops, expiredAfter []coffer.BookOp
		expired := book.Expire()
		status := coffer.StatusCommitted
		if commit && !expiredNow {
			var err error
			if ops, err = s.commit(book, h); err != nil {
				return err
			}
		} else {
			status = coffer.StatusRolledBack
			if expiredNow {
				status = coffer.StatusExpired
			}
			var err error
			if ops, err = release(book, h); err != nil {
				return err
			}
			if commit {
				after = holdExpired(h)
			}
		}
		// A grant or a reservation may land on a lot whose expiry has
		// passed: it expires at once, in a trx of its own whose ops follow
		// the hold's in the player's order, so that no lot is left with a
		// due expiry unrecorded behind the lot sweeper's window
		// (SweepExpiredLots).
		expiredAfter = book.Expire()
		out = h.Trx
		out.Status, out.Version = status, t.version
		out.Ops = append(settledOps(h.Ops), s.apiOps(ops)...)
		out.Balances = s.balancesAfter(ops)
		w := &pgx.Batch{}
		s.queueExpireTrx(w, t, expired)
		w.Queue(t.q.finishHold, t.ns, t.player, h.CreatedAt, h.ID, status, t.version, t.now)
		queueOps(w, t, h.ID, int32(len(settledOps(h.Ops))), ops)
		s.queueExpireTrx(w, t, expiredAfter)
		queueLotWrites(w, t, book, h.ID)
		if t.idErr != nil {
			return t.idErr
		}
		return t.finish(w)
	})
	if err == nil && after != nil {
		return out, false, after
	}
	return out, replayed, err
}

// holdState decides what a commit or rollback of h does when h is not a
// pending hold: a replay (nil) or a conflict.
func holdState(h *storedTrx, commit bool) error {
	if h.Kind != coffer.TrxHold {
		return coffer.Errorf(coffer.CodeHoldNotPending, "trx %q is a %s, not a hold", h.IdempotencyKey, h.Kind)
	}
	switch h.Status {
	case coffer.StatusPending:
		return nil
	case coffer.StatusCommitted:
		if commit {
			return nil
		}
		return coffer.Errorf(coffer.CodeHoldNotPending, "hold %q is committed; it cannot be rolled back", h.IdempotencyKey)
	case coffer.StatusRolledBack:
		if commit {
			return coffer.Errorf(coffer.CodeHoldNotPending, "hold %q was rolled back; it cannot be committed", h.IdempotencyKey)
		}
		return nil
	default: // expired
		if commit {
			return holdExpired(h)
		}
		return nil
	}
}

func holdExpired(h *storedTrx) error {
	return coffer.Errorf(coffer.CodeHoldExpired, "hold %q expired at %s and was rolled back", h.IdempotencyKey, h.HoldExpiresAt.Format(time.RFC3339))
}

// settledOps drops the pending grants listed in a pending hold's ops.
func settledOps(ops []coffer.Op) []coffer.Op {
	var out []coffer.Op
	for _, o := range ops {
		if !o.Pending {
			out = append(out, o)
		}
	}
	return out
}

// commit settles each reservation of hold h on its lot and applies its
// grants.
func (s *Store) commit(book *coffer.Book, h *storedTrx) ([]coffer.BookOp, error) {
	for _, o := range h.Ops {
		if o.Kind == coffer.OpConsume {
			if err := book.Settle(o.LotID, -o.Amount); err != nil {
				return nil, err
			}
		}
	}
	var ops []coffer.BookOp
	for _, g := range h.pendingGrants {
		op, err := book.Grant(s.currency(g.Currency), g.Amount, g.Paid, g.ExpiresAt, g.Priority, g.Purchase, coffer.CauseChange)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// release returns each reservation of hold h to its lot. The lots were
// read with the player's (a lot a pending hold reserves from is held).
func release(book *coffer.Book, h *storedTrx) ([]coffer.BookOp, error) {
	var ops []coffer.BookOp
	for _, o := range h.Ops {
		if o.Kind != coffer.OpConsume {
			continue
		}
		op, err := book.Release(o.LotID, -o.Amount)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, nil
}
