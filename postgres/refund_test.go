package postgres_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

func refundOf(player coffer.PlayerID, key, order string) coffer.RefundRequest {
	return coffer.RefundRequest{Scope: scope(player, key), Store: "steam", OrderID: order, Kind: coffer.RefundRefund, Reason: "store refund"}
}

func (e *env) refund(req coffer.RefundRequest) (coffer.Trx, bool, error) {
	return e.store.Refund(ctx, req)
}

func (e *env) mustRefund(req coffer.RefundRequest) coffer.Trx {
	e.t.Helper()
	trx, replay, err := e.refund(req)
	if err != nil || replay {
		e.t.Fatalf("refund %s: %v (replay %v)", req.IdempotencyKey, err, replay)
	}
	return trx
}

// taken sums a refund's ops per currency and paid or free, as "gold
// paid 40", and checks each names a lot and is a refund's consume.
func taken(t *testing.T, trx coffer.Trx) string {
	t.Helper()
	out := ""
	for _, op := range trx.Ops {
		if op.Kind != coffer.OpConsume || op.LotID == 0 || op.Amount >= 0 {
			t.Fatalf("refund op %+v: want a consume naming its lot", op)
		}
		kind := "free"
		if op.Paid {
			kind = "paid"
		}
		out += fmt.Sprintf("[%s %s %d]", op.Currency, kind, -op.Amount)
	}
	return out
}

// TestRefundOfAnUnspentPurchase takes the whole purchase back from its
// own lot and nothing else; the trx is a refund naming its order, the
// finlog shows it, and the player keeps its other coins.
func TestRefundOfAnUnspentPurchase(t *testing.T) {
	e := newEnv(t)
	buy := e.mustChange(20, "buy", paid("gold", 500, "o-1"), free("gold", 50))
	trx := e.mustRefund(refundOf(20, "r-1", "o-1"))
	if trx.Kind != coffer.TrxRefund || trx.Status != coffer.StatusCommitted || trx.Refund == nil ||
		fmt.Sprint(*trx.Refund) != fmt.Sprint(coffer.Refund{Store: "steam", OrderID: "o-1", Kind: coffer.RefundRefund}) {
		t.Fatalf("refund trx = %+v, refund %+v", trx, trx.Refund)
	}
	if got := taken(t, trx); got != "[gold paid 500]" || trx.Ops[0].LotID != buy.Ops[0].LotID {
		t.Fatalf("took %s from lot %d, want 500 paid from lot %d", got, trx.Ops[0].LotID, buy.Ops[0].LotID)
	}
	if b := e.balance(20, "gold"); b.Total != 50 || b.Paid != 0 || len(trx.Balances) != 1 || trx.Balances[0].Total != 50 {
		t.Fatalf("gold = %+v, trx balances %+v", b, trx.Balances)
	}
	page, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 20, Desc: true, Limit: 1})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].Kind != coffer.TrxRefund || page.Items[0].Refund == nil || page.Items[0].Refund.OrderID != "o-1" {
		t.Fatalf("finlog = %+v", page.Items)
	}
	lines, err := e.store.Revenue(ctx, coffer.RevenueQuery{Namespace: 1, From: buy.CreatedAt, To: time.Now().Add(time.Minute)})
	must(t, err)
	if len(lines) != 1 || lines[0].Deposited != 500 || lines[0].Refunded != 500 || lines[0].Recognised != 0 || lines[0].Deferred != 0 {
		t.Fatalf("revenue = %+v", lines)
	}
}

// TestRefundOfAPartlySpentPurchase: what is left of the purchase comes
// from its own lot; the rest, under claw_back (gold), from the player's
// other lots, paid before free, as far as they go, and what they lack is
// the shortfall; under write_off (silver) all of the rest is.
func TestRefundOfAPartlySpentPurchase(t *testing.T) {
	for _, tc := range []struct {
		currency  string
		took      string
		shortfall coffer.Amount
		value     coffer.Amount // of the shortfall: what those coins of the order cost
		left      coffer.Amount
	}{
		{"gold", "[gold paid 40][gold paid 20][gold free 10]", 30, 149, 0},
		{"silver", "[silver paid 40]", 60, 299, 30},
	} {
		t.Run(tc.currency, func(t *testing.T) {
			e := newEnv(t)
			c := tc.currency
			e.mustChange(21, "buy", paid(c, 100, "o-a"))
			e.mustChange(21, "spend", free(c, -60))
			e.mustChange(21, "more", free(c, 10), paid(c, 20, "o-b"))
			trx := e.mustRefund(refundOf(21, "r", "o-a"))
			if got := taken(t, trx); got != tc.took {
				t.Fatalf("took %s, want %s", got, tc.took)
			}
			want := []coffer.RefundAmount{{Currency: c, Amount: tc.shortfall, Value: tc.value}}
			if fmt.Sprint(trx.Refund.Shortfall) != fmt.Sprint(want) {
				t.Fatalf("shortfall %+v, want %+v", trx.Refund.Shortfall, want)
			}
			if b := e.balance(21, c); b.Total != tc.left {
				t.Fatalf("%s left %+v, want %d", c, b, tc.left)
			}
		})
	}
}

