package coffer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// A batch plans a player's writes one after the other on the state it
// loaded once (Player); sent alone, each write would plan on the state a
// store loads after the writes before it. The tests here hold the two
// equal: storeModel keeps a player's rows as a store writes them and
// loads them as postgres/batchsql.go does (held lots of the currencies
// asked, or all; the trx under the keys asked; the orders refunds name,
// with their exchanges; the next write a microsecond after the last, the
// clock being frozen as within one batch).

// storeModel is one player's rows in a store.
type storeModel struct {
	c            *Catalog
	clock        time.Time
	version, pos int64
	updated      time.Time
	lots         []*BookLot
	trx          []*modelTrx
	ops          []OpRow
	shuffle      *rand.Rand
}

type modelTrx struct {
	TrxRow
	finishedAt   *time.Time
	beginVersion int64
	finishedBy   Emitter
}

func (m *storeModel) clone() *storeModel {
	out := *m
	out.lots = nil
	for _, l := range m.lots {
		cp := *l
		out.lots = append(out.lots, &cp)
	}
	out.trx = nil
	for _, tr := range m.trx {
		cp := *tr
		out.trx = append(out.trx, &cp)
	}
	out.ops = slices.Clone(m.ops)
	return &out
}

// load is the player's state as the batch statements read it.
func (m *storeModel) load(t *testing.T, n Needs, next *int64) *Player {
	t.Helper()
	st := PlayerState{Namespace: 1, PlayerID: 42, Version: m.version, Pos: m.pos, At: m.clock, LastWrite: m.updated}
	for _, l := range m.lots {
		if (l.Amount > 0 || l.Reserved > 0) && (n.AllLots || slices.Contains(n.Currencies, l.Currency)) {
			cp := *l
			cp.New, cp.Changed = false, false
			st.Lots = append(st.Lots, &cp)
		}
	}
	if m.shuffle != nil {
		m.shuffle.Shuffle(len(st.Lots), func(i, j int) { st.Lots[i], st.Lots[j] = st.Lots[j], st.Lots[i] })
	}
	for _, k := range union(n.Keys, n.Own) {
		for _, tr := range m.trx {
			if tr.Emitter == k.Emitter && tr.IdempotencyKey == k.IdempotencyKey {
				st.Trx = append(st.Trx, m.stored(tr))
			}
		}
	}
	for _, k := range n.Orders {
		st.Orders = append(st.Orders, m.order(k))
	}
	p, err := NewPlayer(m.c, st, draw(next, n.IDs))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stored is a trx as scanTrx rebuilds it from its row and op rows.
func (m *storeModel) stored(tr *modelTrx) *StoredTrx {
	var rows []OpRow
	for _, o := range m.ops {
		if o.TrxID == tr.ID {
			rows = append(rows, o)
		}
	}
	slices.SortFunc(rows, func(a, b OpRow) int { return cmp.Compare(a.Seq, b.Seq) })
	end := tr.CreatedAt
	if tr.finishedAt != nil {
		end = *tr.finishedAt
	}
	all := make([]BookOp, 0, len(rows))
	var last, begun []BookOp
	for _, o := range rows {
		b := o.BookOp
		if b.Fiat == "" {
			b.Value = 0
		}
		if b.Purchase != nil {
			cp := *b.Purchase
			b.Purchase = &cp
		}
		all = append(all, b)
		if o.CreatedAt.Equal(end) {
			last = append(last, b)
		} else {
			begun = append(begun, b)
		}
	}
	var meta json.RawMessage
	if len(tr.Meta) > 0 {
		meta = slices.Clone(tr.Meta)
	}
	st := &StoredTrx{Trx: Trx{ID: tr.ID, IdempotencyKey: tr.IdempotencyKey, Emitter: tr.Emitter, Kind: tr.Kind, Status: tr.Status, Reason: tr.Reason, Meta: meta,
		Ops: m.c.Ops(all), CreatedAt: tr.CreatedAt.UTC(), HoldExpiresAt: tr.HoldExpiresAt, Refund: m.c.Refund(tr.Refund), FinishedBy: tr.finishedBy,
		Version: tr.Version, Balances: m.c.BalancesAfter(last)}, Hash: tr.Hash, PendingGrants: tr.PendingGrants}
	if len(tr.PendingGrants) > 0 {
		st.Ops = append(st.Ops, m.c.PendingOps(st.Status, st.PendingGrants)...)
	}
	if tr.finishedAt != nil {
		begin := m.c.BeginAnswer(st.Trx, tr.beginVersion, begun, st.PendingGrants)
		st.Begin = &begin
	}
	return st
}

// order is an order as batchSQL.orders and batchSQL.exchanges read it.
func (m *storeModel) order(k PurchaseKey) *OrderState {
	o := &OrderState{Key: k}
	ops := slices.Clone(m.ops)
	slices.SortFunc(ops, func(a, b OpRow) int { return cmp.Compare(a.Pos, b.Pos) })
	for _, op := range ops {
		if op.Kind == OpGrant && op.Purchase != nil && op.Purchase.Store == k.Store && op.Purchase.OrderID == k.OrderID {
			v := op.Value
			if op.Fiat == "" {
				v = 0
			}
			o.Lots = append(o.Lots, OrderLot{LotID: op.LotID, Currency: op.Currency, Share: op.Amount, ShareValue: v})
		}
	}
	for _, tr := range m.trx {
		if tr.Refund != nil && tr.Refund.Store == k.Store && tr.Refund.OrderID == k.OrderID {
			o.RefundedBy = tr.ID
		}
	}
	var made []int64
	for _, l := range m.lots {
		if l.Store == k.Store && l.OrderID == k.OrderID && !slices.Contains(made, l.TrxID) {
			made = append(made, l.TrxID)
		}
	}
	for _, op := range ops {
		if slices.Contains(made, op.TrxID) && op.Paid && op.Cause == CauseExchange {
			o.Exchanges = append(o.Exchanges, ExchangeOp{TrxID: op.TrxID, LotID: op.LotID, Currency: op.Currency, Kind: op.Kind,
				Cause: op.Cause, Paid: op.Paid, Amount: op.Amount})
		}
	}
	return o
}

// store writes what the plans of p return, as batchTx.persist does.
func (m *storeModel) store(p *Player, plans []Plan) {
	for _, pl := range plans {
		for _, r := range pl.Inserts {
			m.trx = append(m.trx, &modelTrx{TrxRow: r})
		}
		m.ops = append(m.ops, pl.Ops...)
		if f := pl.Finish; f != nil {
			for _, tr := range m.trx {
				if tr.ID == f.ID {
					at := f.FinishedAt
					tr.Status, tr.Version, tr.finishedAt, tr.beginVersion, tr.finishedBy = f.Status, f.Version, &at, f.BeginVersion, f.By
				}
			}
		}
	}
	for _, l := range p.Lots() {
		switch {
		case l.New:
			cp := *l
			m.lots = append(m.lots, &cp)
		case l.Changed:
			for _, ml := range m.lots {
				if ml.ID == l.ID {
					ml.Amount, ml.Reserved, ml.Value, ml.ValueReserved = l.Amount, l.Reserved, l.Value, l.ValueReserved
				}
			}
		}
	}
	if v, pos, at, ok := p.Written(); ok {
		m.version, m.pos, m.updated = v, pos, at
	}
}

// rows is what the store holds, as text.
func (m *storeModel) rows() string {
	var b strings.Builder
	fmt.Fprintf(&b, "player v%d @%d %s\n", m.version, m.pos, m.updated)
	lots := slices.Clone(m.lots)
	slices.SortFunc(lots, func(x, y *BookLot) int { return cmp.Compare(x.ID, y.ID) })
	for _, l := range lots {
		cp := *l
		cp.New, cp.Changed = false, false
		raw, _ := json.Marshal(cp)
		fmt.Fprintf(&b, "lot %s\n", raw)
	}
	for _, tr := range m.trx {
		raw, _ := json.Marshal(tr.TrxRow)
		fmt.Fprintf(&b, "trx %s %v v%d by %d\n", raw, tr.finishedAt, tr.beginVersion, tr.finishedBy)
	}
	for _, o := range m.ops {
		raw, _ := json.Marshal(o)
		fmt.Fprintf(&b, "op %s\n", raw)
	}
	return b.String()
}

// modelWrite is one request, named.
type modelWrite struct {
	name  string
	write Write
}

// draw is the next n ids of the model's sequence.
func draw(next *int64, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		*next++
		ids[i] = *next
	}
	return ids
}

