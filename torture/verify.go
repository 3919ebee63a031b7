package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/client"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

// Counts sums the outcomes of the books.
type Counts struct {
	Writes, Acked, Rejected, Unknown, Retried int
	Holds                                     map[string]int // by how the client ended them
}

// Count sums the books.
func Count(records []*Record) Counts {
	c := Counts{Holds: map[string]int{}}
	for _, r := range records {
		c.Writes++
		switch r.Outcome {
		case Acked:
			c.Acked++
		case Rejected:
			c.Rejected++
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
// balances and the totals per currency equal the books. It returns the
// violations.
func (w *Workload) Verify(ctx context.Context) []string {
	rng := rand.New(rand.NewPCG(w.Seed, 99))
	violations := append([]string(nil), w.faults...)
	model := map[balanceKey]coffer.Amount{}
	perPlayer := map[playerKey]int{}
	for _, r := range w.records {
		t, err := w.retry(ctx, rng, &Record{Key: r.Key}, func(c *client.Client) (coffer.Trx, error) {
			return c.Trx(ctx, r.NS, r.Player, r.Key)
		})
		found := err == nil
		if !definitive(err) || (err != nil && coffer.ErrorCode(err) != coffer.CodeNotFound) {
			violations = append(violations, fmt.Sprintf("%s: cannot read it back: %v", r.Key, err))
			continue
		}
		switch {
		case r.Outcome == Acked && !found:
			violations = append(violations, fmt.Sprintf("%s: acknowledged %s is missing", r.Key, r.Kind))
		case r.Outcome == Rejected && found:
			violations = append(violations, fmt.Sprintf("%s: rejected %s was written", r.Key, r.Kind))
		}
		if !found {
			continue
		}
		perPlayer[playerKey{r.NS, r.Player}]++
		if msg := holdCheck(r, t); msg != "" {
			violations = append(violations, r.Key+": "+msg)
		}
		if r.Kind != Hold || t.Status == coffer.StatusCommitted {
			for cur, d := range r.Deltas {
				model[balanceKey{r.NS, r.Player, cur}] += d
			}
		}
	}
	return append(violations, w.compareBalances(ctx, rng, model, perPlayer)...)
}

// finlogSize counts a player's trx over every page of the finlog. It reads
// at most the pages that books trx fill, and one more: a longer finlog is
// wrong whatever its length.
func (w *Workload) finlogSize(ctx context.Context, c *client.Client, ns coffer.Namespace, p coffer.PlayerID, books int) (int, error) {
	limit := w.FinlogPage
	if limit == 0 {
		limit = coffer.FinlogLimitMax
	}
	q := coffer.FinlogQuery{Namespace: ns, PlayerID: p, Limit: limit}
	n := 0
	for pages := 0; pages <= books/limit+1; pages++ {
		page, err := c.Finlog(ctx, q)
		if err != nil {
			return 0, err
		}
		n += len(page.Items)
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	return n, nil
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

// compareBalances reads every player's balances and the finlog size and
// compares them with the books.
func (w *Workload) compareBalances(ctx context.Context, rng *rand.Rand, model map[balanceKey]coffer.Amount, perPlayer map[playerKey]int) []string {
	var violations []string
	totals := map[string][2]coffer.Amount{} // currency → {books, service}
	for _, ns := range []coffer.Namespace{1, 2} {
		for _, p := range w.Players {
			var b coffer.Balances
			var trx int
			books := perPlayer[playerKey{ns, p}]
			_, err := w.retry(ctx, rng, &Record{}, func(c *client.Client) (coffer.Trx, error) {
				var err error
				if b, err = c.Balances(ctx, coffer.BalanceQuery{Namespace: ns, PlayerID: p}); err != nil {
					return coffer.Trx{}, err
				}
				trx, err = w.finlogSize(ctx, c, ns, p, books)
				return coffer.Trx{}, err
			})
			if err != nil {
				violations = append(violations, fmt.Sprintf("ns %d player %d: cannot read balances: %v", ns, p, err))
				continue
			}
			got := map[string]coffer.Amount{}
			for _, bal := range b.Balances {
				got[bal.Currency] = bal.Total
			}
			for _, cur := range []string{"gold", "silver", "credits"} {
				want := model[balanceKey{ns, p, cur}]
				if got[cur] != want {
					violations = append(violations, fmt.Sprintf("ns %d player %d %s: service %d, books %d", ns, p, cur, got[cur], want))
				}
				t := totals[cur]
				totals[cur] = [2]coffer.Amount{t[0] + want, t[1] + got[cur]}
			}
			if trx != books {
				violations = append(violations, fmt.Sprintf("ns %d player %d: finlog has %d trx, the books %d", ns, p, trx, books))
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
