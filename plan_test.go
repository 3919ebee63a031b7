package coffer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The plans are tested as what they write and answer, rendered as text: a
// step per line, "error <code>" for a refused request, "replay <id>" for
// a replay, and otherwise each trx row ("trx <id> <kind> <status> v<version>
// @<pos>"), each op below it ("<kind> <currency> <amount> lot <id> =
// <balance_after>/<paid_after> @<pos>", then "<fiat> <value>" for an op
// that moved value, and "(exchange)" for the ops an exchange carries paid
// value by) and a hold's finish.

// planT0 is the time of the first write of a test's player.
var planT0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time {
	t := planT0.Add(d)
	return &t
}

// testPlayer is a player at version 3, position 10, whose next write is at
// planT0, whose new ids count from 100.
func testPlayer(t *testing.T, c *Catalog, lots []BookLot, trx ...*StoredTrx) *Player {
	t.Helper()
	return testBuyer(t, c, lots, nil, trx...)
}

// testBuyer is testPlayer with the orders it was credited (a refund
// follows them).
func testBuyer(t *testing.T, c *Catalog, lots []BookLot, orders []*OrderState, trx ...*StoredTrx) *Player {
	t.Helper()
	next := int64(99)
	st := PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0, Trx: trx, Orders: orders}
	for i := range lots {
		l := lots[i]
		st.Lots = append(st.Lots, &l)
	}
	p, err := NewPlayer(c, st, draw(&next, 5000))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// render is a plan as the tests read it.
func render(c *Catalog, p Plan) string {
	var b strings.Builder
	if p.Err != nil {
		fmt.Fprintf(&b, "error %s", ErrorCode(p.Err))
		if !p.Writes() {
			return b.String()
		}
		b.WriteString(", writing:")
	}
	if p.Replay {
		return fmt.Sprintf("replay %d", p.Trx.ID)
	}
	// Rows in the player's order: a trx row, or a hold's finish, with its
	// ops.
	type entry struct {
		pos  int64
		text string
	}
	var entries []entry
	ops := func(trxID int64) (string, int64) {
		var out strings.Builder
		first := int64(-1)
		for _, o := range p.Ops {
			if o.TrxID == trxID {
				fmt.Fprintf(&out, "\n  %s %s %d lot %d = %d/%d @%d", o.Kind, c.CurrencyOf(o.Currency).Code, o.Amount, o.LotID,
					o.BalanceAfter, o.PaidAfter, o.Pos)
				if o.Fiat != "" {
					fmt.Fprintf(&out, " %s %d", o.Fiat, o.Value)
				}
				if o.Cause == CauseExchange || o.Cause == CauseRefundHeld {
					fmt.Fprintf(&out, " (%s)", o.Cause)
				}
				if first < 0 {
					first = o.Pos
				}
			}
		}
		return out.String(), first
	}
	for _, r := range p.Inserts {
		text, _ := ops(r.ID)
		entries = append(entries, entry{r.Pos, fmt.Sprintf("trx %d %s %s v%d @%d", r.ID, r.Kind, r.Status, r.Version, r.Pos) + text})
	}
	if f := p.Finish; f != nil {
		text, first := ops(f.ID)
		entries = append(entries, entry{first, fmt.Sprintf("finish %d %s v%d (begin v%d) by %d", f.ID, f.Status, f.Version, f.BeginVersion, f.By) + text})
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return cmp.Compare(a.pos, b.pos) })
	for _, e := range entries {
		b.WriteString("\n" + e.text)
	}
	return strings.TrimPrefix(b.String(), "\n")
}

// step is one request of a scenario and what its plan must render.
type step struct {
	plan func(p *Player) Plan
	want string
}

func runSteps(t *testing.T, c *Catalog, p *Player, steps []step) {
	t.Helper()
	for i, s := range steps {
		if got := render(c, s.plan(p)); got != s.want {
			t.Fatalf("step %d:\n%s\nwant\n%s", i, got, s.want)
		}
	}
}

func changeOf(t *testing.T, c *Catalog, key string, hold bool, ops ...OpRequest) func(*Player) Plan {
	t.Helper()
	v, err := c.ValidateChange(ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: key},
		Ops: ops, Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	return func(p *Player) Plan { return p.Change(v) }
}

func exchangeOf(t *testing.T, c *Catalog, key, from, to string, amount Amount) func(*Player) Plan {
	t.Helper()
	v, err := c.ValidateExchange(ExchangeRequest{Scope: Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: key},
		From: from, To: to, Amount: amount})
	if err != nil {
		t.Fatal(err)
	}
	return func(p *Player) Plan { return p.Exchange(v) }
}

func key(k string) TrxKey { return TrxKey{7, k} }

func freeOp(cur string, amount Amount) OpRequest { return OpRequest{Currency: cur, Amount: amount} }

func paidOp(cur string, amount Amount) OpRequest {
	return OpRequest{Currency: cur, Amount: amount, Kind: "paid", Purchase: &Purchase{Store: "steam", OrderID: "o", Price: 1, Fiat: "USD"}}
}