// TestRefundOfASpentPurchase: a purchase spent to 0 gives nothing back
// from its lot; the refund is recorded all the same, its shortfall the
// whole purchase where nothing else can be clawed back.
func TestRefundOfASpentPurchase(t *testing.T) {
	e := newEnv(t)
	for _, c := range []string{"gold", "silver"} {
		e.mustChange(22, "buy-"+c, paid(c, 100, "o-"+c))
		e.mustChange(22, "spend-"+c, free(c, -100))
		trx := e.mustRefund(refundOf(22, "r-"+c, "o-"+c))
		if len(trx.Ops) != 0 || fmt.Sprint(trx.Refund.Shortfall) != fmt.Sprint([]coffer.RefundAmount{{Currency: c, Amount: 100, Value: 499}}) {
			t.Fatalf("%s: refund %+v, shortfall %+v", c, trx.Ops, trx.Refund.Shortfall)
		}
		got, err := e.store.Trx(ctx, scope(22, "r-"+c))
		must(t, err)
		if got.Refund == nil || fmt.Sprint(got.Refund.Shortfall) != fmt.Sprint(trx.Refund.Shortfall) {
			t.Fatalf("stored refund %+v", got.Refund)
		}
	}
}

// TestRefundAfterTheLotExpired records the expiry first; the expired
// coins are not there to take, and the policy decides about them as
// about spent ones.
func TestRefundAfterTheLotExpired(t *testing.T) {
	e := newEnv(t)
	later := time.Now().Add(time.Hour)
	buy := paid("silver", 100, "o-x")
	buy.ExpiresAt = &later
	e.mustChange(23, "buy", buy, free("silver", 5))
	e.expireNow(23)
	trx := e.mustRefund(refundOf(23, "r", "o-x"))
	if len(trx.Ops) != 0 || fmt.Sprint(trx.Refund.Shortfall) != fmt.Sprint([]coffer.RefundAmount{{Currency: "silver", Amount: 100, Value: 499}}) {
		t.Fatalf("refund ops %+v, shortfall %+v", trx.Ops, trx.Refund.Shortfall)
	}
	if x := e.expiries(23); len(x) != 1 || x[0].Amount != -100 {
		t.Fatalf("expiries %+v", x)
	}
	if b := e.balance(23, "silver"); b.Total != 5 {
		t.Fatalf("silver = %+v", b)
	}
}

