package coffer

import (
	"cmp"
	"slices"
)

// RevenueReport gathers the lines of a revenue report from the sums of
// every shard (each a line per currency and fiat). Lines of a currency
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

// Add adds one shard's sums of a currency and fiat (line's figures).
// Errors: internal when a figure would pass int64 (RevenueLine.Add).
func (r *RevenueReport) Add(currency CurrencyID, fiat string, line RevenueLine) error {
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
