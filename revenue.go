package coffer

import (
	"cmp"
	"math"
	"slices"
)

// RevenueReport gathers the lines of a revenue report from the sums a
// store reads on every shard (RevenueSum). Lines of a currency
// the catalog no longer has are left out, and so are those of other
// currencies when the query names one. Lines answers them in currency id
// order, then fiat.
type RevenueReport struct {
	catalog *Catalog
	only    *Currency
	lines   map[revenueKey]*RevenueLine
}

type revenueKey struct {
	currency CurrencyID
	fiat     string
}

// NewRevenueReport starts the report that answers q. Errors:
// invalid_argument for an unknown currency.
func (c *Catalog) NewRevenueReport(q RevenueQuery) (*RevenueReport, error) {
	only, err := c.Named(q.Currency)
	if err != nil {
		return nil, err
	}
	return &RevenueReport{catalog: c, only: only, lines: map[revenueKey]*RevenueLine{}}, nil
}

// RevenueSum is a sum a store reads for a revenue report, of one
// currency and fiat in the report's namespace, in coins (Amount) and in
// value. It is of one of:
//   - the paid ops of Kind and Cause made before To: in the period
//     (Within) or before it;
//   - what the paid consumes of holds begun before To reserve while the
//     holds are pending (Reserved), as coins taken: pending at From
//     (AtFrom), at To (AtTo), or both;
//   - what the period's refunds could not take back (Shortfall).
type RevenueSum struct {
	Currency                       CurrencyID
	Fiat                           string
	Kind                           OpKind
	Cause                          OpCause
	Within, Reserved, AtFrom, AtTo bool
	Shortfall                      bool
	Amount, Value                  Amount
}

// AddSum adds s to the report, to the figures its kind makes (line).
// Errors: internal when a figure would pass int64.
func (r *RevenueReport) AddSum(s RevenueSum) error {
	if s.Amount == math.MinInt64 || s.Value == math.MinInt64 {
		return Errorf(CodeInternal, "revenue of currency %d %s: a sum passes int64 minor units", s.Currency, s.Fiat)
	}
	return r.add(s.Currency, s.Fiat, s.line())
}

// line is what s adds to its line, in coins and in value (figures).
func (s RevenueSum) line() RevenueLine {
	var l RevenueLine
	fs := l.Figures()
	for i, f := range []Amount{s.Amount, s.Value} {
		for j, v := range s.figures(f) {
			*fs[i*revenueFigures+j] = v
		}
	}
	return l
}

// revenueFigures is how many figures a line has in one unit (coins, or
// value): RevenueLine.Figures gives those in coins, then those in value.
const revenueFigures = 9

// figures are what s adds to each figure of its line when it sums to f
// (its coins or its value), in the order of RevenueLine's fields. Paid coins
// outstanding at a time are the paid ops before it, less what pending
// holds reserve then (their consumes are ops already, but the revenue is
// recognised when a hold commits): so a hold pending at From moves its
// reservation from recognised back to opening, one pending at To from
// recognised to deferred.
func (s RevenueSum) figures(f Amount) (out [revenueFigures]Amount) {
	const (
		opening = iota
		deposited
		recognised
		convertedIn
		convertedOut
		expired
		refunded
		shortfall
		deferred
	)
	switch {
	case s.Shortfall:
		out[shortfall] = f
	case s.Reserved:
		if s.AtFrom {
			out[opening] += f
			out[recognised] += f
		}
		if s.AtTo {
			out[recognised] -= f
			out[deferred] += f
		}
	default:
		out[deferred] = f
		if !s.Within {
			out[opening] = f
			return out
		}
		switch {
		case s.Kind == OpGrant && s.Cause == CauseChange:
			out[deposited] = f
		case s.Kind == OpConsume && s.Cause == CauseChange, s.Kind == OpGrant && s.Cause == CauseRelease:
			out[recognised] = -f
		case s.Kind == OpGrant && s.Cause == CauseExchange:
			out[convertedIn] = f
		case s.Kind == OpConsume && s.Cause == CauseExchange:
			out[convertedOut] = -f
		case s.Kind == OpExpire:
			out[expired] = -f
		case s.Kind == OpConsume && s.Cause == CauseRefund:
			out[refunded] = -f
		case s.Kind == OpConsume && s.Cause == CauseRefundHeld:
			// Coins a refund counted short, taken back when the hold that
			// reserved them rolled back: no longer short.
			out[refunded] = -f
			out[shortfall] = f
		}
	}
	return out
}

// add adds a line's figures to those of its currency and fiat. Errors:
// internal when a figure would pass int64 (RevenueLine.Add).
func (r *RevenueReport) add(currency CurrencyID, fiat string, line RevenueLine) error {
	cur, known := r.catalog.CurrencyByID(currency)
	if !known || (r.only != nil && r.only.ID != currency) {
		return nil
	}
	k := revenueKey{currency, fiat}
	l := r.lines[k]
	if l == nil {
		l = &RevenueLine{Currency: cur.Code, Fiat: fiat}
		r.lines[k] = l
	}
	return l.Add(line)
}

// Lines are the report's lines, by currency id, then fiat.
func (r *RevenueReport) Lines() []RevenueLine {
	keys := make([]revenueKey, 0, len(r.lines))
	for k := range r.lines {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b revenueKey) int {
		return cmp.Or(cmp.Compare(a.currency, b.currency), cmp.Compare(a.fiat, b.fiat))
	})
	out := make([]RevenueLine, 0, len(keys))
	for _, k := range keys {
		out = append(out, *r.lines[k])
	}
	return out
}
