// Package torture is coffer's fault-injection suite: a workload of money
// movements with client-side bookkeeping of every request and its outcome,
// a nemesis that kills, freezes and cuts off databases and service
// instances on a seeded schedule, and the checks that no currency was
// created or lost.
package torture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/client"
)

// Instances is the set of coffer instances clients call; the nemesis
// replaces one when it restarts it on new ports. Safe for concurrent use.
type Instances struct {
	mu   sync.Mutex
	key  string
	urls []string
}

// NewInstances returns the instances at the base URLs, called with key.
func NewInstances(key string, urls ...string) *Instances {
	return &Instances{key: key, urls: urls}
}

// Set replaces instance i's URL.
func (in *Instances) Set(i int, url string) {
	in.mu.Lock()
	in.urls[i] = url
	in.mu.Unlock()
}

// Pick is a client of a random instance.
func (in *Instances) Pick(rng *rand.Rand) *client.Client {
	in.mu.Lock()
	url := in.urls[rng.IntN(len(in.urls))]
	in.mu.Unlock()
	return client.New(url, in.key, httpClient)
}

// Outcome is what the client knows of a write.
type Outcome int

// Outcomes: acknowledged (applied), rejected with a definitive error
// (nothing written), or unknown (no answer, or shard_unavailable, until a
// retry with the same key resolved it).
const (
	Unknown Outcome = iota
	Acked
	Rejected
)

// Kind is the kind of a recorded write.
type Kind string

// The kinds of writes.
const (
	Grant    Kind = "grant"
	Consume  Kind = "consume"
	Hold     Kind = "hold"
	Exchange Kind = "exchange"
)

// Record is the client-side book of one write.
type Record struct {
	Key     string
	NS      coffer.Namespace
	Player  coffer.PlayerID
	Kind    Kind
	Deltas  map[string]coffer.Amount // the effect on balances if applied (a hold: if committed)
	Outcome Outcome
	Retries int
	// For holds: how the client ended it (commit, rollback, abandon) and
	// the status the service answered at the end ("" if none).
	HoldEnd    string
	HoldStatus coffer.TrxStatus
}

// Workload runs clients that write and keeps their books.
type Workload struct {
	Instances *Instances
	Players   []coffer.PlayerID
	Seed      uint64
	// Until ends new writes; GiveUpAt ends retries of unknown outcomes.
	Until, GiveUpAt time.Time
	// FinlogPage is how many trx a finlog page Verify reads holds; 0
	// means coffer.FinlogLimitMax.
	FinlogPage int

	mu      sync.Mutex
	records []*Record
	faults  []string // violations seen while running (a conflict on a retry, say)
}

// Records are the books, once Run has returned.
func (w *Workload) Records() []*Record { return w.records }

// Run runs n clients until Until.
func (w *Workload) Run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i)))
			for seq := 0; ctx.Err() == nil && time.Now().Before(w.Until); seq++ {
				w.one(ctx, rng, fmt.Sprintf("t%d-%d", i, seq))
			}
		}()
	}
	wg.Wait()
}

func (w *Workload) one(ctx context.Context, rng *rand.Rand, key string) {
	r := &Record{Key: key, NS: coffer.Namespace(1 + rng.IntN(2)), Player: w.Players[rng.IntN(len(w.Players))]}
	cur := []string{"gold", "silver", "credits"}[rng.IntN(3)]
	amount := coffer.Amount(1 + rng.IntN(500))
	change := client.Change{IdempotencyKey: key}
	var send func(c *client.Client) (coffer.Trx, error)
	switch p := rng.IntN(100); {
	case p < 40:
		r.Kind, r.Deltas = Grant, map[string]coffer.Amount{cur: amount}
		change.Ops = []coffer.OpRequest{{Currency: cur, Amount: amount}}
	case p < 65:
		r.Kind, r.Deltas = Consume, map[string]coffer.Amount{cur: -amount}
		change.Ops = []coffer.OpRequest{{Currency: cur, Amount: -amount}}
	case p < 85:
		r.Kind, r.Deltas = Hold, map[string]coffer.Amount{"gold": -amount / 10, "credits": amount}
		change.Hold, change.Ops = true, []coffer.OpRequest{{Currency: "credits", Amount: amount}}
		if amount >= 10 {
			change.Ops = append(change.Ops, coffer.OpRequest{Currency: "gold", Amount: -amount / 10})
		}
	default:
		n := amount/50 + 1
		r.Kind, r.Deltas = Exchange, map[string]coffer.Amount{"gold": -n, "silver": 100 * n}
		ex := client.Exchange{IdempotencyKey: key, From: "gold", To: "silver", Amount: n}
		send = func(c *client.Client) (coffer.Trx, error) { return answer(c.Exchange(ctx, r.NS, r.Player, ex)) }
	}
	if send == nil {
		send = func(c *client.Client) (coffer.Trx, error) { return answer(c.Change(ctx, r.NS, r.Player, change)) }
	}
	w.mu.Lock()
	w.records = append(w.records, r)
	w.mu.Unlock()
	_, err := w.retry(ctx, rng, r, send)
	r.Outcome = outcomeOf(err)
	if r.Kind == Hold && r.Outcome == Acked {
		w.endHold(ctx, rng, r)
	}
}

// answer drops the replay flag of a client call: the books only need the
// trx and the error.
func answer(t coffer.Trx, _ bool, err error) (coffer.Trx, error) { return t, err }

// endHold commits (70 %), rolls back (20 %) or abandons (10 %) a hold.
func (w *Workload) endHold(ctx context.Context, rng *rand.Rand, r *Record) {
	p := rng.IntN(10)
	if p == 9 {
		r.HoldEnd = "abandon"
		return
	}
	r.HoldEnd = "commit"
	end := func(c *client.Client) (coffer.Trx, error) { return answer(c.Commit(ctx, r.NS, r.Player, r.Key)) }
	if p >= 7 {
		r.HoldEnd = "rollback"
		end = func(c *client.Client) (coffer.Trx, error) { return answer(c.Rollback(ctx, r.NS, r.Player, r.Key)) }
	}
	t, err := w.retry(ctx, rng, r, end)
	switch coffer.ErrorCode(err) {
	case "":
		r.HoldStatus = t.Status
	case coffer.CodeHoldExpired:
		r.HoldStatus = coffer.StatusExpired
	}
}

// retry sends until the answer is definitive or GiveUpAt passes: an
// unknown outcome is retried with the same key, possibly on the other
// instance.
func (w *Workload) retry(ctx context.Context, rng *rand.Rand, r *Record, send func(*client.Client) (coffer.Trx, error)) (coffer.Trx, error) {
	backoff := 50 * time.Millisecond
	for {
		t, err := send(w.Instances.Pick(rng))
		if definitive(err) {
			if coffer.ErrorCode(err) == coffer.CodeIdempotencyConflict {
				w.violation("%s: a retry with the same payload got idempotency_conflict", r.Key)
			}
			return t, err
		}
		if ctx.Err() != nil || time.Now().After(w.GiveUpAt) {
			return t, err
		}
		r.Retries++
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

func (w *Workload) violation(format string, args ...any) {
	w.mu.Lock()
	w.faults = append(w.faults, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// definitive tells whether an answer settles a write: success, or an error
// that says nothing was written.
func definitive(err error) bool {
	var e *coffer.Error
	if err == nil {
		return true
	}
	if !errors.As(err, &e) {
		return false // no answer
	}
	return e.Code != coffer.CodeUnavailable && e.Code != coffer.CodeInternal
}

func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Acked
	case definitive(err):
		return Rejected
	}
	return Unknown
}
