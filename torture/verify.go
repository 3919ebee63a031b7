package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/wallet"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

// Counts sums the outcomes of the books.
type Counts struct {
	Writes, Acked, Rejected, Unknown, Retried int
	Holds                                     map[string]int // by how the client ended them
	// Refused counts the definitive refusals by code.
	Refused map[coffer.Code]int
	// Expiring counts acknowledged grants with lots that expire, and
	// Outliving acknowledged holds ended after a lot they took from
	// expired.
	Expiring, Outliving int
	// Credited and Refunded count acknowledged purchases and refunds.
	Credited, Refunded int
}

// Count sums the books.
func Count(records []*Record) Counts {
	c := Counts{Holds: map[string]int{}, Refused: map[coffer.Code]int{}}
	for _, r := range records {
		c.Writes++
		switch r.Outcome {
		case Acked:
			c.Acked++
			if r.Expiring {
				c.Expiring++
			}
			if !r.Outlives.IsZero() {
				c.Outliving++
			}
			switch r.Kind {
			case Purchase:
				c.Credited++
			case Refund:
				c.Refunded++
			}
		case Rejected:
			c.Rejected++
			c.Refused[r.Code]++
		default:
			c.Unknown++
		}
		if r.Retries > 0 {
			c.Retried++
		}
		if r.Kind == Hold && r.Outcome == Acked {
			c.Holds[r.HoldEnd]++
		}
	}
	return c
}

// Verify checks the books against the service once every fault is healed
// and every hold has ended: each acknowledged write is there once with the
// status it should have, each rejected one is absent, each unknown one is
// there at most once (and then counts as applied), and every player's
// balances and the totals per currency equal the books less what the
// finlog says expired, only ever from lots of grants with an expiry; each
// store order is credited at most once, and taken back at most once, from
// the player it was credited to. It returns the violations.
func (w *Workload) Verify(ctx context.Context) []string {
	rng := rand.New(rand.NewPCG(w.Seed, 99))
	violations := append([]string(nil), w.faults...)
	model := map[balanceKey]coffer.Amount{}
	perPlayer := map[playerKey]int{}
	expiring := map[playerKey]map[int64]bool{} // lots of grants with an expiry
	orders := orderMap{}
	for _, r := range w.records {
		t, err := w.retry(ctx, rng, &Record{Key: r.Key}, func(c *wallet.Conn) (coffer.Trx, error) {
			return c.Trx(ctx, r.NS, r.Player, r.Key)
		})
		found := err == nil
		if !definitive(err) || (err != nil && coffer.ErrorCode(err) != coffer.CodeNotFound) {
			violations = append(violations, fmt.Sprintf("%s: cannot read it back: %v", r.Key, err))
			continue
		}
		switch {
		case r.Outcome == Acked && !found:
			violations = append(violations, fmt.Sprintf("%s: acknowledged %s is missing (namespace %d, player %d, answered at %s)",
				r.Key, r.Kind, r.NS, r.Player, r.Answered.UTC().Format("15:04:05.000")))
		case r.Outcome == Rejected && found:
			violations = append(violations, fmt.Sprintf("%s: rejected %s was written (namespace %d, player %d, answered at %s)",
				r.Key, r.Kind, r.NS, r.Player, r.Answered.UTC().Format("15:04:05.000")))
		}
		if r.Order != "" {
			orders.add(r, found)
		}
		if !found {
			continue
		}
		pk := playerKey{r.NS, r.Player}
		perPlayer[pk]++
		if r.Expiring {
			if expiring[pk] == nil {
				expiring[pk] = map[int64]bool{}
			}
			for _, op := range t.Ops {
				expiring[pk][op.LotID] = true
			}
		}
		if msg := holdCheck(r, t); msg != "" {
			violations = append(violations, r.Key+": "+msg)
		}
		// What a refund takes depends on what was left of the order's
		// lots, and a hold's rollback gives a refund made meanwhile what
		// it counted short of the hold's coins (ADR 0015): the answer's
		// ops say, and the balances must agree.
		for _, op := range t.Ops {
			if r.Kind == Refund || op.Cause == coffer.CauseRefundHeld {
				model[balanceKey{r.NS, r.Player, op.Currency}] += op.Amount
			}
		}
		if r.Kind != Hold || t.Status == coffer.StatusCommitted {
			for cur, d := range r.Deltas {
				model[balanceKey{r.NS, r.Player, cur}] += d
			}
		}
	}
	violations = append(violations, orders.check()...)
	return append(violations, w.compareBalances(ctx, rng, model, perPlayer, expiring)...)
}

