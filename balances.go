package coffer

import (
	"cmp"
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
				ExpiresAt: l.ExpiresAt, Priority: l.Priority, CreatedAt: l.CreatedAt})
		}
	}
	sort.Sort(byCurrency{out.Balances, ids})
	return out, nil
}

// PastBalance is what a store loads to tell one currency's balance at a
// past time: the balance and its paid part after the currency's last op
// at or before that time; the lots that hold coins now and may have
// expired by then (Expired: no op records their expiry yet); and the ops
// of the currency's first write after that time (Next), of which only
// those on lots expired by then count, so a store may load those alone.
type PastBalance struct {
	Currency    CurrencyID
	Total, Paid Amount
	Expired     []BookLot
	Next        []PastOp
}

// PastOp is an op of the first write after a past time, with the expiry
// of the lot it moved (nil for none, or for an op without a lot).
type PastOp struct {
	Amount       Amount
	Paid         bool
	LotExpiresAt *time.Time
}

// at is the balance, and its paid part, at time at. A lot's coins are
// gone when it expires, but the op that records it comes later: with the
// currency's first write after the expiry (Book.Expire runs before a
// write's own ops, on every due lot of the currencies it touches) or the
// lot sweeper. So the balance after the last op at or before at still
// counts the coins of the lots that had expired by then. Those whose
// expiry is not recorded yet still hold them (Expired). Those recorded
// since were all recorded by the first write after at, and its ops on
// them add up to minus those coins: the expiry, and any reservation a
// rollback returned to an expired lot, which expires at once (the two
// cancel out). ok is false when a sum passes int64.
func (p PastBalance) at(at time.Time) (total, paid Amount, ok bool) {
	total, paid, ok = p.Total, p.Paid, true
	add := func(amount Amount, isPaid bool) {
		var ok1, ok2 bool
		total, ok1 = total.Add(amount)
		ok2 = true
		if isPaid {
			paid, ok2 = paid.Add(amount)
		}
		ok = ok && ok1 && ok2
	}
	for _, l := range p.Expired {
		if l.Amount > 0 && l.ExpiresAt != nil && !l.ExpiresAt.After(at) {
			add(-l.Amount, l.Paid)
		}
	}
	for _, o := range p.Next {
		if o.LotExpiresAt != nil && !o.LotExpiresAt.After(at) {
			add(o.Amount, o.Paid)
		}
	}
	return total, paid, ok
}

// PastVersion is what a store loads to tell the player's version at a
// past time: its newest trx created at or before that time (Trx), and
// its newest hold finish at or before it (Finish); nil for none.
type PastVersion struct {
	Trx    *PastTrx
	Finish *PastFinish
}

// PastTrx is a trx row as stored. A hold's finish (commit, rollback or
// expiry) sets its row's Version to the finish's, and keeps the version
// its begin left in BeginVersion, which is nil on every other row.
type PastTrx struct {
	CreatedAt    time.Time
	Version      int64
	BeginVersion *int64
}

// PastFinish is a hold's finish: its time and the version it left.
type PastFinish struct {
	At      time.Time
	Version int64
}

// at is the player's version at time at: the version the player's last
// write at or before at left, as a current read at that moment answered.
// A player's writes are the trx it inserts and the finishes of its holds,
// which insert no trx of their own; the version grows with each, so the
// later of the newest trx and the newest finish decides (a finish at the
// time of a trx is the same write: it inserted that trx, an expiry).
func (v PastVersion) at(at time.Time) int64 {
	var version int64
	var last time.Time
	if t := v.Trx; t != nil && !t.CreatedAt.After(at) {
		version, last = t.begun(), t.CreatedAt
	}
	if f := v.Finish; f != nil && !f.At.After(at) && !f.At.Before(last) {
		version = f.Version
	}
	return version
}

// begun is the version the trx's own write left.
func (t *PastTrx) begun() int64 {
	if t.BeginVersion != nil {
		return *t.BeginVersion
	}
	return t.Version
}

// BalancesAt answers q, a read of balances at the past time q.At, from
// what a store loaded to tell the player's version then (PastVersion.at)
// and for each currency asked (PastBalance.at says how it counts), in
// currency id order, as a current read (it sorts past). A read of all
// currencies answers those held (Held).
// Errors: internal when a sum passes int64, which no write allows (the
// ledger is damaged).
func (c *Catalog) BalancesAt(q BalanceQuery, version PastVersion, past []PastBalance) (Balances, error) {
	at := q.At.UTC()
	out := Balances{Namespace: q.Namespace, PlayerID: q.PlayerID, Version: version.at(at), At: &at, Balances: []Balance{}}
	slices.SortFunc(past, func(a, b PastBalance) int { return cmp.Compare(a.Currency, b.Currency) })
	for _, p := range past {
		total, paid, ok := p.at(at)
		code := c.CurrencyOf(p.Currency).Code
		if !ok {
			return out, Errorf(CodeInternal, "%s: the balance at %s passes int64, which no write allows: coffer audit says where the ledger is damaged", code, at.Format(time.RFC3339Nano))
		}
		out.Balances = append(out.Balances, Balance{Currency: code, Total: total, Paid: paid, Free: total - paid})
	}
	out.Balances = q.Held(out.Balances)
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