// TestRefundTakesWhatAHoldReservedWhenItRollsBack: the coins a pending
// hold reserves from the purchase's lot are not taken by the refund;
// under write_off they are shortfall, as if spent. Should the hold roll
// back, they go to the refund (an op of cause refund_held in the
// rollback), not back to the player, and the revenue report counts them
// refunded, no longer short; should it commit, they are spent and the
// shortfall stands. The audit (newEnv's cleanup) checks the lots owe no
// more than they reserve and that the revenue reconciles.
func TestRefundTakesWhatAHoldReservedWhenItRollsBack(t *testing.T) {
	e := newEnv(t)
	from := time.Now().Add(-time.Second)
	for _, player := range []coffer.PlayerID{24, 29} {
		order := fmt.Sprintf("o-%d", player)
		e.mustChange(player, "buy", paid("silver", 100, order))
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(player, "hold"), Ops: []coffer.OpRequest{free("silver", -30)}, Hold: true})
		must(t, err)
		chargeback := refundOf(player, "r", order)
		chargeback.Kind = coffer.RefundChargeback
		trx := e.mustRefund(chargeback)
		if got := taken(t, trx); got != "[silver paid 70]" || fmt.Sprint(trx.Refund.Shortfall) != "[{silver 30 150}]" {
			t.Fatalf("took %s, shortfall %+v", got, trx.Refund.Shortfall)
		}
	}
	time.Sleep(2 * time.Millisecond)
	pending := time.Now()
	time.Sleep(2 * time.Millisecond)
	rb, _, err := e.store.Rollback(ctx, byItsClient(24, "hold"))
	must(t, err)
	var ops []string
	for _, op := range rb.Ops[1:] {
		ops = append(ops, fmt.Sprintf("%s %d %v %s", op.Kind, op.Amount, *op.Value, op.Cause))
	}
	if got := strings.Join(ops, ", "); got != "grant 30 {150 USD} release, consume -30 {-150 USD} refund_held" || len(rb.Balances) != 1 || rb.Balances[0].Total != 0 {
		t.Fatalf("the rollback's ops after the hold's: %s; balances %+v", got, rb.Balances)
	}
	_, _, err = e.store.Commit(ctx, byItsClient(29, "hold"))
	must(t, err)
	for _, player := range []coffer.PlayerID{24, 29} {
		if b := e.balance(player, "silver"); b.Total != 0 {
			t.Fatalf("player %d holds %+v of a refunded order", player, b)
		}
	}
	// While the holds were pending, and once they are finished.
	for _, c := range []struct {
		to   time.Time
		want string
	}{
		{pending, "silver USD: opening 0 deposited 200 recognised 0 converted 0/0 expired 0 refunded 140/60 deferred 60 | " +
			"value: opening 0 deposited 998 recognised 0 converted 0/0 expired 0 refunded 698/300 deferred 300"},
		{time.Now().Add(time.Minute), "silver USD: opening 0 deposited 200 recognised 30 converted 0/0 expired 0 refunded 170/30 deferred 0 | " +
			"value: opening 0 deposited 998 recognised 150 converted 0/0 expired 0 refunded 848/150 deferred 0"},
	} {
		if got := e.revenue(from, c.to); got != c.want {
			t.Errorf("revenue to %s:\n%s\nwant\n%s", c.to, got, c.want)
		}
	}
}

// TestRefundTakesWhatAHoldReservedFromExchangedCoinsWhenItRollsBack: a
// purchase exchanged whole into silver, the silver held, then the
// purchase charged back: the refund takes nothing (the silver is
// reserved) and counts 10 gold short; when the hold rolls back, the
// silver goes to the refund, not back to the player, and the revenue
// report counts it taken back.
func TestRefundTakesWhatAHoldReservedFromExchangedCoinsWhenItRollsBack(t *testing.T) {
	e := newEnv(t)
	from := time.Now().Add(-time.Second)
	e.mustChange(66, "buy", paid("gold", 10, "o-66"))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(66, "ex"), From: "gold", To: "silver", Amount: 10})
	must(t, err)
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(66, "hold"), Ops: []coffer.OpRequest{free("silver", -1000)}, Hold: true})
	must(t, err)
	chargeback := refundOf(66, "r", "o-66")
	chargeback.Kind = coffer.RefundChargeback
	trx := e.mustRefund(chargeback)
	if got := taken(t, trx); got != "" || fmt.Sprint(trx.Refund.Shortfall) != "[{gold 10 499}]" {
		t.Fatalf("took %q, shortfall %+v", got, trx.Refund.Shortfall)
	}
	rb, _, err := e.store.Rollback(ctx, byItsClient(66, "hold"))
	must(t, err)
	var ops []string
	for _, op := range rb.Ops[1:] {
		ops = append(ops, fmt.Sprintf("%s %s %d %v %s", op.Kind, op.Currency, op.Amount, *op.Value, op.Cause))
	}
	if got := strings.Join(ops, ", "); got != "grant silver 1000 {499 USD} release, consume silver -1000 {-499 USD} refund_held" {
		t.Fatalf("the rollback's ops after the hold's: %s", got)
	}
	for _, cur := range []string{"gold", "silver"} {
		if b := e.balance(66, cur); b.Total != 0 {
			t.Fatalf("the player holds %+v of a refunded order", b)
		}
	}
	// The shortfall stays on the order's currency; what the rollback took
	// back counts against it on the silver line: over both, in value,
	// nothing is short.
	want := "gold USD: opening 0 deposited 10 recognised 0 converted 0/10 expired 0 refunded 0/10 deferred 0 | " +
		"value: opening 0 deposited 499 recognised 0 converted 0/499 expired 0 refunded 0/499 deferred 0\n" +
		"silver USD: opening 0 deposited 0 recognised 0 converted 1000/0 expired 0 refunded 1000/-1000 deferred 0 | " +
		"value: opening 0 deposited 0 recognised 0 converted 499/0 expired 0 refunded 499/-499 deferred 0"
	if got := e.revenue(from, time.Now().Add(time.Minute)); got != want {
		t.Errorf("revenue:\n%s\nwant\n%s", got, want)
	}
}

