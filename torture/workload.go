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
	"github.com/cofferhq/coffer/wallet"
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
func (in *Instances) Pick(rng *rand.Rand) *wallet.Conn {
	in.mu.Lock()
	url := in.urls[rng.IntN(len(in.urls))]
	in.mu.Unlock()
	return wallet.New(url, in.key, httpClient)
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
	// Purchase is a paid grant of a store order that other purchases may
	// present again (another key, another player): one of them is credited.
	Purchase Kind = "purchase"
	// Refund takes back an order presented earlier; its effect is what the
	// service answers (what was left of the order's lots, the policy).
	Refund Kind = "refund"
)

// Record is the client-side book of one write.
type Record struct {
	Key     string
	NS      coffer.Namespace
	Player  coffer.PlayerID
	Kind    Kind
	Deltas  map[string]coffer.Amount // the effect on balances if applied (a hold: if committed)
	Outcome Outcome
	// Code is the error code of a definitive refusal.
	Code    coffer.Code
	Retries int
	// Expiring tells a grant that some of its lots carry an expiry.
	Expiring bool
	// For holds: how the client ended it (commit, rollback, abandon) and
	// the status the service answered at the end ("" if none).
	HoldEnd    string
	HoldStatus coffer.TrxStatus
	// Outlives is, for a hold begun on a lot that expires before the
	// client ends it, when the lot expires.
	Outlives time.Time
	// Order is the store order of a purchase or a refund.
	Order string
	// Answered is when the definitive answer came: what to look for in
	// the servers' logs when a write is found wrong.
	Answered time.Time
}

// Workload runs clients that write and keeps their books.
type Workload struct {
	Instances *Instances
	Players   []coffer.PlayerID
	// Collectors are players who get many lots at once (paid grants,
	// free ones of many priorities) and spend over many of them, up to
	// coffer.LotsMax and coffer.TrxOpsMax.
	Collectors []coffer.PlayerID
	Seed       uint64
	// Until ends new writes, unless NemesisDone is set and still open:
	// then they go on until it is closed. GiveUpAt ends retries of
	// unknown outcomes.
	Until, GiveUpAt time.Time
	NemesisDone     <-chan struct{}
	// FinlogPage is how many trx a finlog page Verify reads holds; 0
	// means coffer.FinlogLimitMax.
	FinlogPage int

	mu      sync.Mutex
	records []*Record
	faults  []string  // violations seen while running (a conflict on a retry, say)
	orders  []*Record // purchases sent, whatever their outcome: what later purchases and refunds present again
}

// writing tells whether the clients still send new writes.
func (w *Workload) writing() bool {
	if time.Now().Before(w.Until) {
		return true
	}
	select {
	case <-w.NemesisDone:
		return false
	default:
		return w.NemesisDone != nil
	}
}

// Records are the books, once Run has returned.
func (w *Workload) Records() []*Record { return w.records }

// Run runs n clients until Until, and past it while NemesisDone is open.
func (w *Workload) Run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(w.Seed, uint64(i)))
			seq := 0
			if i < len(w.Collectors) {
				seq = w.fill(ctx, rng, i)
			}
			for ; ctx.Err() == nil && w.writing(); seq++ {
				if rng.IntN(10) == 0 {
					w.batch(ctx, rng, fmt.Sprintf("t%d-%d", i, seq))
					continue
				}
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
	change := wallet.Change{IdempotencyKey: key}
	if len(w.Collectors) > 0 && rng.IntN(6) == 0 {
		// Paid gold for two writes in three, free credits for the third,
		// in one namespace, at coffer.LotsMax since fill.
		r.NS, r.Player = 1, w.Collectors[rng.IntN(len(w.Collectors))]
		w.write(ctx, rng, r, w.collect(ctx, rng, r, []string{"gold", "gold", "credits"}[rng.IntN(3)]))
		return
	}
	switch p := rng.IntN(100); {
	case p < 5:
		w.purchase(ctx, rng, r, amount)
		return
	case p < 35:
		r.Kind, r.Deltas = Grant, map[string]coffer.Amount{cur: amount}
		change.Ops = []coffer.OpRequest{{Currency: cur, Amount: amount, ExpiresAt: w.expiry(rng)}}
		r.Expiring = change.Ops[0].ExpiresAt != nil
	case p < 58:
		r.Kind, r.Deltas = Consume, map[string]coffer.Amount{cur: -amount}
		change.Ops = []coffer.OpRequest{{Currency: cur, Amount: -amount}}
	case p < 76:
		r.Kind, r.Deltas = Hold, map[string]coffer.Amount{"gold": -amount / 10, "credits": amount}
		change.Hold, change.Ops = true, []coffer.OpRequest{{Currency: "credits", Amount: amount}}
		if amount >= 10 {
			change.Ops = append(change.Ops, coffer.OpRequest{Currency: "gold", Amount: -amount / 10})
		}
	case p < 85:
		w.holdOutlivingItsLot(ctx, rng, r, cur, amount)
		return
	case p < 88:
		w.refund(ctx, rng, r)
		return
	default:
		n := amount/50 + 1
		r.Kind, r.Deltas = Exchange, map[string]coffer.Amount{"gold": -n, "silver": 100 * n}
		ex := wallet.Exchange{IdempotencyKey: key, From: "gold", To: "silver", Amount: n}
		w.write(ctx, rng, r, func(c *wallet.Conn) (coffer.Trx, error) { return answer(c.Exchange(ctx, r.NS, r.Player, ex)) })
		return
	}
	w.write(ctx, rng, r, w.changer(ctx, r, change))
}