// planned is w's plan on p as a store makes it: the ids a plan lacks are
// drawn and handed to p, and w is planned again.
func planned(t *testing.T, p *Player, w Write, next *int64) Plan {
	t.Helper()
	pl := w.Plan(p)
	if pl.IDsShort > 0 {
		p.GiveIDs(draw(next, pl.IDsShort))
		if pl = w.Plan(p); pl.IDsShort > 0 {
			t.Fatalf("%T short of %d ids after it was given what it asked", w, pl.IDsShort)
		}
	}
	// Needs.Own: a store may leave such a key unread when the plan stores
	// a trx under it, so a plan that is neither refused nor a replay
	// must.
	for _, k := range w.Needs().Own {
		if pl.Err == nil && !pl.Replay && !slices.ContainsFunc(pl.Inserts, func(r TrxRow) bool {
			return r.Emitter == k.Emitter && r.IdempotencyKey == k.IdempotencyKey
		}) {
			t.Fatalf("%T applied without a trx under its own key %v", w, k)
		}
	}
	return pl
}

// answerOf is everything a write answers and writes, as text.
func answerOf(c *Catalog, p Plan) string {
	trx, _ := json.Marshal(p.Trx)
	return fmt.Sprintf("%s\nanswer %s", render(c, p), trx)
}