// TestPlanChange: the rules of a one-phase change, each a scenario on a
// player with a few lots.
func TestPlanChange(t *testing.T) {
	c := requestCatalog(t)
	live := []BookLot{
		{ID: 1, Currency: 1, Amount: 10, CreatedAt: planT0.Add(-3 * time.Hour)},
		{ID: 2, Currency: 1, Paid: true, Amount: 5, CreatedAt: planT0.Add(-2 * time.Hour)},
		{ID: 3, Currency: 1, Amount: 7, ExpiresAt: at(time.Hour), Priority: 2, CreatedAt: planT0.Add(-time.Hour)},
	}
	expiring := OpRequest{Currency: "gold", Amount: 4, ExpiresAt: at(time.Hour), Priority: 2}
	for _, sc := range []struct {
		name  string
		lots  []BookLot
		steps func(t *testing.T) []step
	}{
		{"a free grant joins the free lot of its expiry and priority", live, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", 3)), "trx 100 change committed v4 @11\n  grant gold 3 lot 1 = 25/5 @12"},
				{changeOf(t, c, "b", false, expiring), "trx 101 change committed v5 @13\n  grant gold 4 lot 3 = 29/5 @14"},
			}
		}},
		// A store loads only lots with coins or a reservation: were a grant
		// to join a lot an earlier write of its batch spent to nothing, it
		// would get another answer than alone.
		{"a free grant does not join a free lot spent to nothing", live, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", -17)), "trx 100 change committed v4 @11\n  consume gold -7 lot 3 = 15/5 @12\n  consume gold -10 lot 1 = 5/5 @13"},
				{changeOf(t, c, "b", false, freeOp("gold", 3)), "trx 101 change committed v5 @14\n  grant gold 3 lot 102 = 8/5 @15"},
			}
		}},
		{"a grant of another priority or expiry, or a paid one, is a lot of its own", live, func(t *testing.T) []step {
			later := expiring
			later.ExpiresAt = at(2 * time.Hour)
			return []step{
				{changeOf(t, c, "a", false, OpRequest{Currency: "gold", Amount: 1, Priority: 1}), "trx 100 change committed v4 @11\n  grant gold 1 lot 101 = 23/5 @12"},
				{changeOf(t, c, "b", false, later), "trx 102 change committed v5 @13\n  grant gold 4 lot 103 = 27/5 @14"},
				{changeOf(t, c, "c", false, paidOp("gold", 2)), "trx 104 change committed v6 @15\n  grant gold 2 lot 105 = 29/7 @16 USD 1"},
				// A second paid grant does not join the first.
				{changeOf(t, c, "d", false, paidOp("gold", 2)), "trx 106 change committed v7 @17\n  grant gold 2 lot 107 = 31/9 @18 USD 1"},
			}
		}},
		{"a consume takes lots in spend order: priority, soonest-expiring, free, paid", live, func(t *testing.T) []step {
			return []step{{changeOf(t, c, "a", false, freeOp("gold", -20)),
				"trx 100 change committed v4 @11\n  consume gold -7 lot 3 = 15/5 @12\n  consume gold -10 lot 1 = 5/5 @13\n  consume gold -3 lot 2 = 2/2 @14"}}
		}},
		{"a refused change changes nothing, even the ops it planned first", live, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", 100), freeOp("silver", -1)), "error insufficient_funds"},
				{changeOf(t, c, "b", false, freeOp("gold", -23)), "error insufficient_funds"},
				{changeOf(t, c, "c", false, freeOp("gold", -22)),
					"trx 102 change committed v4 @11\n  consume gold -7 lot 3 = 15/5 @12\n  consume gold -10 lot 1 = 5/5 @13\n  consume gold -5 lot 2 = 0/0 @14"},
			}
		}},
		{"a known key: the same payload replays the first answer, another is a conflict; a refused key is free", live, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", 1)), "trx 100 change committed v4 @11\n  grant gold 1 lot 1 = 23/5 @12"},
				{changeOf(t, c, "a", false, freeOp("gold", 1)), "replay 100"},
				{changeOf(t, c, "a", false, freeOp("gold", 2)), "error idempotency_conflict"},
				{changeOf(t, c, "b", false, freeOp("silver", -1)), "error insufficient_funds"},
				{changeOf(t, c, "b", false, freeOp("silver", 1)), "trx 102 change committed v5 @13\n  grant silver 1 lot 103 = 1/0 @14"},
			}
		}},
		{"due expiries of the write's currencies are recorded first, in a trx of their own; others wait", []BookLot{
			{ID: 1, Currency: 1, Amount: 10, ExpiresAt: at(-time.Minute)},
			{ID: 2, Currency: 1, Amount: 3, ExpiresAt: at(-2 * time.Minute)},
			{ID: 3, Currency: 1, Amount: 6},
			{ID: 4, Currency: 2, Amount: 9, ExpiresAt: at(-time.Minute)},
		}, func(t *testing.T) []step {
			return []step{
				// A grant whose expiry has passed is refused, with
				// nothing recorded.
				{changeOf(t, c, "z", false, OpRequest{Currency: "gold", Amount: 1, ExpiresAt: at(0)}), "error invalid_argument"},
				{changeOf(t, c, "a", false, OpRequest{Currency: "gold", Amount: 1, ExpiresAt: at(-time.Minute + time.Hour)}),
					"trx 102 expire committed v4 @11\n  expire gold -3 lot 2 = 16/0 @12\n  expire gold -10 lot 1 = 6/0 @13\n" +
						"trx 100 change committed v4 @14\n  grant gold 1 lot 101 = 7/0 @15"},
				{func(p *Player) Plan { return p.ExpireLots() }, "trx 103 expire committed v5 @16\n  expire silver -9 lot 4 = 0/0 @17"},
				{func(p *Player) Plan { return p.ExpireLots() }, ""},
			}
		}},
		{"a grant past BalanceMax, counting what holds reserve, is refused", []BookLot{
			{ID: 1, Currency: 1, Amount: BalanceMax - 10, Reserved: 5},
		}, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", 6)), "error invalid_argument"},
				{changeOf(t, c, "b", false, freeOp("gold", 5)), fmt.Sprintf("trx 101 change committed v4 @11\n  grant gold 5 lot 1 = %d/0 @12", BalanceMax-5)},
			}
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			runSteps(t, c, testPlayer(t, c, sc.lots), sc.steps(t))
		})
	}
}

