package coffer

import (
	"slices"
	"sort"
	"time"
)

// CurrentBalances answers q, a read of current balances, from what a
// store loaded for the player at now (the database's time): its version
// and its lots (every lot with coins, or more). Only live lots count
// (Book's rule: coins left, not expired at now), and lots of a currency
// the catalog no longer has are left out. Each currency a live lot holds
// gets a balance, in currency id order; a query that names a currency is
// answered for it alone, at 0 if the player holds none. Errors:
// invalid_argument for an unknown currency; internal when a sum passes
// int64, which no write allows (the ledger is damaged).
func (c *Catalog) CurrentBalances(q BalanceQuery, version int64, lots []BookLot, now time.Time) (Balances, error) {
	out := Balances{Namespace: q.Namespace, PlayerID: q.PlayerID, Version: version, Balances: []Balance{}}
	only, err := c.Named(q.Currency)
	if err != nil {
		return out, err
	}
	var ids []CurrencyID
	if only != nil {
		out.Balances, ids = append(out.Balances, Balance{Currency: only.Code}), append(ids, only.ID)
	}
	for i := range lots {
		l := &lots[i]
		cur, known := c.CurrencyByID(l.Currency)
		if !known || !l.liveAt(now) || (only != nil && cur.ID != only.ID) {
			continue
		}
		k := slices.Index(ids, cur.ID)
		if k < 0 {
			k = len(ids)
			ids, out.Balances = append(ids, cur.ID), append(out.Balances, Balance{Currency: cur.Code})
		}
		b := &out.Balances[k]
		part := &b.Free
		if l.Paid {
			part = &b.Paid
		}
		total, ok1 := b.Total.Add(l.Amount)
		sum, ok2 := part.Add(l.Amount)
		if !ok1 || !ok2 {
			return out, Errorf(CodeInternal, "%s: the balance passes int64, which no write allows: coffer audit says where the ledger is damaged", cur.Code)
		}
		b.Total, *part = total, sum
		if q.Lots {
			b.Lots = append(b.Lots, Lot{ID: l.ID, Currency: cur.Code, Paid: l.Paid, Amount: l.Amount,
				ExpiresAt: l.ExpiresAt, Priority: l.Priority, CreatedAt: l.CreatedAt.UTC()})
		}
	}
	sort.Sort(byCurrency{out.Balances, ids})
	return out, nil
}

// Held is the balances a read answers of all (one per currency, as they
// were at q.At): those held, unless q names a currency. With 50
// configured currencies, a reply of 50 zeros would cost more than the
// read.
func (q BalanceQuery) Held(all []Balance) []Balance {
	if q.Currency != "" {
		return all
	}
	out := all[:0]
	for _, b := range all {
		if b.Total != 0 {
			out = append(out, b)
		}
	}
	return out
}

// byCurrency sorts balances and their currency ids together, by id.
type byCurrency struct {
	balances []Balance
	ids      []CurrencyID
}

func (b byCurrency) Len() int           { return len(b.ids) }
func (b byCurrency) Less(i, j int) bool { return b.ids[i] < b.ids[j] }
func (b byCurrency) Swap(i, j int) {
	b.balances[i], b.balances[j] = b.balances[j], b.balances[i]
	b.ids[i], b.ids[j] = b.ids[j], b.ids[i]
}