// orderKey is a store order: unique per namespace.
type orderKey struct {
	ns    coffer.Namespace
	order string
}

// orderBooks are the purchases and refunds of one order found written,
// and how many purchases were refused as already credited.
type orderBooks struct {
	credited, refunds []*Record
	refused           int
}

type orderMap map[orderKey]*orderBooks

func (m orderMap) add(r *Record, found bool) {
	k := orderKey{r.NS, r.Order}
	if m[k] == nil {
		m[k] = &orderBooks{}
	}
	b := m[k]
	switch {
	case found && r.Kind == Purchase:
		b.credited = append(b.credited, r)
	case found && r.Kind == Refund:
		b.refunds = append(b.refunds, r)
	case r.Kind == Purchase && r.Code == coffer.CodePurchaseAlreadyCredited:
		b.refused++
	}
}

// check: each order credited at most once, refused as already credited
// only when it was credited, refunded at most once and only by the
// player it was credited to.
func (m orderMap) check() []string {
	var violations []string
	for k, b := range m {
		switch {
		case len(b.credited) > 1:
			violations = append(violations, fmt.Sprintf("order %q in ns %d credited %d times (%s, %s)", k.order, k.ns, len(b.credited), b.credited[0].Key, b.credited[1].Key))
		case len(b.credited) == 0 && b.refused > 0:
			violations = append(violations, fmt.Sprintf("order %q in ns %d refused as already credited %d times, credited nowhere", k.order, k.ns, b.refused))
		}
		if len(b.refunds) > 1 {
			violations = append(violations, fmt.Sprintf("order %q in ns %d refunded %d times", k.order, k.ns, len(b.refunds)))
		}
		for _, r := range b.refunds {
			if len(b.credited) != 1 || b.credited[0].Player != r.Player {
				violations = append(violations, fmt.Sprintf("%s: refund of order %q for player %d, which it was not credited to", r.Key, k.order, r.Player))
			}
		}
	}
	return violations
}

// finlog is what Verify reads of a player's finlog: its trx written by
// clients, and what expired, per currency and per lot.
type finlog struct {
	trx     int
	expired map[string]coffer.Amount
	lots    map[int64]bool
}