// TestPlanTimesNeverGoBack: a player's next write takes the database's
// time, or a microsecond after the player's last write when that clock
// is not past it (a failed-over server's clock behind the old one's).
func TestPlanTimesNeverGoBack(t *testing.T) {
	c := requestCatalog(t)
	for name, tc := range map[string]struct{ last, want time.Time }{
		"a new player":                    {time.Time{}, planT0},
		"the clock past the last write":   {planT0.Add(-time.Second), planT0},
		"the clock at the last write":     {planT0, planT0.Add(time.Microsecond)},
		"the clock behind the last write": {planT0.Add(time.Second), planT0.Add(time.Second + time.Microsecond)},
	} {
		t.Run(name, func(t *testing.T) {
			id := int64(99)
			p, err := NewPlayer(c, PlayerState{Namespace: 1, PlayerID: 42, At: planT0, LastWrite: tc.last}, draw(&id, 10))
			if err != nil {
				t.Fatal(err)
			}
			plan := changeOf(t, c, "a", false, freeOp("gold", 1))(p)
			if plan.Err != nil || !plan.Trx.CreatedAt.Equal(tc.want) {
				t.Fatalf("write at %v (%v), want %v", plan.Trx.CreatedAt, plan.Err, tc.want)
			}
		})
	}
}

// TestPlanShortOfIDs: a write whose player lacks the new ids it takes is
// taken back whole and asks for those it lacked; given them, it plans as
// it would have with enough from the start, and a write refused for its
// own reasons answers so whatever its ids.
func TestPlanShortOfIDs(t *testing.T) {
	c := requestCatalog(t)
	ops := []OpRequest{paidOp("gold", 1), paidOp("silver", 2), freeOp("credits", 3)}
	next := int64(99)
	enough, err := NewPlayer(c, PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0}, draw(&next, 5))
	if err != nil {
		t.Fatal(err)
	}
	want := render(c, changeOf(t, c, "a", false, ops...)(enough))
	next = 99
	p, err := NewPlayer(c, PlayerState{Namespace: 1, PlayerID: 42, Version: 3, Pos: 10, At: planT0}, draw(&next, 1))
	if err != nil {
		t.Fatal(err)
	}
	short := changeOf(t, c, "a", false, ops...)(p)
	if short.IDsShort != 3 || short.Writes() || short.Err != nil {
		t.Fatalf("a write short of 3 ids: %+v", short)
	}
	if v, pos, _, wrote := p.Written(); wrote || v != 3 || pos != 10 || len(p.Lots()) != 0 {
		t.Fatalf("the short write was kept: v%d pos %d wrote %v, %d lots", v, pos, wrote, len(p.Lots()))
	}
	p.GiveIDs(draw(&next, short.IDsShort))
	if got := render(c, changeOf(t, c, "a", false, ops...)(p)); got != want {
		t.Fatalf("planned again:\n%s\nwant\n%s", got, want)
	}
	if refused := changeOf(t, c, "b", false, paidOp("gold", 1), freeOp("silver", -9))(p); ErrorCode(refused.Err) != CodeInsufficientFunds {
		t.Fatalf("a write refused for funds, without ids: %+v", refused)
	}
}

// TestPlanWritesInOrder: each accepted write of a player takes the next
// version, a time a microsecond after the last and the next positions;
// the player's row and lots are what the last write leaves.
func TestPlanWritesInOrder(t *testing.T) {
	c := requestCatalog(t)
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 1, Amount: 10}})
	a := changeOf(t, c, "a", false, freeOp("gold", -4))(p)
	changeOf(t, c, "b", false, freeOp("gold", -40))(p)
	b := changeOf(t, c, "c", false, freeOp("gold", 2), freeOp("silver", 1))(p)
	if !a.Trx.CreatedAt.Equal(planT0) || !b.Trx.CreatedAt.Equal(planT0.Add(time.Microsecond)) || a.Trx.Version != 4 || b.Trx.Version != 5 {
		t.Fatalf("times and versions: %v v%d, %v v%d", a.Trx.CreatedAt, a.Trx.Version, b.Trx.CreatedAt, b.Trx.Version)
	}
	version, pos, last, ok := p.Written()
	if !ok || version != 5 || pos != 15 || !last.Equal(planT0.Add(time.Microsecond)) {
		t.Fatalf("player row: v%d @%d %v %v", version, pos, last, ok)
	}
	var lots []string
	for _, l := range p.Lots() {
		lots = append(lots, fmt.Sprintf("%d:%d new=%v changed=%v trx=%d", l.ID, l.Amount, l.New, l.Changed, l.TrxID))
	}
	if got := strings.Join(lots, " "); got != "1:8 new=false changed=true trx=0 103:1 new=true changed=true trx=102" {
		t.Fatalf("lots: %s", got)
	}
	if b.Trx.Balances[0].Total != 8 || b.Trx.Balances[1].Total != 1 {
		t.Fatalf("balances after: %+v", b.Trx.Balances)
	}
	if _, _, _, ok := testPlayer(t, c, nil).Written(); ok {
		t.Fatal("a player without writes has a row to write")
	}
}