// orderStore is the store of the purchases whose orders repeat.
const orderStore = "torture-orders"

// purchase credits a store order to r's player, in gold or silver (whose
// refund_policy is claw_back in a torture run): a new order for half of
// them, for the other half one presented before, maybe to another player,
// which the service refuses (purchase_already_credited) unless that
// earlier purchase was refused too.
func (w *Workload) purchase(ctx context.Context, rng *rand.Rand, r *Record, amount coffer.Amount) {
	cur := []string{"gold", "silver"}[rng.IntN(2)]
	r.Kind, r.Order, r.Deltas = Purchase, r.Key, map[string]coffer.Amount{cur: amount}
	w.mu.Lock()
	if len(w.orders) > 0 && rng.IntN(2) == 0 {
		r.Order = w.orders[rng.IntN(len(w.orders))].Order
	}
	w.orders = append(w.orders, r)
	w.mu.Unlock()
	w.write(ctx, rng, r, w.changer(ctx, r, wallet.Change{IdempotencyKey: r.Key, Ops: []coffer.OpRequest{{Currency: cur, Amount: amount,
		Kind: "paid", Purchase: &coffer.Purchase{Store: orderStore, OrderID: r.Order, Price: 2 * int64(amount), Fiat: "EUR"}}}}))
}

// refund sends a refund or a chargeback of an order presented before, to
// the player it was presented for: answered not_found if that purchase was
// refused, already_refunded if the order was taken back before.
func (w *Workload) refund(ctx context.Context, rng *rand.Rand, r *Record) {
	w.mu.Lock()
	if len(w.orders) == 0 {
		w.mu.Unlock()
		return
	}
	of := w.orders[rng.IntN(len(w.orders))]
	w.mu.Unlock()
	r.Kind, r.Order, r.NS, r.Player = Refund, of.Order, of.NS, of.Player
	req := wallet.Refund{IdempotencyKey: r.Key, Store: orderStore, OrderID: r.Order, Kind: []coffer.RefundKind{coffer.RefundRefund, coffer.RefundChargeback}[rng.IntN(2)]}
	w.write(ctx, rng, r, func(c *wallet.Conn) (coffer.Trx, error) { return answer(c.Refund(ctx, r.NS, r.Player, req)) })
}

// write books r, sends it until the answer is definitive, and ends an
// acknowledged hold (one that outlives its lot once the lot expired).
func (w *Workload) write(ctx context.Context, rng *rand.Rand, r *Record, send func(c *wallet.Conn) (coffer.Trx, error)) {
	w.mu.Lock()
	w.records = append(w.records, r)
	w.mu.Unlock()
	_, err := w.retry(ctx, rng, r, send)
	r.Outcome, r.Code, r.Answered = outcomeOf(err), coffer.ErrorCode(err), time.Now()
	if r.Kind != Hold || r.Outcome != Acked {
		return
	}
	if wait := time.Until(r.Outlives); wait > 0 {
		time.Sleep(wait + 100*time.Millisecond)
	}
	w.endHold(ctx, rng, r)
}