// TestRefundReplayConflictAndSecondRefund: the same key and payload
// replays the first answer; the same key with another payload is
// idempotency_conflict; another key, whatever its kind, already_refunded.
func TestRefundReplayConflictAndSecondRefund(t *testing.T) {
	e := newEnv(t)
	e.mustChange(25, "buy", paid("gold", 100, "o-r"))
	first := e.mustRefund(refundOf(25, "r", "o-r"))
	again, replay, err := e.refund(refundOf(25, "r", "o-r"))
	if err != nil || !replay {
		t.Fatalf("replay: %v %v", replay, err)
	}
	sameAnswer(t, first, again)
	changed := refundOf(25, "r", "o-r")
	changed.Kind = coffer.RefundChargeback
	_, _, err = e.refund(changed)
	wantCode(t, err, coffer.CodeIdempotencyConflict)
	other := refundOf(25, "r-2", "o-r")
	other.Kind = coffer.RefundChargeback
	_, _, err = e.refund(other)
	wantCode(t, err, coffer.CodeAlreadyRefunded)
	_, err = e.store.Trx(ctx, scope(25, "r-2"))
	wantCode(t, err, coffer.CodeNotFound)
}

// TestRefundOfAnUnknownOrder: an order never credited, credited to
// another player, or only pending in a hold is not_found, and the
// refund writes nothing: the same key works once the order is credited.
func TestRefundOfAnUnknownOrder(t *testing.T) {
	e := newEnv(t)
	e.mustChange(26, "buy", paid("gold", 100, "o-26"))
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(27, "hold"), Ops: []coffer.OpRequest{paid("gold", 10, "o-27")}, Hold: true})
	must(t, err)
	before, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 27})
	must(t, err)
	for _, order := range []string{"o-none", "o-26", "o-27"} {
		_, _, err := e.refund(refundOf(27, "r", order))
		wantCode(t, err, coffer.CodeNotFound)
	}
	after, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 27})
	must(t, err)
	if after.Version != before.Version {
		t.Fatalf("a refused refund wrote: version %d → %d", before.Version, after.Version)
	}
	_, _, err = e.store.Commit(ctx, byItsClient(27, "hold"))
	must(t, err)
	if got := taken(t, e.mustRefund(refundOf(27, "r", "o-27"))); got != "[gold paid 10]" {
		t.Fatalf("took %s", got)
	}
}

// TestRefundBadInput: a clear invalid_argument, and nothing written.
func TestRefundBadInput(t *testing.T) {
	e := newEnv(t)
	e.mustChange(28, "buy", paid("gold", 100, "o-b"))
	long := string(make([]byte, 129))
	for name, mutate := range map[string]func(*coffer.RefundRequest){
		"kind":      func(r *coffer.RefundRequest) { r.Kind = "gift" },
		"no kind":   func(r *coffer.RefundRequest) { r.Kind = "" },
		"store":     func(r *coffer.RefundRequest) { r.Store = "" },
		"order":     func(r *coffer.RefundRequest) { r.OrderID = long },
		"key":       func(r *coffer.RefundRequest) { r.IdempotencyKey = "" },
		"reason":    func(r *coffer.RefundRequest) { r.Reason = "bad\x00" },
		"player":    func(r *coffer.RefundRequest) { r.PlayerID = 0 },
		"namespace": func(r *coffer.RefundRequest) { r.Namespace = -1 },
	} {
		req := refundOf(28, "r", "o-b")
		mutate(&req)
		_, _, err := e.refund(req)
		if coffer.ErrorCode(err) != coffer.CodeInvalid {
			t.Fatalf("%s: %v, want invalid_argument", name, err)
		}
	}
	if b := e.balance(28, "gold"); b.Total != 100 {
		t.Fatalf("gold = %+v", b)
	}
	e.mustRefund(refundOf(28, "r", "o-b"))
}