// TestPlanHold: a hold's begin reserves what its consumes take and keeps
// its grants pending; a commit settles and grants, a rollback returns
// each reservation to its very lot; the second of two requests with one
// key in a batch sees the first.
func TestPlanHold(t *testing.T) {
	c := requestCatalog(t)
	lots := []BookLot{{ID: 1, Currency: 1, Amount: 10}, {ID: 2, Currency: 1, Paid: true, Amount: 5}}
	t.Run("commit", func(t *testing.T) {
		p := testPlayer(t, c, lots)
		runSteps(t, c, p, []step{
			{changeOf(t, c, "h", true, freeOp("gold", -12), freeOp("silver", 3)),
				"trx 100 hold pending v4 @11\n  consume gold -10 lot 1 = 5/5 @12\n  consume gold -2 lot 2 = 3/3 @13"},
			{changeOf(t, c, "h", true, freeOp("gold", -12), freeOp("silver", 3)), "replay 100"},
			{func(p *Player) Plan { return p.Rollback(key("nope"), 7) }, "error not_found"},
			{func(p *Player) Plan { return p.Commit(key("h"), 7) }, "finish 100 committed v5 (begin v4) by 7\n  grant silver 3 lot 101 = 3/0 @14"},
			{func(p *Player) Plan { return p.Commit(key("h"), 7) }, "replay 100"},
			{func(p *Player) Plan { return p.Rollback(key("h"), 7) }, "error hold_not_pending"},
		})
		for _, l := range p.Lots() {
			if l.Reserved != 0 {
				t.Fatalf("lot %d still reserves %d after the commit", l.ID, l.Reserved)
			}
		}
	})
	t.Run("rollback", func(t *testing.T) {
		p := testPlayer(t, c, lots)
		begin := changeOf(t, c, "h", true, freeOp("gold", -12))(p)
		if begin.Trx.Status != StatusPending || begin.Trx.HoldExpiresAt == nil || !begin.Trx.HoldExpiresAt.Equal(planT0.Add(10*time.Minute)) {
			t.Fatalf("begin: %+v", begin.Trx)
		}
		runSteps(t, c, p, []step{
			{changeOf(t, c, "x", false, freeOp("gold", -4)), "error insufficient_funds"},
			{func(p *Player) Plan { return p.Rollback(key("h"), 7) },
				"finish 100 rolled_back v5 (begin v4) by 7\n  grant gold 10 lot 1 = 13/3 @14\n  grant gold 2 lot 2 = 15/5 @15"},
			{func(p *Player) Plan { return p.Rollback(key("h"), 7) }, "replay 100"},
			{func(p *Player) Plan { return p.Commit(key("h"), 7) }, "error hold_not_pending"},
			{changeOf(t, c, "y", false, freeOp("gold", -15)), "trx 102 change committed v6 @16\n  consume gold -10 lot 1 = 5/5 @17\n  consume gold -5 lot 2 = 0/0 @18"},
		})
	})
}

// TestPlanHoldBeginReplayedAfterItsEnd: a hold's begin sent again after
// the hold's commit, rollback or expiry answers what the begin first
// answered, byte for byte (a replay's promise), not the hold as it is
// now: in the batch that finished the hold, and read back from a store.
func TestPlanHoldBeginReplayedAfterItsEnd(t *testing.T) {
	c := batchCatalog(t)
	w := writeMaker{t, c}
	seed := w.change("seed", false, 0, freeOp("gold", 10), paidOp("gold", 5))
	begin := w.change("h", true, time.Minute, freeOp("gold", -12), freeOp("silver", 3))
	for _, end := range []struct {
		name   string
		after  time.Duration
		finish modelWrite
	}{
		{"commit", 0, w.finish("commit", "h")},
		{"rollback", 0, w.finish("rollback", "h")},
		{"expiry", 2 * time.Minute, w.finish("expire-hold", "h")},
		{"commit past the TTL", 2 * time.Minute, w.finish("commit", "h")},
	} {
		for _, run := range []struct {
			name string
			do   func(*testing.T, *storeModel, *int64, []modelWrite) []string
		}{{"alone", alone}, {"in a batch", batched}} {
			m := &storeModel{c: c, clock: planT0, version: 3, pos: 10, updated: planT0.Add(-time.Hour)}
			next := int64(99)
			alone(t, m, &next, []modelWrite{seed})
			m.clock = m.clock.Add(time.Second)
			_, first, _ := strings.Cut(alone(t, m, &next, []modelWrite{begin})[0], "\nanswer ")
			m.clock = m.clock.Add(time.Second + end.after)
			head, got, _ := strings.Cut(run.do(t, m, &next, []modelWrite{end.finish, begin})[1], "\nanswer ")
			if !strings.HasPrefix(head, "replay ") || got != first {
				t.Errorf("begin sent again after its %s, %s:\n%s\n%s\nwant the first answer\n%s", end.name, run.name, head, got, first)
			}
		}
	}
}