// alone runs the writes one at a time on m, each loading what it needs.
func alone(t *testing.T, m *storeModel, next *int64, ws []modelWrite) []string {
	t.Helper()
	var out []string
	for _, w := range ws {
		// The ids the write did not take go back to the sequence, so
		// that both runs give the same ids (a store's sequence skips
		// them).
		start := *next
		p := m.load(t, w.write.Needs(), next)
		pl := planned(t, p, w.write, next)
		*next = start + int64(p.next)
		m.store(p, []Plan{pl})
		out = append(out, answerOf(m.c, pl))
	}
	return out
}

// batched runs the writes as one batch on m: one load, then each plan.
func batched(t *testing.T, m *storeModel, next *int64, ws []modelWrite) []string {
	t.Helper()
	var n Needs
	for _, w := range ws {
		n.Add(w.write.Needs())
	}
	p := m.load(t, n, next)
	var out []string
	var plans []Plan
	for _, w := range ws {
		pl := planned(t, p, w.write, next)
		plans = append(plans, pl)
		out = append(out, answerOf(m.c, pl))
	}
	m.store(p, plans)
	return out
}

// compareBatch runs setup one at a time, from start before planT0 a step
// apart, then ws at planT0 one at a time and as one batch, and reports the
// first write answered otherwise, or rows written otherwise. Both runs
// load lots in an order of their own and draw the same ids.
func compareBatch(t *testing.T, c *Catalog, setup, ws []modelWrite, start, step time.Duration) {
	t.Helper()
	base := &storeModel{c: c, clock: planT0.Add(-start), version: 3, pos: 10, updated: planT0.Add(-2 * time.Hour)}
	next := int64(99)
	for _, w := range setup {
		alone(t, base, &next, []modelWrite{w})
		base.clock = base.clock.Add(step)
	}
	base.clock = planT0
	a, b := base.clone(), base.clone()
	a.shuffle, b.shuffle = rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(3, 4))
	na, nb := next, next
	one := alone(t, a, &na, ws)
	all := batched(t, b, &nb, ws)
	for i := range ws {
		if one[i] != all[i] {
			var names []string
			for _, w := range setup {
				names = append(names, w.name)
			}
			var sent []string
			for _, w := range ws {
				sent = append(sent, w.name)
			}
			t.Fatalf("after %s\nwrites %s\nwrite %d (%s):\nalone:\n%s\nin a batch:\n%s", strings.Join(names, "; "), strings.Join(sent, "; "), i, ws[i].name, one[i], all[i])
		}
	}
	if ra, rb := a.rows(), b.rows(); ra != rb {
		t.Fatalf("rows differ:\nalone:\n%s\nin a batch:\n%s", ra, rb)
	}
}

