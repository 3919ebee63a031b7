package coffer

import (
	"cmp"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// SpendKey is one criterion of a currency's spend order.
type SpendKey string

// Spend order criteria, applied in the order listed; ties fall through to
// the next criterion and finally to the lot id (oldest first).
const (
	SpendPriority SpendKey = "priority" // higher priority first
	SpendExpiring SpendKey = "expiring" // soonest-expiring first, non-expiring last
	SpendFree     SpendKey = "free"     // free before paid
	SpendPaid     SpendKey = "paid"     // paid before free
	SpendOldest   SpendKey = "oldest"   // oldest first
	SpendNewest   SpendKey = "newest"   // newest first
)

// DefaultSpendOrder: soonest-expiring first, then free, then paid, oldest
// first; a lot's priority comes before all of them.
var DefaultSpendOrder = []SpendKey{SpendPriority, SpendExpiring, SpendFree, SpendOldest}

// Currency is a configured currency.
type Currency struct {
	ID   CurrencyID
	Code string
	// Paid tells whether the currency can be bought: only then may a grant
	// be paid.
	Paid       bool
	SpendOrder []SpendKey
	// RefundPolicy is what a refund does with what the player spent of a
	// refunded purchase; empty means RefundWriteOff.
	RefundPolicy RefundPolicy
}

// Rate is the exchange rate of a pair: to = floor(from × Num / Den).
type Rate struct{ Num, Den int64 }

// ParseRate reads a rate as a config writes it, "A:B": A coins of the
// pair's from currency make B of its to currency, both integers > 0.
func ParseRate(s string) (Rate, bool) {
	a, b, found := strings.Cut(s, ":")
	from, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	to, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	return Rate{Num: to, Den: from}, found && err1 == nil && err2 == nil && from > 0 && to > 0
}

// String is the rate as a config writes it (ParseRate).
func (r Rate) String() string { return fmt.Sprintf("%d:%d", r.Den, r.Num) }

// Catalog is a deployment's currencies, exchange rates and hold limits. It
// is read-only once built and safe for concurrent use.
type Catalog struct {
	byCode map[string]*Currency
	byID   map[CurrencyID]*Currency
	sorted []*Currency // by id
	rates  map[rateKey]Rate
	// HoldTTLDefault and HoldTTLMax bound a hold's life.
	HoldTTLDefault, HoldTTLMax time.Duration
}

type rateKey struct {
	ns       Namespace
	from, to CurrencyID
}

// NewCatalog checks and indexes currencies. Codes and ids must be unique.
func NewCatalog(currencies []Currency, holdTTLDefault, holdTTLMax time.Duration) (*Catalog, error) {
	c := &Catalog{byCode: map[string]*Currency{}, byID: map[CurrencyID]*Currency{}, rates: map[rateKey]Rate{},
		HoldTTLDefault: holdTTLDefault, HoldTTLMax: holdTTLMax}
	for i := range currencies {
		cur := currencies[i]
		if cur.ID <= 0 || cur.Code == "" {
			return nil, fmt.Errorf("currencies[%d]: id must be > 0 and code non-empty", i)
		}
		if c.byCode[cur.Code] != nil || c.byID[cur.ID] != nil {
			return nil, fmt.Errorf("currencies[%d]: duplicate code %q or id %d", i, cur.Code, cur.ID)
		}
		if len(cur.SpendOrder) == 0 {
			cur.SpendOrder = DefaultSpendOrder
		}
		switch cur.RefundPolicy {
		case "":
			cur.RefundPolicy = RefundWriteOff
		case RefundWriteOff, RefundClawBack:
		default:
			return nil, fmt.Errorf("currencies[%d].refund_policy: must be write_off or claw_back, not %q", i, cur.RefundPolicy)
		}
		for _, k := range cur.SpendOrder {
			switch k {
			case SpendPriority, SpendExpiring, SpendFree, SpendPaid, SpendOldest, SpendNewest:
			default:
				return nil, fmt.Errorf("currencies[%d].spend_order: unknown criterion %q", i, k)
			}
		}
		c.byCode[cur.Code], c.byID[cur.ID] = &cur, &cur
		c.sorted = append(c.sorted, &cur)
	}
	sort.Slice(c.sorted, func(i, j int) bool { return c.sorted[i].ID < c.sorted[j].ID })
	if holdTTLDefault <= 0 || holdTTLMax < holdTTLDefault {
		return nil, fmt.Errorf("holds: ttl_default must be > 0 and at most ttl_max")
	}
	return c, nil
}

// AddRate configures the exchange of from into to in namespace ns.
func (c *Catalog) AddRate(ns Namespace, from, to string, r Rate) error {
	a, b := c.byCode[from], c.byCode[to]
	switch {
	case a == nil || b == nil:
		return fmt.Errorf("exchange %s→%s: unknown currency", from, to)
	case a == b:
		return fmt.Errorf("exchange %s→%s: same currency", from, to)
	case r.Num <= 0 || r.Den <= 0:
		return fmt.Errorf("exchange %s→%s: rate must be positive integers", from, to)
	}
	k := rateKey{ns, a.ID, b.ID}
	if _, ok := c.rates[k]; ok {
		return fmt.Errorf("exchange %s→%s: listed twice in namespace %d", from, to, ns)
	}
	c.rates[k] = r
	return nil
}

// CheckRates refuses rates under which a loop of exchanges in a namespace
// gives back more of a currency than it took (gold→silver at 1:100 with
// silver→gold at 1:1): a player exchanging round and round would create
// currency. A loop that gives back exactly what it took is allowed (with
// rounding down it gives back at most that). The configuration calls it
// once every rate is added; the error names the loop.
func (c *Catalog) CheckRates() error {
	keys := slices.SortedFunc(maps.Keys(c.rates), func(a, b rateKey) int {
		return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	for start := 0; start < len(keys); {
		end := start
		for end < len(keys) && keys[end].ns == keys[start].ns {
			end++
		}
		if loop := c.gainingLoop(keys[start:end]); loop != nil {
			gain := big.NewRat(1, 1)
			codes := []string{c.CurrencyOf(loop[0]).Code}
			for i := 1; i < len(loop); i++ {
				r := c.rates[rateKey{keys[start].ns, loop[i-1], loop[i]}]
				gain.Mul(gain, big.NewRat(r.Num, r.Den))
				codes = append(codes, c.CurrencyOf(loop[i]).Code)
			}
			return fmt.Errorf("exchanges %s in namespace %d give back %s times what they took: the rates would let players create currency",
				strings.Join(codes, "→"), keys[start].ns, gain.FloatString(3))
		}
		start = end
	}
	return nil
}

// gainingLoop is a loop of the exchanges keys (of one namespace) whose
// rates multiply past 1, as the currencies along it (the first again at
// the end, the smallest id first), or nil if none. It is Bellman-Ford's
// search for a negative cycle, on products: every currency starts at 1;
// a round improves each currency that an exchange reaches with a larger
// product. Without a gaining loop no round improves anything once every
// chain (at most one exchange per currency) is counted; a round that
// still improves one after that many is fed by a loop, which walking back
// that many steps from the improved currency lands on.
func (c *Catalog) gainingLoop(keys []rateKey) []CurrencyID {
	best := map[CurrencyID]*big.Rat{}
	for _, k := range keys {
		best[k.from], best[k.to] = big.NewRat(1, 1), big.NewRat(1, 1)
	}
	prev := map[CurrencyID]CurrencyID{}
	var improved CurrencyID
	for range len(best) + 1 {
		improved = 0
		for _, k := range keys {
			r := c.rates[k]
			if p := new(big.Rat).Mul(best[k.from], big.NewRat(r.Num, r.Den)); p.Cmp(best[k.to]) > 0 {
				best[k.to], prev[k.to], improved = p, k.from, k.to
			}
		}
		if improved == 0 {
			return nil
		}
	}
	on := improved
	for range len(best) {
		on = prev[on]
	}
	loop := []CurrencyID{on}
	for cur := prev[on]; cur != on; cur = prev[cur] {
		loop = append(loop, cur)
	}
	slices.Reverse(loop)
	low := slices.Index(loop, slices.Min(loop))
	return slices.Concat(loop[low:], loop[:low], loop[low:low+1])
}

// Named is the currency a query names by code (a read's, the finlog's,
// the revenue report's filter), or nil for none (code ""). Errors:
// invalid_argument for a code the catalog does not have.
func (c *Catalog) Named(code string) (*Currency, error) {
	if code == "" {
		return nil, nil
	}
	cur, ok := c.byCode[code]
	if !ok {
		return nil, Errorf(CodeInvalid, "currency: unknown currency %q", code)
	}
	return cur, nil
}

// CurrencyByID looks a currency up by id.
func (c *Catalog) CurrencyByID(id CurrencyID) (*Currency, bool) {
	cur, ok := c.byID[id]
	return cur, ok
}

// CurrencyOf is the configured currency of id, or one named "unknown" for
// a currency the configuration no longer lists: rows in it stay readable,
// and a pending hold in it can still finish.
func (c *Catalog) CurrencyOf(id CurrencyID) *Currency {
	if cur, ok := c.byID[id]; ok {
		return cur
	}
	return &Currency{ID: id, Code: "unknown", SpendOrder: DefaultSpendOrder, RefundPolicy: RefundWriteOff}
}

// Ops are planned (or stored) ops as a trx answers them.
func (c *Catalog) Ops(ops []BookOp) []Op {
	out := make([]Op, 0, len(ops))
	for _, o := range ops {
		op := Op{Currency: c.CurrencyOf(o.Currency).Code, Amount: o.Amount, Kind: o.Kind, Cause: o.Cause, Paid: o.Paid,
			LotID: o.LotID, BalanceAfter: o.BalanceAfter, Purchase: o.Purchase}
		if o.Fiat != "" {
			op.Value = &Money{Amount: o.Value, Fiat: o.Fiat}
		}
		out = append(out, op)
	}
	return out
}

// PendingOps are the ops a hold's answer lists for its grants while it
// is pending: they wait for the commit, on no lot yet. A finished hold's
// answer lists the ops its commit made instead, so none. A replay rebuilds
// them from the stored grants the same way.
func (c *Catalog) PendingOps(status TrxStatus, grants []PendingGrant) []Op {
	if status != StatusPending {
		return nil
	}
	var out []Op
	for _, g := range grants {
		out = append(out, Op{Currency: c.CurrencyOf(g.Currency).Code, Amount: g.Amount, Kind: OpGrant, Cause: CauseChange,
			Paid: g.Paid, Pending: true, Purchase: g.Purchase})
	}
	return out
}

// BeginAnswer is what the begin of hold t answered: t, pending, at the
// version its begin left, with the ops its begin wrote (ops), the
// balances they left, and its grants waiting for the commit. A store
// rebuilds a finished hold's first answer from its row the same way, so
// that a replay of the begin answers it byte for byte.
func (c *Catalog) BeginAnswer(t Trx, version int64, ops []BookOp, grants []PendingGrant) Trx {
	t.Status, t.Version, t.FinishedBy = StatusPending, version, 0
	t.Ops = append(c.Ops(ops), c.PendingOps(StatusPending, grants)...)
	t.Balances = c.BalancesAfter(ops)
	return t
}

// BalancesAfter are the player's balances right after a trx, as its ops
// leave them: in each currency the ops touch, in order of first touch, the
// last op's balance_after. A replay rebuilds them from the stored ops the
// same way, so the answer is the same.
func (c *Catalog) BalancesAfter(ops []BookOp) []Balance {
	var out []Balance
	at := map[CurrencyID]int{}
	for _, op := range ops {
		i, ok := at[op.Currency]
		if !ok {
			i = len(out)
			at[op.Currency] = i
			out = append(out, Balance{Currency: c.CurrencyOf(op.Currency).Code})
		}
		out[i].Total, out[i].Paid, out[i].Free = op.BalanceAfter, op.PaidAfter, op.BalanceAfter-op.PaidAfter
	}
	return out
}

// Currencies lists all currencies by id. The slice is the catalog's own:
// read it, do not change it.
func (c *Catalog) Currencies() []*Currency { return c.sorted }

// Rate is the exchange rate of from into to in ns.
func (c *Catalog) Rate(ns Namespace, from, to CurrencyID) (Rate, bool) {
	r, ok := c.rates[rateKey{ns, from, to}]
	return r, ok
}

// Exchange computes what an exchange yields. consumedPaid of consumed units
// of A were paid. It returns the total of B and its paid part:
//
//	total = floor(consumed × Num / Den)
//	paid  = floor(consumedPaid × Num / Den) if B can be paid, else 0
//	free  = total − paid
//
// Rounding down each part and giving the remainder to free means the paid
// part never exceeds what was paid for, and total never exceeds the rate.
// ok is false when the result does not fit an Amount.
func (r Rate) Exchange(consumed, consumedPaid Amount, toPaid bool) (total, paid Amount, ok bool) {
	mul := func(a Amount) (Amount, bool) {
		v := new(big.Int).Mul(big.NewInt(int64(a)), big.NewInt(r.Num))
		v.Quo(v, big.NewInt(r.Den))
		return Amount(v.Int64()), v.IsInt64()
	}
	total, ok = mul(consumed)
	if !ok || consumed < 0 || consumedPaid < 0 || consumedPaid > consumed {
		return 0, 0, false
	}
	if toPaid {
		// At most total, since consumedPaid ≤ consumed; checked all the
		// same, like every sum of the ledger.
		if paid, ok = mul(consumedPaid); !ok {
			return 0, 0, false
		}
	}
	return total, paid, true
}
