package main

import (
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
)

func paidOp(kind coffer.OpKind, cause coffer.OpCause, amount, value coffer.Amount) coffer.Op {
	return coffer.Op{Currency: "gold", Amount: amount, Kind: kind, Cause: cause, Paid: true, Value: &coffer.Money{Amount: value, Fiat: "USD"}}
}

// TestTable: each paid figure lands in its column, a hold's consume at
// its commit only, an event delivered twice counts once.
func TestTable(t *testing.T) {
	buy := paidOp(coffer.OpGrant, coffer.CauseChange, 100, 500)
	buy.Purchase = &coffer.Purchase{Store: "steam", OrderID: "o1", Price: 500, Fiat: "USD"}
	evs := []feed.Event{
		{ID: "1", Kind: feed.KindChange, Namespace: 1, Ops: []coffer.Op{buy}},
		{ID: "2", Kind: feed.KindChange, Namespace: 1, Ops: []coffer.Op{paidOp(coffer.OpConsume, coffer.CauseChange, -10, -50)}},
		{ID: "2", Kind: feed.KindChange, Namespace: 1, Ops: []coffer.Op{paidOp(coffer.OpConsume, coffer.CauseChange, -10, -50)}},
		{ID: "3", Kind: feed.KindHoldBegin, Namespace: 1, Trx: feed.EventTrx{ID: 7}, Ops: []coffer.Op{paidOp(coffer.OpConsume, coffer.CauseChange, -4, -20)}},
		{ID: "4", Kind: feed.KindHoldBegin, Namespace: 1, Trx: feed.EventTrx{ID: 8}, Ops: []coffer.Op{paidOp(coffer.OpConsume, coffer.CauseChange, -1, -5)}},
		{ID: "5", Kind: feed.KindHoldCommit, Namespace: 1, Trx: feed.EventTrx{ID: 7}},
		{ID: "6", Kind: feed.KindHoldRollback, Namespace: 1, Trx: feed.EventTrx{ID: 8}, Ops: []coffer.Op{paidOp(coffer.OpGrant, coffer.CauseRelease, 1, 5)}},
		{ID: "7", Kind: feed.KindRefund, Namespace: 1, Ops: []coffer.Op{paidOp(coffer.OpConsume, coffer.CauseRefund, -6, -30)}},
		{ID: "8", Kind: feed.KindExpire, Namespace: 1, Ops: []coffer.Op{paidOp(coffer.OpExpire, coffer.CauseChange, -2, -10)}},
	}
	tb := newTable()
	for i := range evs {
		tb.apply(&evs[i])
	}
	var b strings.Builder
	tb.print(&b)
	want := "ns   currency   fiat    deposited   recognised     refunded      expired\n" +
		"1    gold       USD           500           70           30           10\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