// TestPlanHoldStates: what a commit, a rollback and the sweeper do to a
// stored hold in each state, and to a trx that is not a hold.
func TestPlanHoldStates(t *testing.T) {
	c := requestCatalog(t)
	hold := func(status TrxStatus, expiresIn time.Duration) *StoredTrx {
		return &StoredTrx{Trx: Trx{ID: 9, IdempotencyKey: "h", Emitter: 7, Kind: TrxHold, Status: status, HoldExpiresAt: at(expiresIn), Version: 2,
			Ops: []Op{{Currency: "gold", Amount: -4, Kind: OpConsume, LotID: 1}}}}
	}
	reserved := []BookLot{{ID: 1, Currency: 1, Amount: 6, Reserved: 4}}
	for _, sc := range []struct {
		name                    string
		trx                     *StoredTrx
		commit, rollback, sweep string
	}{
		{"pending", hold(StatusPending, time.Minute),
			"finish 9 committed v4 (begin v2) by 9", "finish 9 rolled_back v4 (begin v2) by 9\n  grant gold 4 lot 1 = 10/0 @11", "replay 9"},
		{"pending past its TTL", hold(StatusPending, -time.Minute),
			"error hold_expired, writing:\nfinish 9 expired v4 (begin v2) by 9\n  grant gold 4 lot 1 = 10/0 @11",
			"finish 9 expired v4 (begin v2) by 9\n  grant gold 4 lot 1 = 10/0 @11", "finish 9 expired v4 (begin v2) by 0\n  grant gold 4 lot 1 = 10/0 @11"},
		{"committed", hold(StatusCommitted, time.Minute), "replay 9", "error hold_not_pending", "replay 9"},
		{"rolled back", hold(StatusRolledBack, time.Minute), "error hold_not_pending", "replay 9", "replay 9"},
		{"expired", hold(StatusExpired, -time.Minute), "error hold_expired", "replay 9", "replay 9"},
		{"a change", &StoredTrx{Trx: Trx{ID: 9, IdempotencyKey: "h", Emitter: 7, Kind: TrxChange, Status: StatusCommitted}},
			"error hold_not_pending", "error hold_not_pending", "error hold_not_pending"},
	} {
		for _, action := range []struct {
			name string
			do   func(*Player, TrxKey) Plan
			want string
		}{ // client 7's hold, finished by a support agent's client (9), or by coffer's sweeper
			{"commit", func(p *Player, k TrxKey) Plan { return p.Commit(k, 9) }, sc.commit},
			{"rollback", func(p *Player, k TrxKey) Plan { return p.Rollback(k, 9) }, sc.rollback},
			{"sweep", (*Player).ExpireHold, sc.sweep}} {
			lots := reserved
			if sc.trx.Status != StatusPending {
				lots = []BookLot{{ID: 1, Currency: 1, Amount: 6}}
			}
			p := testPlayer(t, c, lots, sc.trx)
			if got := render(c, action.do(p, key("h"))); got != action.want {
				t.Errorf("%s of %s:\n%s\nwant\n%s", action.name, sc.name, got, action.want)
			}
		}
	}
}

// TestPlanHoldFinishedBy: a hold finished by a support agent's client
// names it in the answer and in the row; a replay, also by the hold's own
// client, names the agent still; the begin sent again answers as it did,
// naming no finisher.
func TestPlanHoldFinishedBy(t *testing.T) {
	c := requestCatalog(t)
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 1, Amount: 10}})
	begin := changeOf(t, c, "h", true, freeOp("gold", -4))
	first := begin(p)
	back := p.Rollback(key("h"), 9)
	if back.Trx.FinishedBy != 9 || back.Finish == nil || back.Finish.By != 9 {
		t.Fatalf("the agent's rollback: answer by %d, finish %+v", back.Trx.FinishedBy, back.Finish)
	}
	if again := p.Rollback(key("h"), 7); !again.Replay || again.Trx.FinishedBy != 9 {
		t.Fatalf("the game's rollback after the agent's: replay %v, by %d", again.Replay, again.Trx.FinishedBy)
	}
	if b := begin(p); !b.Replay || b.Trx.FinishedBy != 0 || b.Trx.Status != first.Trx.Status {
		t.Fatalf("the begin sent again: replay %v, by %d, %s", b.Replay, b.Trx.FinishedBy, b.Trx.Status)
	}
}

// TestPlanHoldCommitOntoExpiredLot: a hold's grant onto a lot whose
// expiry passed, and a reservation returned to one, expire at once, in a
// trx after the hold's ops.
func TestPlanHoldCommitOntoExpiredLot(t *testing.T) {
	c := requestCatalog(t)
	h := &StoredTrx{Trx: Trx{ID: 9, IdempotencyKey: "h", Emitter: 7, Kind: TrxHold, Status: StatusPending, HoldExpiresAt: at(time.Minute), Version: 2,
		Ops: []Op{{Currency: "gold", Amount: -4, Kind: OpConsume, LotID: 1}}}}
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 1, Amount: 0, Reserved: 4, ExpiresAt: at(-time.Second)}}, h)
	want := "finish 9 rolled_back v4 (begin v2) by 7\n  grant gold 4 lot 1 = 4/0 @11\ntrx 100 expire committed v4 @12\n  expire gold -4 lot 1 = 0/0 @13"
	if got := render(c, p.Rollback(key("h"), 7)); got != want {
		t.Fatalf("rollback onto an expired lot:\n%s\nwant\n%s", got, want)
	}
}