// TestConcurrentRefundsOfOneOrder sends the refund of one order from
// many goroutines at once, each with its own key, and each key twice:
// exactly one key refunds it (its twin replays), every other is
// already_refunded, and the purchase is taken back once.
func TestConcurrentRefundsOfOneOrder(t *testing.T) {
	e := newEnv(t)
	e.mustChange(29, "buy", paid("gold", 100, "o-c"), free("gold", 1000))
	e.mustChange(29, "spend", free("gold", -1050)) // the purchase has 50 left
	var mu sync.Mutex
	won, replays, refused := map[string]int{}, 0, 0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		for range 2 {
			wg.Go(func() {
				<-start
				trx, replay, err := e.refund(refundOf(29, fmt.Sprintf("r-%d", i), "o-c"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && replay:
					replays++
				case err == nil:
					won[trx.IdempotencyKey]++
				case coffer.ErrorCode(err) == coffer.CodeAlreadyRefunded:
					refused++
				default:
					t.Errorf("refund: %v", err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if len(won) != 1 || replays != 1 || refused != 30 {
		t.Fatalf("won %v, replays %d, refused %d", won, replays, refused)
	}
	// 50 from the purchase, 50 clawed back from the free gold.
	if b := e.balance(29, "gold"); b.Total != 0 {
		t.Fatalf("gold = %+v", b)
	}
}

// TestAuditFindsRefundDamage corrupts refunds behind the store's back;
// the audit must report each kind of damage.
func TestAuditFindsRefundDamage(t *testing.T) {
	for check, damage := range map[string]string{
		"refund of an order not credited": `UPDATE trx_%d SET refund = jsonb_set(refund, '{order_id}', '"o-none"') WHERE refund IS NOT NULL`,
		"order refunded twice": `INSERT INTO trx_%[1]d (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status,
			reason, version, pos, refund)
			SELECT ns, player_id + 1, created_at, trx_id + 1000, emitter, idempotency_key, request_hash, kind, status, reason, version, pos, refund
			FROM trx_%[1]d WHERE refund IS NOT NULL`,
		"refund differs from its order": `UPDATE trx_%d SET refund = jsonb_set(refund, '{shortfall}', '[{"currency": 1, "amount": 59}]') WHERE refund IS NOT NULL`,
	} {
		t.Run(check, func(t *testing.T) {
			e := newEnv(t)
			e.mustChange(32, "buy", paid("gold", 100, "o-d"))
			e.mustChange(32, "spend", free("gold", -60))
			e.mustRefund(refundOf(32, "r", "o-d"))
			e.auditFinds(32, check, damage)
		})
	}
}

// TestRefundFollowsExchangedCoins: a purchase partly exchanged into
// silver, whose silver was partly spent and partly exchanged into
// credits (which cannot be paid), is charged back: what is left of its
// own lot and of the silver lot the exchange made comes back, the silver
// counting in gold by the exchange's ratio; the rest, in gold, is clawed
// back (gold is claw_back) as far as it goes; credits stay. The audit's
// refund and revenue checks hold (newEnv's cleanup).
func TestRefundFollowsExchangedCoins(t *testing.T) {
	e := newEnv(t)
	e.mustChange(40, "buy", paid("gold", 100, "o-x"))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(40, "ex"), From: "gold", To: "silver", Amount: 60})
	must(t, err)
	e.mustChange(40, "spend", free("silver", -1000), free("gold", 5))
	_, _, err = e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(40, "ex2"), From: "silver", To: "credits", Amount: 1000})
	must(t, err)
	req := refundOf(40, "r", "o-x")
	req.Kind = coffer.RefundChargeback
	trx := e.mustRefund(req)
	// 40 gold left of the purchase, 4000 silver of 6000 = 40 gold, 5 gold
	// clawed back; 15 gold missing.
	if got := taken(t, trx); got != "[gold paid 40][silver paid 4000][gold free 5]" {
		t.Fatalf("took %s", got)
	}
	if fmt.Sprint(trx.Refund.Exchanged, trx.Refund.Shortfall) != "[{gold 40 0}] [{gold 15 75}]" {
		t.Fatalf("exchanged %+v, shortfall %+v", trx.Refund.Exchanged, trx.Refund.Shortfall)
	}
	got, err := e.store.Trx(ctx, scope(40, "r"))
	must(t, err)
	sameAnswer(t, trx, got)
	for cur, want := range map[string]coffer.Amount{"gold": 0, "silver": 0, "credits": 100} {
		if b := e.balance(40, cur); b.Total != want {
			t.Fatalf("%s = %+v, want %d", cur, b, want)
		}
	}
}

// TestRefundOfAnOrderInMoreLotsThanOneWriteMoves: a player who exchanges
// a purchase a coin at a time into two currencies that can be paid holds
// its coins in 1 + 2·LotsMax lots, more than TrxOpsMax; the chargeback
// still takes them all back, in one trx that is stored, read back and
// audited like any other. What it checks is the size of one trx, not its
// speed: its store gives each call a minute, so that a busy machine, where
// the 2 001-lot refund takes some seconds, cannot fail it (it took 2.2 s
// at a load of 2 on two cores, past the default 5 s at a load of 8).
func TestRefundOfAnOrderInMoreLotsThanOneWriteMoves(t *testing.T) {
	e := newEnv(t)
	e.store = postgres.New(e.router, e.catalog, postgres.Options{Timeout: time.Minute})
	e.mustChange(43, "buy", paid("gold", 3000, "o-many"))
	// Sent by 8 callers at once, so that the batches are large and the
	// test quick.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2*coffer.LotsMax; i += 8 {
				to := []string{"silver", "gems"}[i%2]
				if _, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(43, fmt.Sprint("ex-", i)), From: "gold", To: to, Amount: 1}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	req := refundOf(43, "cb", "o-many")
	req.Kind = coffer.RefundChargeback
	trx := e.mustRefund(req)
	if len(trx.Ops) != 1+2*coffer.LotsMax || trx.Refund.Shortfall != nil {
		t.Fatalf("the chargeback took %d lots, shortfall %+v; want %d lots and none", len(trx.Ops), trx.Refund.Shortfall, 1+2*coffer.LotsMax)
	}
	got, err := e.store.Trx(ctx, scope(43, "cb"))
	must(t, err)
	sameAnswer(t, trx, got)
	for _, cur := range []string{"gold", "silver", "gems"} {
		if b := e.balance(43, cur); b.Total != 0 {
			t.Fatalf("%s = %+v after the chargeback, want 0", cur, b)
		}
	}
}

// TestAuditFindsRefundDamageAfterAnExchange: a refund that followed an
// exchange is checked with what its exchanged coins counted for: clean
// as written, and a damaged count is reported.
func TestAuditFindsRefundDamageAfterAnExchange(t *testing.T) {
	e := newEnv(t)
	e.mustChange(41, "buy", paid("gold", 100, "o-e"))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(41, "ex"), From: "gold", To: "silver", Amount: 100})
	must(t, err)
	e.mustRefund(refundOf(41, "r", "o-e"))
	e.auditClean()
	e.auditFinds(41, "refund differs from its order",
		`UPDATE trx_%d SET refund = jsonb_set(refund, '{exchanged}', '[{"currency": 1, "amount": 99}]') WHERE refund IS NOT NULL`)
}

