package postgres_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// batchAndAlone runs calls on player batched as one batch (queued behind a
// batch of blocker), and on player alone one at a time, each its own
// batch, and returns both runs' answers.
func (e *env) batchAndAlone(blocker, batched, alone coffer.PlayerID, calls ...func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error)) (inBatch, oneByOne []coffer.Trx) {
	e.t.Helper()
	store := postgres.New(e.router, e.catalog, postgres.Options{Committers: 1, Timeout: 20 * time.Second, LockTimeout: 20 * time.Second})
	defer store.Close()
	inBatch, oneByOne = make([]coffer.Trx, len(calls)), make([]coffer.Trx, len(calls))
	for i, call := range calls {
		trx, err := call(e.store, alone)
		must(e.t, err)
		oneByOne[i] = trx
	}
	var queued []func() error
	for i, call := range calls {
		queued = append(queued, func() (err error) {
			inBatch[i], err = call(store, batched)
			return err
		})
	}
	tx, errs := e.queuedBehind(store, blocker, queued...)
	must(e.t, tx.Rollback(ctx))
	for range 1 + len(calls) {
		must(e.t, <-errs)
	}
	return inBatch, oneByOne
}

// asSent is a trx as a client reads it over HTTP, less what differs
// between two players by design (ids, times).
func asSent(t coffer.Trx) string {
	t.ID, t.CreatedAt, t.HoldExpiresAt = 0, time.Time{}, nil
	for i := range t.Ops {
		t.Ops[i].LotID = 0
	}
	raw, _ := json.Marshal(t)
	return string(raw)
}

// TestRollbackReplayOfAGrantsOnlyHoldInOneBatch: a hold that only grants
// (a pending reward) is rolled back, then the rollback is sent again. Its
// finish writes no op. Sent one at a time the second rollback is read
// from the store, which answers ops [] (scanTrx); in one batch it is the
// first's answer, kept in memory (Player.finish), which must answer ops
// [] too, not null (settledOps).
func TestRollbackReplayOfAGrantsOnlyHoldInOneBatch(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 3)
	for _, p := range ps[1:] {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: []coffer.OpRequest{free("silver", 3)}})
		must(t, err)
	}
	rollback := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		trx, _, err := s.Rollback(ctx, byItsClient(p, "h"))
		return trx, err
	}
	inBatch, alone := e.batchAndAlone(ps[0], ps[1], ps[2], rollback, rollback)
	for i := range alone {
		if got, want := asSent(inBatch[i]), asSent(alone[i]); got != want {
			t.Errorf("rollback %d:\nin a batch %s\nalone      %s", i+1, got, want)
		}
	}
}

// TestBalanceAtVersionOfAHoldBegunAndCommittedInOneBatch: a hold begun
// and committed in one batch is inserted finished; its row keeps its
// begin's version all the same, so a balance at its begin's time
// answers that version, in a batch as alone.
func TestBalanceAtVersionOfAHoldBegunAndCommittedInOneBatch(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 3)
	for _, p := range ps[1:] {
		e.mustChange(p, "grant", free("gold", 10))
	}
	begin := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		trx, _, err := s.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -4)}})
		return trx, err
	}
	commit := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		trx, _, err := s.Commit(ctx, byItsClient(p, "h"))
		return trx, err
	}
	inBatch, alone := e.batchAndAlone(ps[0], ps[1], ps[2], begin, commit)
	for p, trx := range map[coffer.PlayerID][]coffer.Trx{ps[1]: inBatch, ps[2]: alone} {
		for _, c := range []struct {
			at   time.Time
			want int64
		}{{trx[0].CreatedAt, 2}, {time.Now(), 3}} {
			b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: p, At: &c.at})
			must(t, err)
			if b.Version != c.want {
				t.Errorf("player %d at %s: version %d, want %d", p, c.at.Format(time.RFC3339Nano), b.Version, c.want)
			}
		}
	}
}

// TestRefundOfALotMadeInItsBatchKeepsWhatItOwes: a purchase, a hold on
// all of it and the order's chargeback in one batch. The lot is new to
// the batch and owes the refund the coins the hold reserves (ADR 0015);
// it must be inserted owing them, so that the hold's rollback, later,
// gives them to the refund, as it does for the calls sent one at a time.
func TestRefundOfALotMadeInItsBatchKeepsWhatItOwes(t *testing.T) {
	e := newEnv(t)
	ps := e.playersOn(0, 1, 3)
	buy := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		trx, _, err := s.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "buy"), Ops: []coffer.OpRequest{paid("silver", 100, fmt.Sprintf("o-%d", p))}})
		return trx, err
	}
	hold := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		trx, _, err := s.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "h"), Hold: true, Ops: []coffer.OpRequest{free("silver", -100)}})
		return trx, err
	}
	chargeback := func(s *postgres.Store, p coffer.PlayerID) (coffer.Trx, error) {
		r := refundOf(p, "r", fmt.Sprintf("o-%d", p))
		r.Kind = coffer.RefundChargeback
		trx, _, err := s.Refund(ctx, r)
		return trx, err
	}
	e.batchAndAlone(ps[0], ps[1], ps[2], buy, hold, chargeback)
	for _, p := range ps[1:] {
		_, _, err := e.store.Rollback(ctx, byItsClient(p, "h"))
		must(t, err)
		if b := e.balance(p, "silver"); b.Total != 0 {
			t.Errorf("player %d holds %d of its refunded order after the rollback", p, b.Total)
		}
	}
}