// TestPlanExchange: the paid share of what is consumed carries over into
// a currency that can be paid; into one that cannot, it is all free, and
// the consume is revenue (cause change); an exchange that yields nothing
// is refused.
func TestPlanExchange(t *testing.T) {
	c := requestCatalog(t)
	if err := c.AddRate(1, "silver", "credits", Rate{Num: 1, Den: 10}); err != nil {
		t.Fatal(err)
	}
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 1, Amount: 2}, {ID: 2, Currency: 1, Paid: true, Amount: 3},
		{ID: 3, Currency: 2, Paid: true, Amount: 19}})
	runSteps(t, c, p, []step{
		{exchangeOf(t, c, "x", "gold", "silver", 3),
			"trx 100 exchange committed v4 @11\n  consume gold -2 lot 1 = 3/3 @12 (exchange)\n  consume gold -1 lot 2 = 2/2 @13 (exchange)\n" +
				"  grant silver 100 lot 101 = 119/119 @14 (exchange)\n  grant silver 200 lot 102 = 319/119 @15 (exchange)"},
		{exchangeOf(t, c, "z", "gold", "silver", 3), "error insufficient_funds"},
	})
	y := exchangeOf(t, c, "w", "silver", "credits", 19)(p)
	if y.Err != nil || y.Ops[0].Cause != CauseChange || y.Ops[len(y.Ops)-1].Paid {
		t.Fatalf("exchange into a free-only currency: %+v", y)
	}
}

// purchased is a paid lot of a purchase: amount coins that cost value.
func purchased(id int64, cur CurrencyID, amount, value Amount, order string) BookLot {
	return BookLot{ID: id, Currency: cur, Paid: true, Amount: amount, CreatedAt: planT0.Add(-time.Duration(100-id) * time.Minute),
		Worth: Worth{Store: "steam", OrderID: order, Fiat: "USD", Value: value}}
}

// TestPlanValue: the value of a lot follows its coins through every
// movement (ValueShare): consumes take their share and the last coin the
// rest, an expiry takes what is left, a hold reserves a share that its
// rollback returns and its commit settles.
func TestPlanValue(t *testing.T) {
	c := requestCatalog(t)
	three := []BookLot{purchased(1, 1, 3, 100, "o")}
	for _, sc := range []struct {
		name  string
		lots  []BookLot
		steps func(t *testing.T) []step
		// lot is the lot's value and reserved value after the steps.
		lot string
	}{
		{"1-coin consumes of 3 coins that cost 100: 33, 33 and the last coin the remainder, 34", three, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", -1)), "trx 100 change committed v4 @11\n  consume gold -1 lot 1 = 2/2 @12 USD -33"},
				{changeOf(t, c, "b", false, freeOp("gold", -1)), "trx 101 change committed v5 @13\n  consume gold -1 lot 1 = 1/1 @14 USD -33"},
				{changeOf(t, c, "c", false, freeOp("gold", -1)), "trx 102 change committed v6 @15\n  consume gold -1 lot 1 = 0/0 @16 USD -34"},
			}
		}, "0/0"},
		{"a share rounds to the nearest unit, a half down", []BookLot{purchased(1, 1, 3, 200, "o")}, func(t *testing.T) []step {
			return []step{
				// 200/3 = 66.7 → 67; then 133/2 = 66.5 → 66; the last 67.
				{changeOf(t, c, "a", false, freeOp("gold", -1)), "trx 100 change committed v4 @11\n  consume gold -1 lot 1 = 2/2 @12 USD -67"},
				{changeOf(t, c, "b", false, freeOp("gold", -1)), "trx 101 change committed v5 @13\n  consume gold -1 lot 1 = 1/1 @14 USD -66"},
			}
		}, "67/0"},
		{"a purchase's grant is worth its price", nil, func(t *testing.T) []step {
			return []step{{changeOf(t, c, "a", false, OpRequest{Currency: "gold", Amount: 500, Kind: "paid",
				Purchase: &Purchase{Store: "steam", OrderID: "7731", Price: 499, Fiat: "EUR"}}),
				"trx 100 change committed v4 @11\n  grant gold 500 lot 101 = 500/500 @12 EUR 499"}}
		}, "499/0"},
		{"an expiry after a partial spend takes what is left of the value", []BookLot{func() BookLot {
			l := purchased(1, 1, 3, 100, "o")
			l.ExpiresAt = at(time.Microsecond)
			return l
		}()}, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "a", false, freeOp("gold", -1)), "trx 100 change committed v4 @11\n  consume gold -1 lot 1 = 2/2 @12 USD -33"},
				{func(p *Player) Plan { return p.ExpireLots() }, "trx 101 expire committed v5 @13\n  expire gold -2 lot 1 = 0/0 @14 USD -67"},
			}
		}, "0/0"},
		{"a hold reserves a share; its rollback returns it to the lot", three, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "h", true, freeOp("gold", -1)), "trx 100 hold pending v4 @11\n  consume gold -1 lot 1 = 2/2 @12 USD -33"},
				{func(p *Player) Plan { return p.Rollback(key("h"), 7) }, "finish 100 rolled_back v5 (begin v4) by 7\n  grant gold 1 lot 1 = 3/3 @13 USD 33"},
				{changeOf(t, c, "a", false, freeOp("gold", -3)), "trx 101 change committed v6 @14\n  consume gold -3 lot 1 = 0/0 @15 USD -100"},
			}
		}, "0/0"},
		{"a hold reserves a share; its commit settles it, and the rest stays on the lot", three, func(t *testing.T) []step {
			return []step{
				{changeOf(t, c, "h", true, freeOp("gold", -2)), "trx 100 hold pending v4 @11\n  consume gold -2 lot 1 = 1/1 @12 USD -67"},
				{func(p *Player) Plan { return p.Commit(key("h"), 7) }, "finish 100 committed v5 (begin v4) by 7"},
				{changeOf(t, c, "a", false, freeOp("gold", -1)), "trx 101 change committed v6 @13\n  consume gold -1 lot 1 = 0/0 @14 USD -33"},
			}
		}, "0/0"},
		{"a hold's expired reservation returns its value, which expires with it", []BookLot{func() BookLot {
			l := purchased(1, 1, 2, 100, "o")
			l.Reserved, l.ValueReserved, l.ExpiresAt = 1, 50, at(-time.Second)
			return l
		}()}, func(t *testing.T) []step {
			return []step{
				{func(p *Player) Plan { return p.ExpireLots() }, "trx 100 expire committed v4 @11\n  expire gold -2 lot 1 = 0/0 @12 USD -100"},
			}
		}, "0/50"},
		{"free coins carry no value", []BookLot{{ID: 1, Currency: 1, Amount: 5}}, func(t *testing.T) []step {
			return []step{{changeOf(t, c, "a", false, freeOp("gold", -2)), "trx 100 change committed v4 @11\n  consume gold -2 lot 1 = 3/0 @12"}}
		}, ""},
	} {
		t.Run(sc.name, func(t *testing.T) {
			p := testPlayer(t, c, sc.lots)
			runSteps(t, c, p, sc.steps(t))
			var got []string
			for _, l := range p.Lots() {
				if l.Paid {
					got = append(got, fmt.Sprintf("%d/%d", l.Value, l.ValueReserved))
				}
			}
			if strings.Join(got, " ") != sc.lot {
				t.Fatalf("lot value/reserved = %v, want %s", got, sc.lot)
			}
		})
	}
}