// readFinlog reads every page of a player's finlog. It reads at most the
// pages that (2 + OpsMax) times books trx fill, and one more: each write
// records at most the expiries due before it and those it causes, the
// sweeper at most one trx per expiring lot, and one grant makes at most
// OpsMax lots. A longer finlog is wrong whatever its length.
func (w *Workload) readFinlog(ctx context.Context, c *wallet.Conn, ns coffer.Namespace, p coffer.PlayerID, books int) (finlog, error) {
	limit := w.FinlogPage
	if limit == 0 {
		limit = coffer.FinlogLimitMax
	}
	q := coffer.FinlogQuery{Namespace: ns, PlayerID: p, Limit: limit}
	f := finlog{expired: map[string]coffer.Amount{}, lots: map[int64]bool{}}
	for pages := 0; pages <= (2+coffer.OpsMax)*books/limit+1; pages++ {
		page, err := c.Finlog(ctx, q)
		if err != nil {
			return f, err
		}
		for _, t := range page.Items {
			if t.Kind != coffer.TrxExpire {
				f.trx++
				continue
			}
			for _, op := range t.Ops {
				f.expired[op.Currency] += op.Amount
				f.lots[op.LotID] = true
			}
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	return f, nil
}

// totalsOf is the total of each currency of a balances answer.
func totalsOf(b coffer.Balances) map[string]coffer.Amount {
	out := map[string]coffer.Amount{}
	for _, bal := range b.Balances {
		out[bal.Currency] = bal.Total
	}
	return out
}

type balanceKey struct {
	ns       coffer.Namespace
	player   coffer.PlayerID
	currency string
}

type playerKey struct {
	ns     coffer.Namespace
	player coffer.PlayerID
}

// holdCheck compares a hold's final status with how the client ended it.
func holdCheck(r *Record, t coffer.Trx) string {
	if r.Kind != Hold {
		if t.Status != coffer.StatusCommitted {
			return fmt.Sprintf("a %s has status %s", r.Kind, t.Status)
		}
		return ""
	}
	want := map[string][]coffer.TrxStatus{
		"commit":   {coffer.StatusCommitted, coffer.StatusExpired},
		"rollback": {coffer.StatusRolledBack, coffer.StatusExpired},
		"abandon":  {coffer.StatusExpired},
		"":         {coffer.StatusExpired, coffer.StatusCommitted, coffer.StatusRolledBack}, // begin's outcome unknown
	}[r.HoldEnd]
	if r.HoldStatus != "" {
		want = []coffer.TrxStatus{r.HoldStatus} // the service said how it ended
	}
	for _, s := range want {
		if t.Status == s {
			return ""
		}
	}
	return fmt.Sprintf("hold ended by %q has status %s, want one of %v", r.HoldEnd, t.Status, want)
}

// compareBalances reads every player's balances, now and at the current
// time, and finlog, and compares them with the books.
func (w *Workload) compareBalances(ctx context.Context, rng *rand.Rand, model map[balanceKey]coffer.Amount, perPlayer map[playerKey]int,
	expiring map[playerKey]map[int64]bool) []string {
	var violations []string
	totals := map[string][2]coffer.Amount{} // currency → {books, service}
	for _, ns := range []coffer.Namespace{1, 2} {
		for _, p := range append(slices.Clone(w.Players), w.Collectors...) {
			var b, at coffer.Balances
			var f finlog
			pk := playerKey{ns, p}
			_, err := w.retry(ctx, rng, &Record{}, func(c *wallet.Conn) (coffer.Trx, error) {
				var err error
				if b, err = c.Balances(ctx, coffer.BalanceQuery{Namespace: ns, PlayerID: p}); err != nil {
					return coffer.Trx{}, err
				}
				now := time.Now()
				if at, err = c.Balances(ctx, coffer.BalanceQuery{Namespace: ns, PlayerID: p, At: &now}); err != nil {
					return coffer.Trx{}, err
				}
				f, err = w.readFinlog(ctx, c, ns, p, perPlayer[pk])
				return coffer.Trx{}, err
			})
			if err != nil {
				violations = append(violations, fmt.Sprintf("ns %d player %d: cannot read balances: %v", ns, p, err))
				continue
			}
			got, then := totalsOf(b), totalsOf(at)
			for _, cur := range []string{"gold", "silver", "credits"} {
				want := model[balanceKey{ns, p, cur}] + f.expired[cur]
				if got[cur] != want {
					violations = append(violations, fmt.Sprintf("ns %d player %d %s: service %d, books %d (of which expired %d)", ns, p, cur, got[cur], want, f.expired[cur]))
				}
				if then[cur] != got[cur] {
					violations = append(violations, fmt.Sprintf("ns %d player %d %s: %d at the current time, %d now", ns, p, cur, then[cur], got[cur]))
				}
				t := totals[cur]
				totals[cur] = [2]coffer.Amount{t[0] + want, t[1] + got[cur]}
			}
			if f.trx != perPlayer[pk] {
				violations = append(violations, fmt.Sprintf("ns %d player %d: finlog has %d trx, the books %d", ns, p, f.trx, perPlayer[pk]))
			}
			for lot := range f.lots {
				if !expiring[pk][lot] {
					violations = append(violations, fmt.Sprintf("ns %d player %d: lot %d expired, but no grant with an expiry went to it", ns, p, lot))
				}
			}
		}
	}
	curs := make([]string, 0, len(totals))
	for cur := range totals {
		curs = append(curs, cur)
	}
	sort.Strings(curs)
	for _, cur := range curs {
		if t := totals[cur]; t[0] != t[1] {
			violations = append(violations, fmt.Sprintf("total %s: service %d, books %d", cur, t[1], t[0]))
		}
	}
	return violations
}