// writeMaker builds model writes on catalog c.
type writeMaker struct {
	t *testing.T
	c *Catalog
}

func (w writeMaker) scope(key string) Scope {
	return Scope{Namespace: 1, PlayerID: 42, Emitter: 7, IdempotencyKey: key}
}

func (w writeMaker) change(key string, hold bool, ttl time.Duration, ops ...OpRequest) modelWrite {
	w.t.Helper()
	v, err := w.c.ValidateChange(ChangeRequest{Scope: w.scope(key), Ops: ops, Hold: hold, HoldTTL: ttl})
	if err != nil {
		w.t.Fatal(err)
	}
	var parts []string
	for _, op := range ops {
		s := fmt.Sprintf("%s%+d", op.Currency, op.Amount)
		if op.ExpiresAt != nil {
			s += "@" + op.ExpiresAt.Sub(planT0).String()
		}
		if op.Priority != 0 {
			s += fmt.Sprintf("p%d", op.Priority)
		}
		if op.Purchase != nil {
			s += "/" + op.Purchase.OrderID
		}
		parts = append(parts, s)
	}
	name := "change"
	if hold {
		name = "hold"
	}
	return modelWrite{fmt.Sprintf("%s %s [%s] ttl %s", name, key, strings.Join(parts, " "), ttl),
		v}
}

func (w writeMaker) exchange(key, from, to string, amount Amount) modelWrite {
	w.t.Helper()
	v, err := w.c.ValidateExchange(ExchangeRequest{Scope: w.scope(key), From: from, To: to, Amount: amount})
	if err != nil {
		w.t.Fatal(err)
	}
	return modelWrite{fmt.Sprintf("exchange %s %d %s→%s", key, amount, from, to), v}
}

func (w writeMaker) finish(kind, key string) modelWrite {
	step := map[string]FinishStep{"commit": FinishCommit, "rollback": FinishRollback, "expire-hold": FinishExpire}[kind]
	f := Finish{Key: w.scope(key).Key(), Step: step}
	if step != FinishExpire { // the sweeper's is coffer's
		f.By = f.Key.Emitter
	}
	return modelWrite{kind + " " + key, f}
}

func (w writeMaker) refund(key, order string, kind RefundKind) modelWrite {
	w.t.Helper()
	v, err := w.c.ValidateRefund(RefundRequest{Scope: w.scope(key), Store: "steam", OrderID: order, Kind: kind})
	if err != nil {
		w.t.Fatal(err)
	}
	return modelWrite{fmt.Sprintf("refund %s %s", key, order), v}
}

func (w writeMaker) expireLots() modelWrite {
	return modelWrite{"expire-lots", ExpireLots{}}
}

// batchCatalog has a currency of each refund policy, one that cannot be
// paid, and rates between them.
func batchCatalog(tb testing.TB) *Catalog {
	tb.Helper()
	c := mustCatalog(tb, Currency{ID: 1, Code: "gold", Paid: true, RefundPolicy: RefundClawBack},
		Currency{ID: 2, Code: "silver", Paid: true, SpendOrder: []SpendKey{SpendNewest}}, Currency{ID: 3, Code: "credits", SpendOrder: []SpendKey{SpendExpiring, SpendOldest}})
	for _, r := range []struct {
		from, to string
		rate     Rate
	}{{"gold", "silver", Rate{Num: 3, Den: 1}}, {"silver", "gold", Rate{Num: 1, Den: 2}}, {"silver", "credits", Rate{Num: 1, Den: 1}}, {"gold", "credits", Rate{Num: 2, Den: 1}}} {
		if err := c.AddRate(1, r.from, r.to, r.rate); err != nil {
			tb.Fatal(err)
		}
	}
	return c
}

