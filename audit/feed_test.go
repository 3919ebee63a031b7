package audit_test

import (
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/audit"
	"github.com/cofferhq/coffer/feed"
)

// TestCompareFeed: a stream that holds the ledger's trx changes passes;
// each way a feed can be wrong is found and named.
func TestCompareFeed(t *testing.T) {
	ev := func(trx int64, status coffer.TrxStatus, version int64, gold coffer.Amount) feed.Event {
		return feed.Event{ID: feed.EventID(1, 42, trx, status), Namespace: 1, PlayerID: 42, Version: version,
			Balances: []coffer.Balance{{Currency: "gold", Total: gold}}}
	}
	// A change, then a hold begun and committed.
	good := []feed.Event{ev(1, coffer.StatusCommitted, 1, 10), ev(2, coffer.StatusPending, 2, 7), ev(2, coffer.StatusCommitted, 3, 7)}
	ledger := &audit.FeedLedger{
		IDs:      map[string]bool{good[0].ID: true, good[1].ID: true, good[2].ID: true},
		Balances: map[audit.BalanceKey]coffer.Balance{{NS: 1, Player: 42, Currency: "gold"}: {Currency: "gold", Total: 7}},
	}
	if r := audit.CompareFeed(good, ledger); len(r.Violations) > 0 || r.Stored != 3 || r.Committed != 3 {
		t.Fatalf("a complete feed: %+v", r)
	}
	for name, c := range map[string]struct {
		stored []feed.Event
		want   string
		count  func(audit.FeedReport) int
	}{
		"missing":   {good[:2], "feed: missing: no event 1/42/2/committed", func(r audit.FeedReport) int { return r.Missing }},
		"duplicate": {append(good[:3:3], good[2]), "feed: duplicate: 1/42/2/committed stored again", func(r audit.FeedReport) int { return r.Duplicates }},
		"phantom":   {append(good[:3:3], ev(3, coffer.StatusCommitted, 4, 7)), "feed: phantom: 1/42/3/committed", func(r audit.FeedReport) int { return r.Phantoms }},
		"order":     {[]feed.Event{good[0], good[2], good[1]}, "feed: order: 1/42/2/pending (version 2.0) stored after version 3.0", nil},
		"balance": {[]feed.Event{good[0], good[1], ev(2, coffer.StatusCommitted, 3, 8)},
			"feed: balance: ns 1 player 42 gold: the events end at 8 (paid 0), the ledger at 7 (paid 0)", nil},
	} {
		r := audit.CompareFeed(c.stored, ledger)
		if !strings.Contains(strings.Join(r.Violations, "\n"), c.want) || c.count != nil && c.count(r) != 1 {
			t.Errorf("%s: want %q, got %+v", name, c.want, r)
		}
	}
}