// changer sends change for r's player.
func (w *Workload) changer(ctx context.Context, r *Record, change wallet.Change) func(c *wallet.Conn) (coffer.Trx, error) {
	return func(c *wallet.Conn) (coffer.Trx, error) { return answer(c.Change(ctx, r.NS, r.Player, change)) }
}

// expiryLeadMin is how long before the end of the workload a lot that
// expires during it does: the lot sweeper records it (every 500 ms in a
// torture run) before the checks read the finlog.
const expiryLeadMin = 3 * time.Second

// expiry is a grant's expiry: none for most, within the run for a
// quarter (at least expiryLeadMin before Until), long after it for a
// tenth (each its own lot: no two grants share the microsecond).
func (w *Workload) expiry(rng *rand.Rand) *time.Time {
	switch p := rng.IntN(20); {
	case p < 5:
		at := time.Now().Add(time.Duration(500+rng.IntN(15000)) * time.Millisecond)
		if at.After(w.Until.Add(-expiryLeadMin)) {
			return nil
		}
		return &at
	case p < 7:
		at := time.Now().Add(time.Hour + time.Duration(rng.IntN(3600_000))*time.Millisecond)
		return &at
	}
	return nil
}

// holdOutlivingItsLot grants a lot that expires in about a second, begins
// a hold that reserves from it (the soonest-expiring lot is spent first),
// and ends the hold after the lot expired: a rollback or the hold's
// expiry returns the reservation to an expired lot, which expires at
// once. Two records: the grant and the hold.
func (w *Workload) holdOutlivingItsLot(ctx context.Context, rng *rand.Rand, r *Record, cur string, amount coffer.Amount) {
	at := time.Now().Add(time.Duration(800+rng.IntN(700)) * time.Millisecond)
	if at.After(w.Until.Add(-expiryLeadMin)) {
		at = time.Now().Add(2 * time.Hour) // too late in the run: a plain hold
	}
	grant := &Record{Key: r.Key + "-lot", NS: r.NS, Player: r.Player, Kind: Grant, Deltas: map[string]coffer.Amount{cur: amount}, Expiring: true}
	w.write(ctx, rng, grant, w.changer(ctx, grant, wallet.Change{IdempotencyKey: grant.Key,
		Ops: []coffer.OpRequest{{Currency: cur, Amount: amount, ExpiresAt: &at}}}))
	if grant.Outcome != Acked {
		return
	}
	take := 1 + amount/2
	r.Kind, r.Deltas = Hold, map[string]coffer.Amount{cur: -take}
	if at.Before(w.Until) {
		r.Outlives = at
	}
	w.write(ctx, rng, r, w.changer(ctx, r, wallet.Change{IdempotencyKey: r.Key, Hold: true,
		Ops: []coffer.OpRequest{{Currency: cur, Amount: -take}}}))
}

// collect is a write of a collector: many lots at once (paid grants, or
// free credits of as many priorities), or a consume or a hold over many of
// them.
func (w *Workload) collect(ctx context.Context, rng *rand.Rand, r *Record, cur string) func(c *wallet.Conn) (coffer.Trx, error) {
	change := wallet.Change{IdempotencyKey: r.Key}
	switch p := rng.IntN(10); {
	case p < 8:
		change.Ops = w.lots(rng, r, cur, coffer.OpsMax/2+rng.IntN(coffer.OpsMax/2+1), true)
	default:
		amount := coffer.Amount(20 + rng.IntN(200))
		r.Kind, r.Deltas = Consume, map[string]coffer.Amount{cur: -amount}
		change.Ops = []coffer.OpRequest{{Currency: cur, Amount: -amount}}
		if p == 9 {
			r.Kind, change.Hold = Hold, true
		}
	}
	return w.changer(ctx, r, change)
}

// lots makes r a grant of n lots of cur to a collector: paid gold, each
// its own purchase, or free credits of as many priorities; some expire
// when expiring.
func (w *Workload) lots(rng *rand.Rand, r *Record, cur string, n int, expiring bool) []coffer.OpRequest {
	r.Kind, r.Deltas = Grant, map[string]coffer.Amount{}
	ops := make([]coffer.OpRequest, 0, n)
	for i := range n {
		op := coffer.OpRequest{Currency: cur, Amount: coffer.Amount(1 + rng.IntN(20))}
		if expiring {
			op.ExpiresAt = w.expiry(rng)
			r.Expiring = r.Expiring || op.ExpiresAt != nil
		}
		if cur == "credits" {
			op.Priority = int32(rng.IntN(1000))
		} else {
			op.Kind, op.Purchase = "paid", &coffer.Purchase{Store: "torture", OrderID: fmt.Sprint(r.Key, "-", i), Price: 99, Fiat: "EUR"}
		}
		ops = append(ops, op)
		r.Deltas[cur] += op.Amount
	}
	return ops
}