// TestRefundDebtOfAnExchangedLotMovesNowhere: two exchanges make two gems
// lots of one gold order, each reserved by a hold. The refund claws 3 free
// gold back and counts 7 short: the first lot owes 50 gems (5 gold), the
// second 20 (2 gold). The first hold's commit spends its lot's debt; it
// does not move to the second lot (as it would between the order's own
// lots), so the second hold's rollback takes back 20 gems, not 50: the
// lots, as stored, know an exchange made them.
func TestRefundDebtOfAnExchangedLotMovesNowhere(t *testing.T) {
	e := newEnv(t)
	const p = 70
	e.mustChange(p, "buy", paid("gold", 10, "o-70"))
	for _, key := range []string{"ex-1", "ex-2"} {
		_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(p, key), From: "gold", To: "gems", Amount: 5})
		must(t, err)
	}
	e.mustChange(p, "reward", free("gold", 3))
	for _, key := range []string{"hold-1", "hold-2"} {
		_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, key), Ops: []coffer.OpRequest{free("gems", -50)}, Hold: true})
		must(t, err)
	}
	trx := e.mustRefund(refundOf(p, "r", "o-70"))
	if got := taken(t, trx); got != "[gold free 3]" || fmt.Sprint(trx.Refund.Shortfall) != "[{gold 7 349}]" {
		t.Fatalf("took %q, shortfall %+v", got, trx.Refund.Shortfall)
	}
	_, _, err := e.store.Commit(ctx, byItsClient(p, "hold-1"))
	must(t, err)
	rb, _, err := e.store.Rollback(ctx, byItsClient(p, "hold-2"))
	must(t, err)
	if last := rb.Ops[len(rb.Ops)-1]; last.Amount != -20 || last.Cause != coffer.CauseRefundHeld {
		t.Fatalf("the rollback's last op %+v: want 20 gems to the refund", last)
	}
	if b := e.balance(p, "gems"); b.Total != 30 {
		t.Fatalf("gems after the rollback: %+v, want 30", b)
	}
}