// TestPlanExchangeValue: an exchange into a currency that can be paid
// makes one paid lot per paid lot it consumed, with that lot's share of
// the paid part, all the value it took and its store order (a refund
// follows the coins there); a paid lot whose share rounds to nothing is
// revenue. Into a currency that cannot be paid, the value taken is
// revenue: the consumes are of cause change.
func TestPlanExchangeValue(t *testing.T) {
	c := requestCatalog(t)
	if err := c.AddRate(1, "silver", "credits", Rate{Num: 1, Den: 10}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddRate(1, "silver", "gold", Rate{Num: 1, Den: 100}); err != nil {
		t.Fatal(err)
	}
	lots := []BookLot{{ID: 1, Currency: 1, Amount: 2, CreatedAt: planT0.Add(-time.Hour)},
		purchased(2, 1, 3, 100, "a"), purchased(3, 1, 4, 50, "b")}
	t.Run("into a paid currency", func(t *testing.T) {
		p := testPlayer(t, c, lots)
		runSteps(t, c, p, []step{{exchangeOf(t, c, "x", "gold", "silver", 6),
			"trx 100 exchange committed v4 @11\n" +
				"  consume gold -2 lot 1 = 7/7 @12 (exchange)\n" +
				"  consume gold -3 lot 2 = 4/4 @13 USD -100 (exchange)\n" +
				"  consume gold -1 lot 3 = 3/3 @14 USD -12 (exchange)\n" +
				"  grant silver 300 lot 101 = 300/300 @15 USD 100 (exchange)\n" +
				"  grant silver 100 lot 102 = 400/400 @16 USD 12 (exchange)\n" +
				"  grant silver 200 lot 103 = 600/400 @17 (exchange)"}})
		var got []string
		for _, l := range p.Lots() {
			got = append(got, fmt.Sprintf("%d:%d %s/%s %s %d %t", l.ID, l.Amount, l.Store, l.OrderID, l.Fiat, l.Value, l.Exchanged))
		}
		// The paid lots the exchange made are marked so; the free one is
		// not (nor are the purchases').
		want := "1:0 /  0 false 2:0 steam/a USD 0 false 3:3 steam/b USD 38 false 101:300 steam/a USD 100 true 102:100 steam/b USD 12 true 103:200 /  0 false"
		if strings.Join(got, " ") != want {
			t.Fatalf("lots:\n%s\nwant\n%s", strings.Join(got, " "), want)
		}
	})
	t.Run("a paid lot whose share rounds to nothing is revenue", func(t *testing.T) {
		// 150 paid silver at 100:1 is 1 gold: the first lot's 50 coins
		// are 0 of it, the second's 100 coins 1.
		p := testPlayer(t, c, []BookLot{purchased(1, 2, 50, 10, "a"), purchased(2, 2, 100, 20, "b")})
		runSteps(t, c, p, []step{{exchangeOf(t, c, "x", "silver", "gold", 150),
			"trx 100 exchange committed v4 @11\n" +
				"  consume silver -50 lot 1 = 100/100 @12 USD -10\n" +
				"  consume silver -100 lot 2 = 0/0 @13 USD -20 (exchange)\n" +
				"  grant gold 1 lot 101 = 1/1 @14 USD 20 (exchange)"}})
	})
	t.Run("into a currency that cannot be paid", func(t *testing.T) {
		p := testPlayer(t, c, []BookLot{purchased(1, 2, 19, 10, "a")})
		runSteps(t, c, p, []step{{exchangeOf(t, c, "x", "silver", "credits", 19),
			"trx 100 exchange committed v4 @11\n" +
				"  consume silver -19 lot 1 = 0/0 @12 USD -10\n" +
				"  grant credits 1 lot 101 = 1/0 @13 (exchange)"}})
	})
}

// TestPlanRefundValue: a refund takes back the value of what is left of
// the order's lot (refunded); what it could not take back is the
// shortfall, worth its share of what the missing coins cost: all of it
// under write_off, none of it when claw_back finds the coins, in part
// when it finds some.
func TestPlanRefundValue(t *testing.T) {
	c := refundCatalog(t)
	spent := purchased(1, 1, 2, 67, "o") // 3 coins bought for 100, one spent (33)
	order := func(cur CurrencyID) []*OrderState {
		return []*OrderState{{Key: PurchaseKey{Namespace: 1, Store: "steam", OrderID: "o"},
			Lots: []OrderLot{{LotID: 1, Currency: cur, Share: 3, ShareValue: 100}}}}
	}
	for _, sc := range []struct {
		name string
		lots []BookLot
		cur  CurrencyID
		want string
	}{
		{"write_off: the spent coin is the shortfall, with what it cost", []BookLot{func() BookLot { l := spent; l.Currency = 2; return l }()}, 2,
			"consume silver -2 lot 1 = 0/0 @12 USD -67; shortfall [{2 1 33}]"},
		{"claw_back: another lot gives the coin back, nothing is short", []BookLot{spent, purchased(2, 1, 5, 50, "p")}, 1,
			"consume gold -2 lot 1 = 5/5 @12 USD -67; consume gold -1 lot 2 = 4/4 @13 USD -10; shortfall []"},
		{"claw_back: one of three missing coins found", []BookLot{{ID: 2, Currency: 1, Amount: 1, CreatedAt: planT0.Add(-time.Hour)}}, 1,
			"consume gold -1 lot 2 = 0/0 @12; shortfall [{1 2 67}]"},
	} {
		t.Run(sc.name, func(t *testing.T) {
			p := testBuyer(t, c, sc.lots, order(sc.cur))
			plan := refundOf(t, c, "r", "o", RefundRefund)(p)
			if plan.Err != nil {
				t.Fatal(plan.Err)
			}
			var got []string
			for _, o := range plan.Ops {
				line := fmt.Sprintf("%s %s %d lot %d = %d/%d @%d", o.Kind, c.CurrencyOf(o.Currency).Code, o.Amount, o.LotID, o.BalanceAfter, o.PaidAfter, o.Pos)
				if o.Fiat != "" {
					line += fmt.Sprintf(" %s %d", o.Fiat, o.Value)
				}
				got = append(got, line)
			}
			got = append(got, fmt.Sprintf("shortfall %v", plan.Inserts[0].Refund.Shortfall))
			if strings.Join(got, "; ") != sc.want {
				t.Fatalf("\n%s\nwant\n%s", strings.Join(got, "; "), sc.want)
			}
		})
	}
}

// TestPlanExchangeWhosePaidPartRoundsToNothing: an exchange into a
// currency that can be paid whose whole paid part rounds to no coin (1
// paid silver of 100 at silver→gold 100:1) makes no paid lot, so the
// paid coins it consumed became free ones: their consume is revenue
// (cause change), as for a lot whose own share rounds to nothing
// (TestPlanExchangeValue). Were it left of cause exchange, the revenue
// report would count its value as converted out of silver with nothing
// converted into gold: value that leaves the identity deposited =
// recognised + expired + refunded + deferred, and the audit's "exchange
// makes value".
func TestPlanExchangeWhosePaidPartRoundsToNothing(t *testing.T) {
	c := requestCatalog(t)
	if err := c.AddRate(1, "silver", "gold", Rate{Num: 1, Den: 100}); err != nil {
		t.Fatal(err)
	}
	p := testPlayer(t, c, []BookLot{{ID: 1, Currency: 2, Amount: 99, CreatedAt: planT0.Add(-time.Hour)}, purchased(2, 2, 1, 10, "a")})
	plan := exchangeOf(t, c, "x", "silver", "gold", 100)(p)
	if plan.Err != nil {
		t.Fatal(plan.Err)
	}
	for _, o := range plan.Ops {
		if o.Paid && o.Cause == CauseExchange {
			t.Errorf("%s %s %d lot %d worth %s %d has the cause exchange, but the exchange made no paid lot:\n%s",
				o.Kind, c.CurrencyOf(o.Currency).Code, o.Amount, o.LotID, o.Fiat, o.Value, render(c, plan))
		}
	}
}