// randomWrite is a write of any kind, on few keys, orders, expiries and
// priorities, so that writes meet: replays, conflicts, joins, spends of
// what another granted, refunds of what another credited.
func (w writeMaker) randomWrite(rng *rand.Rand) modelWrite {
	curs := []string{"gold", "silver", "credits"}
	key := fmt.Sprint("k", rng.IntN(8))
	op := func() OpRequest {
		cur := curs[rng.IntN(3)]
		switch rng.IntN(5) {
		case 0, 1:
			return freeOp(cur, -Amount(1+rng.IntN(25)))
		case 2:
			if cur != "credits" {
				return OpRequest{Currency: cur, Amount: Amount(1 + rng.IntN(20)), Kind: "paid",
					Purchase: &Purchase{Store: "steam", OrderID: fmt.Sprint("o", rng.IntN(4)), Price: int64(1 + rng.IntN(100)), Fiat: "USD"}}
			}
		}
		o := freeOp(cur, Amount(1+rng.IntN(20)))
		switch rng.IntN(4) {
		case 0:
			e := planT0.Add(time.Duration(1+rng.IntN(5)) * time.Microsecond)
			o.ExpiresAt = &e
		case 1:
			e := planT0.Add(time.Hour)
			o.ExpiresAt = &e
		}
		o.Priority = int32(rng.IntN(2))
		return o
	}
	ops := func() []OpRequest {
		out := []OpRequest{op()}
		for rng.IntN(3) == 0 {
			out = append(out, op())
		}
		return out
	}
	switch rng.IntN(12) {
	case 0, 1, 2:
		return w.change(key, false, 0, ops()...)
	case 3, 4:
		ttl := time.Duration(0)
		if rng.IntN(2) == 0 {
			ttl = time.Second
		}
		return w.change(key, true, ttl, ops()...)
	case 5:
		return w.finish("commit", key)
	case 6:
		return w.finish("rollback", key)
	case 7:
		return w.finish("expire-hold", key)
	case 8:
		pairs := [][2]string{{"gold", "silver"}, {"silver", "gold"}, {"silver", "credits"}, {"gold", "credits"}}
		pr := pairs[rng.IntN(len(pairs))]
		return w.exchange(key, pr[0], pr[1], Amount(2+rng.IntN(20)))
	case 9:
		return w.refund(key, fmt.Sprint("o", rng.IntN(4)), RefundRefund)
	case 10:
		return w.expireLots()
	}
	return w.change(key, false, 0, ops()...)
}

// TestBatchAnswersAsAlone: random writes of every kind, after random
// writes, answer in one batch exactly as one at a time.
func TestBatchAnswersAsAlone(t *testing.T) {
	c := batchCatalog(t)
	w := writeMaker{t, c}
	for seed := range uint64(5000) {
		rng := rand.New(rand.NewPCG(seed, 16))
		var setup, ws []modelWrite
		for range 2 + rng.IntN(10) {
			setup = append(setup, w.randomWrite(rng))
		}
		for range 2 + rng.IntN(8) {
			ws = append(ws, w.randomWrite(rng))
		}
		// Holds and lots of the setup expire before the writes, or while
		// they run.
		start, step := time.Hour, time.Second
		if rng.IntN(2) == 0 {
			start, step = time.Second+3*time.Microsecond, time.Microsecond
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) { compareBatch(t, c, setup, ws, start, step) })
		if t.Failed() {
			return
		}
	}
}

// TestBatchAnswersAsAloneCases: writes that meet in one batch, each
// answered as one at a time.
func TestBatchAnswersAsAloneCases(t *testing.T) {
	c := batchCatalog(t)
	w := writeMaker{t, c}
	for _, sc := range []struct {
		name      string
		setup, ws []modelWrite
	}{
		// A store loads only lots that hold something (69ab49b).
		{"a free grant after a consume that empties the lot it would join", []modelWrite{w.change("a", false, 0, freeOp("gold", 5))},
			[]modelWrite{w.change("b", false, 0, freeOp("gold", -5)), w.change("c", false, 0, freeOp("gold", 2))}},
		// A finish that writes no op answers ops [], as the store reads
		// a trx without ops (postgres.scanTrx). The replay of the
		// rollback in the batch is the first answer, kept in memory;
		// alone it is read from the store.
		{"a rollback of a hold that only grants, sent twice", []modelWrite{w.change("h", true, 0, freeOp("silver", 3))},
			[]modelWrite{w.finish("rollback", "h"), w.finish("rollback", "h")}},
	} {
		t.Run(sc.name, func(t *testing.T) { compareBatch(t, c, sc.setup, sc.ws, time.Minute, time.Second) })
	}
}