// fillWritesMax bounds fill: three times the grants that reach
// coffer.LotsMax when nothing else spends or expires the lots.
const fillWritesMax = 3 * coffer.LotsMax / coffer.OpsMax

// fill brings collector i to coffer.LotsMax before client i writes
// anything else: grants of coffer.OpsMax paid gold lots that do not
// expire, until one is refused with too_many_lots (or fillWritesMax).
// So the run grants at the bound and spends over many lots at any
// throughput, a short run on a busy host too. It returns the writes it
// sent.
func (w *Workload) fill(ctx context.Context, rng *rand.Rand, i int) (seq int) {
	for ; seq < fillWritesMax && ctx.Err() == nil && w.writing(); seq++ {
		r := &Record{Key: fmt.Sprintf("t%d-%d", i, seq), NS: 1, Player: w.Collectors[i]}
		change := wallet.Change{IdempotencyKey: r.Key, Ops: w.lots(rng, r, "gold", coffer.OpsMax, false)}
		w.write(ctx, rng, r, w.changer(ctx, r, change))
		if r.Code == coffer.CodeTooManyLots {
			return seq + 1
		}
	}
	return seq
}

// batch sends grants and consumes for a few players in one batch call,
// each change a record of its own. The changes whose answer is not
// definitive are sent again, in a batch of their own, with the same keys.
func (w *Workload) batch(ctx context.Context, rng *rand.Rand, key string) {
	ns := coffer.Namespace(1 + rng.IntN(2))
	var recs []*Record
	var changes []wallet.BatchChange
	for i := range 2 + rng.IntN(7) {
		r := &Record{Key: fmt.Sprintf("%s-%d", key, i), NS: ns, Player: w.Players[rng.IntN(len(w.Players))], Kind: Grant}
		cur, amount := []string{"gold", "silver", "credits"}[rng.IntN(3)], coffer.Amount(1+rng.IntN(500))
		if rng.IntN(3) == 0 {
			r.Kind, amount = Consume, -amount
		}
		r.Deltas = map[string]coffer.Amount{cur: amount}
		recs = append(recs, r)
		changes = append(changes, wallet.BatchChange{PlayerID: r.Player, IdempotencyKey: r.Key, Ops: []coffer.OpRequest{{Currency: cur, Amount: amount}}})
	}
	w.mu.Lock()
	w.records = append(w.records, recs...)
	w.mu.Unlock()
	backoff := 50 * time.Millisecond
	for len(recs) > 0 {
		res, err := w.Instances.Pick(rng).BatchChange(ctx, ns, changes)
		var again []*Record
		var resend []wallet.BatchChange
		for i, r := range recs {
			if err == nil && definitive(res[i].Err) {
				r.Outcome, r.Code, r.Answered = outcomeOf(res[i].Err), coffer.ErrorCode(res[i].Err), time.Now()
				if coffer.ErrorCode(res[i].Err) == coffer.CodeIdempotencyConflict {
					w.violation("%s: a retry with the same payload got idempotency_conflict", r.Key)
				}
				continue
			}
			r.Retries++
			again, resend = append(again, r), append(resend, changes[i])
		}
		if len(again) == 0 || ctx.Err() != nil || time.Now().After(w.GiveUpAt) {
			return // the rest stay unknown
		}
		recs, changes = again, resend
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
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
	end := func(c *wallet.Conn) (coffer.Trx, error) { return answer(c.Commit(ctx, r.NS, r.Player, r.Key)) }
	if p >= 7 {
		r.HoldEnd = "rollback"
		end = func(c *wallet.Conn) (coffer.Trx, error) { return answer(c.Rollback(ctx, r.NS, r.Player, r.Key)) }
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
func (w *Workload) retry(ctx context.Context, rng *rand.Rand, r *Record, send func(*wallet.Conn) (coffer.Trx, error)) (coffer.Trx, error) {
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
