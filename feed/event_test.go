package feed

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is the time of a player's n-th write in these scenarios.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }

func testCatalog(t *testing.T) *coffer.Catalog {
	t.Helper()
	cat, err := coffer.NewCatalog([]coffer.Currency{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "silver"}}, time.Minute, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func ins(player int64, id int64, kind coffer.TrxKind, status coffer.TrxStatus, version, pos int64, write int) trxRow {
	return trxRow{ns: 1, player: coffer.PlayerID(player), id: id, emitter: 7, idempotencyKey: fmt.Sprintf("k%d", id), kind: kind,
		status: status, createdAt: at(write), version: version, pos: pos}
}

func finished(r trxRow, status coffer.TrxStatus, version int64, write int) trxRow {
	f := at(write)
	begin := r.version
	r.status, r.version, r.finishedAt, r.beginVersion = status, version, &f, &begin
	return r
}

func op(trx int64, cur coffer.CurrencyID, amount, after int64, pos int64, write int) opRow {
	kind := coffer.OpGrant
	if amount < 0 {
		kind = coffer.OpConsume
	}
	return opRow{BookOp: coffer.BookOp{Currency: cur, LotID: 100 + pos, Kind: kind, Cause: coffer.CauseChange, Amount: coffer.Amount(amount),
		BalanceAfter: coffer.Amount(after)}, trxID: trx, createdAt: at(write), pos: pos}
}

// render is the events as text: one line each.
func render(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%d/%d v%d.%d %s %s at+%dus", e.Namespace, e.PlayerID, e.Version, e.Seq, e.Kind, e.ID, e.At.Sub(t0).Microseconds())
		for _, o := range e.Ops {
			fmt.Fprintf(&b, " %s%+d", o.Currency, o.Amount)
		}
		for _, bal := range e.Balances {
			fmt.Fprintf(&b, " [%s=%d]", bal.Currency, bal.Total)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestEvents(t *testing.T) {
	cat := testCatalog(t)
	expire := ins(42, 10, coffer.TrxExpire, coffer.StatusCommitted, 7, 20, 1)
	expire.kind = coffer.TrxExpire
	hold := ins(43, 20, coffer.TrxHold, coffer.StatusPending, 3, 5, 1)
	pendingHold := ins(44, 30, coffer.TrxHold, coffer.StatusPending, 1, 1, 1)
	cases := []struct {
		name string
		txn  txn
		want string
	}{
		{"a change", txn{trx: []trxRow{ins(42, 11, coffer.TrxChange, coffer.StatusCommitted, 7, 22, 1)},
			ops: []opRow{op(11, 1, 50, 50, 23, 1), op(11, 2, 5, 5, 24, 1)}},
			"1/42 v7.0 change 1/42/11/committed at+1us gold+50 silver+5 [gold=50] [silver=5]\n"},
		// The expiries a write records come first, in its version.
		{"a change after the expiries it records", txn{
			trx: []trxRow{ins(42, 11, coffer.TrxChange, coffer.StatusCommitted, 7, 22, 1), expire},
			ops: []opRow{op(11, 1, -5, 0, 23, 1), op(10, 1, -3, 5, 21, 1)}},
			"1/42 v7.0 expire 1/42/10/committed at+1us gold-3 [gold=5]\n" +
				"1/42 v7.1 change 1/42/11/committed at+1us gold-5 [gold=0]\n"},
		// A hold begun and finished in one transaction is inserted
		// finished: its begin and its finish, with a write between.
		{"a hold begun and committed in one transaction", txn{
			trx: []trxRow{finished(hold, coffer.StatusCommitted, 5, 3), ins(43, 21, coffer.TrxChange, coffer.StatusCommitted, 4, 7, 2)},
			ops: []opRow{op(20, 1, -10, 90, 6, 1), op(21, 1, 1, 91, 8, 2), op(20, 2, 4, 4, 9, 3)}},
			"1/43 v3.0 hold_begin 1/43/20/pending at+1us gold-10 [gold=90]\n" +
				"1/43 v4.0 change 1/43/21/committed at+2us gold+1 [gold=91]\n" +
				"1/43 v5.0 hold_commit 1/43/20/committed at+3us silver+4 [silver=4]\n"},
		// A finish is an update; without ops it has no balances.
		{"holds finished, players apart", txn{trx: []trxRow{
			upd(finished(pendingHold, coffer.StatusExpired, 2, 4)), upd(finished(hold, coffer.StatusRolledBack, 4, 2))},
			ops: []opRow{op(20, 1, 10, 100, 6, 2)}},
			"1/43 v4.0 hold_rollback 1/43/20/rolled_back at+2us gold+10 [gold=100]\n" +
				"1/44 v2.0 hold_expire 1/44/30/expired at+4us\n"},
		{"nothing", txn{}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			evs, err := events(cat, &c.txn)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(evs); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

func upd(r trxRow) trxRow {
	r.update = true
	return r
}

// TestEventsRefuseWhatDoesNotAddUp: an op without its trx's change, or a
// finished hold without its finish time, is an error, never an event
// short of its ops.
func TestEventsRefuseWhatDoesNotAddUp(t *testing.T) {
	cat := testCatalog(t)
	for name, tx := range map[string]txn{
		"an op without its trx": {ops: []opRow{op(11, 1, 5, 5, 1, 1)}},
		"an op of another write": {trx: []trxRow{ins(42, 11, coffer.TrxChange, coffer.StatusCommitted, 1, 1, 1)},
			ops: []opRow{op(11, 1, 5, 5, 2, 2)}},
		"a finish without its time": {trx: []trxRow{upd(ins(42, 11, coffer.TrxHold, coffer.StatusCommitted, 2, 1, 1))}},
	} {
		if _, err := events(cat, &tx); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
