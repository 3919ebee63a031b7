package audit

import (
	"context"
	"fmt"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
	"github.com/cofferhq/coffer/shard"
)

// The change feed, checked against the ledger (docs/events.md): the
// events a stream stored must be the ledger's committed trx changes,
// each once, each player's in order, with the balances the ledger's ops
// left. The fault suite reads its stream and the ledger once the writes
// have stopped and the relay has caught up.

// FeedLedger is what the ledger says a complete feed holds.
type FeedLedger struct {
	// IDs are the event ids of every committed trx change: a trx
	// written, and a hold's finish.
	IDs map[string]bool
	// Balances are each player's balances after its last op, per
	// currency.
	Balances map[BalanceKey]coffer.Balance
}

// BalanceKey is a player's balance in one currency.
type BalanceKey struct {
	NS       coffer.Namespace
	Player   coffer.PlayerID
	Currency string
}

const (
	feedTrx = `SELECT ns, player_id, trx_id, kind, status FROM trx_N`
	// The last op of each player in each currency: its balance after.
	feedBalances = `SELECT DISTINCT ON (ns, player_id, currency) ns, player_id, currency, balance_after, paid_after
		FROM op_N ORDER BY ns, player_id, currency, pos DESC`
)

// FeedLedger reads, from every shard, what a complete feed holds.
// Currencies are named as cat names them.
func (c *Checker) FeedLedger(ctx context.Context, cat *coffer.Catalog) (*FeedLedger, error) {
	l := &FeedLedger{IDs: map[string]bool{}, Balances: map[BalanceKey]coffer.Balance{}}
	for sh := 0; sh < c.Router.Map().ShardCount(); sh++ {
		id := coffer.ShardID(sh)
		if err := c.feedTrx(ctx, id, l); err != nil {
			return nil, fmt.Errorf("shard %d: trx: %w", id, err)
		}
		if err := c.feedBalances(ctx, id, cat, l); err != nil {
			return nil, fmt.Errorf("shard %d: balances: %w", id, err)
		}
	}
	return l, nil
}

func (c *Checker) feedTrx(ctx context.Context, id coffer.ShardID, l *FeedLedger) error {
	rows, err := c.Router.Shard(id).Query(ctx, shard.Tables(feedTrx, id))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ns coffer.Namespace
		var player coffer.PlayerID
		var trx int64
		var kind coffer.TrxKind
		var status coffer.TrxStatus
		if err := rows.Scan(&ns, &player, &trx, &kind, &status); err != nil {
			return err
		}
		// A hold is two changes once finished: its begin, and its finish.
		if kind == coffer.TrxHold {
			l.IDs[feed.EventID(ns, player, trx, coffer.StatusPending)] = true
		}
		l.IDs[feed.EventID(ns, player, trx, status)] = true
	}
	return rows.Err()
}

func (c *Checker) feedBalances(ctx context.Context, id coffer.ShardID, cat *coffer.Catalog, l *FeedLedger) error {
	rows, err := c.Router.Shard(id).Query(ctx, shard.Tables(feedBalances, id))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k BalanceKey
		var cur coffer.CurrencyID
		var b coffer.Balance
		if err := rows.Scan(&k.NS, &k.Player, &cur, &b.Total, &b.Paid); err != nil {
			return err
		}
		k.Currency = cat.CurrencyOf(cur).Code
		b.Currency, b.Free = k.Currency, b.Total-b.Paid
		l.Balances[k] = b
	}
	return rows.Err()
}

// FeedReport is what CompareFeed found.
type FeedReport struct {
	// Stored is the events in the stream, Committed the trx changes of
	// the ledger.
	Stored, Committed int
	// Missing are changes without an event; Duplicates events stored
	// again; Phantoms events of no committed change.
	Missing, Duplicates, Phantoms int
	// Violations describe every finding, at most feedViolationsMax of
	// each kind.
	Violations []string
}

// feedViolationsMax bounds the violations described per kind.
const feedViolationsMax = 10

// CompareFeed checks the events a stream stored, in the stream's order,
// against the ledger.
func CompareFeed(stored []feed.Event, l *FeedLedger) FeedReport {
	r := FeedReport{Stored: len(stored), Committed: len(l.IDs)}
	described := map[string]int{}
	violation := func(kind, format string, args ...any) {
		if described[kind]++; described[kind] <= feedViolationsMax {
			r.Violations = append(r.Violations, fmt.Sprintf("feed: %s: ", kind)+fmt.Sprintf(format, args...))
		}
	}
	type position struct {
		version int64
		seq     int
	}
	seen := map[string]bool{}
	last := map[[2]int64]position{}
	balances := map[BalanceKey]coffer.Balance{}
	at := map[BalanceKey]position{}
	for i := range stored {
		ev := &stored[i]
		if seen[ev.ID] {
			r.Duplicates++
			violation("duplicate", "%s stored again", ev.ID)
			continue
		}
		seen[ev.ID] = true
		if !l.IDs[ev.ID] {
			r.Phantoms++
			violation("phantom", "%s is no committed trx change", ev.ID)
		}
		p, player := position{ev.Version, ev.Seq}, [2]int64{int64(ev.Namespace), int64(ev.PlayerID)}
		if prev, ok := last[player]; ok && (p.version < prev.version || p.version == prev.version && p.seq <= prev.seq) {
			violation("order", "%s (version %d.%d) stored after version %d.%d of its player", ev.ID, p.version, p.seq, prev.version, prev.seq)
		}
		last[player] = p
		for _, b := range ev.Balances {
			k := BalanceKey{ev.Namespace, ev.PlayerID, b.Currency}
			if prev, ok := at[k]; !ok || p.version > prev.version || p.version == prev.version && p.seq > prev.seq {
				balances[k], at[k] = b, p
			}
		}
	}
	for id := range l.IDs {
		if !seen[id] {
			r.Missing++
			violation("missing", "no event %s", id)
		}
	}
	for k, want := range l.Balances {
		if got := balances[k]; got.Total != want.Total || got.Paid != want.Paid {
			violation("balance", "ns %d player %d %s: the events end at %d (paid %d), the ledger at %d (paid %d)",
				k.NS, k.Player, k.Currency, got.Total, got.Paid, want.Total, want.Paid)
		}
	}
	return r
}
