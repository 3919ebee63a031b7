package postgres_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/postgres"
)

// TestRevenue: two purchases of 499 (USD cents), 100 and 50 gold; 30
// spent (149.7: 150) and 10 exchanged (of 70 coins worth 349: 49.9, 50).
func TestRevenue(t *testing.T) {
	e := newEnv(t)
	from := time.Now().Add(-time.Minute)
	e.mustChange(15, "buy", paid("gold", 100, "o"))
	e.mustChange(16, "buy", paid("gold", 50, "o2"))
	e.mustChange(15, "spend", free("gold", -30))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(15, "ex"), From: "gold", To: "silver", Amount: 10})
	must(t, err)
	want := "gold USD: opening 0 deposited 150 recognised 30 converted 0/10 expired 0 refunded 0/0 deferred 110 | " +
		"value: opening 0 deposited 998 recognised 150 converted 0/50 expired 0 refunded 0/0 deferred 798\n" +
		"silver USD: opening 0 deposited 0 recognised 0 converted 1000/0 expired 0 refunded 0/0 deferred 1000 | " +
		"value: opening 0 deposited 0 recognised 0 converted 50/0 expired 0 refunded 0/0 deferred 50"
	if got := e.revenue(from, time.Now().Add(time.Minute)); got != want {
		t.Fatalf("revenue:\n%s\nwant\n%s", got, want)
	}
}

func TestTrxRead(t *testing.T) {
	e := newEnv(t)
	want := e.mustChange(51, "k", free("gold", 3))
	got, err := e.store.Trx(ctx, scope(51, "k"))
	if err != nil || got.ID != want.ID || got.Kind != coffer.TrxChange || len(got.Ops) != 1 || got.Ops[0].BalanceAfter != 3 {
		t.Fatalf("Trx = %+v, %v", got, err)
	}
	_, err = e.store.Trx(ctx, scope(51, "other"))
	wantCode(t, err, coffer.CodeNotFound)
	_, err = e.store.Trx(ctx, scope(0, "k"))
	wantCode(t, err, coffer.CodeInvalid)
}

func TestFinlogFilters(t *testing.T) {
	e := newEnv(t)
	e.mustChange(53, "a", free("gold", 1))
	mid := time.Now()
	e.mustChange(53, "b", free("silver", 2))
	if _, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(53, "c"), Reason: "quest", Ops: []coffer.OpRequest{free("gold", 3)}}); err != nil {
		t.Fatal(err)
	}
	// pageOf is the keys of q's page, and its cursor.
	pageOf := func(q coffer.FinlogQuery) (string, string) {
		t.Helper()
		q.Namespace, q.PlayerID = 1, 53
		page, err := e.store.Finlog(ctx, q)
		must(t, err)
		var ks []string
		for _, trx := range page.Items {
			ks = append(ks, trx.IdempotencyKey)
		}
		return fmt.Sprint(ks), page.NextCursor
	}
	keys := func(q coffer.FinlogQuery) string {
		t.Helper()
		ks, _ := pageOf(q)
		return ks
	}
	for _, c := range []struct {
		q    coffer.FinlogQuery
		want string
	}{
		{coffer.FinlogQuery{Currency: "gold"}, "[a c]"},
		{coffer.FinlogQuery{Reason: "quest"}, "[c]"},
		{coffer.FinlogQuery{From: &mid}, "[b c]"},
		{coffer.FinlogQuery{To: &mid}, "[a]"},
		{coffer.FinlogQuery{Desc: true, Limit: 2}, "[c b]"},
	} {
		if got := keys(c.q); got != c.want {
			t.Errorf("finlog %+v = %s, want %s", c.q, got, c.want)
		}
	}
	// A cursor is a position: given with the other order, it pages the
	// other way from there.
	first, cursor := pageOf(coffer.FinlogQuery{Limit: 2})
	if first != "[a b]" || cursor == "" {
		t.Fatalf("first page %s, cursor %q", first, cursor)
	}
	for desc, want := range map[bool]string{false: "[c]", true: "[a]"} {
		if got := keys(coffer.FinlogQuery{Cursor: cursor, Desc: desc}); got != want {
			t.Errorf("after [a b], desc %v: %s, want %s", desc, got, want)
		}
	}
	_, err := e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 53, Cursor: "garbage"})
	wantCode(t, err, coffer.CodeInvalid)
	_, err = e.store.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 53, Limit: coffer.FinlogLimitMax + 1})
	wantCode(t, err, coffer.CodeInvalid)
}

// TestFinlogFilterScanIsBounded: a page with a filter looks at
// FinlogScanMax trx at most, so a trx that few pass is not searched for
// through the whole history: the page answers what its scan found, even
// nothing, and a cursor from where the scan stopped; paging on finds
// every trx, both ways, and the last page has no cursor.
func TestFinlogFilterScanIsBounded(t *testing.T) {
	e := newEnv(t)
	const p = 54
	e.mustChange(p, "g1", free("gold", 1))
	var mid time.Time
	for i := range 8 {
		if i == 4 {
			mid = time.Now()
		}
		e.mustChange(p, fmt.Sprint("s", i), free("silver", 1))
	}
	e.mustChange(p, "g2", free("gold", 1))
	bounded := postgres.New(e.router, e.catalog, postgres.Options{FinlogScanMax: 4})
	// pages are the keys of each page of q, each with "+" when it has a
	// cursor.
	pages := func(store *postgres.Store, q coffer.FinlogQuery) string {
		t.Helper()
		q.Namespace, q.PlayerID = 1, p
		var out []string
		for {
			page, err := store.Finlog(ctx, q)
			must(t, err)
			var ks []string
			for _, trx := range page.Items {
				ks = append(ks, trx.IdempotencyKey)
			}
			if page.NextCursor == "" {
				return strings.Join(append(out, fmt.Sprint(ks)), " ")
			}
			out, q.Cursor = append(out, fmt.Sprint(ks)+"+"), page.NextCursor
		}
	}
	for _, c := range []struct {
		store *postgres.Store
		q     coffer.FinlogQuery
		want  string
	}{
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1}, "[g1]+ []+ [g2]"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, Desc: true}, "[g2]+ []+ [g1]"},
		{bounded, coffer.FinlogQuery{Reason: "test", Limit: 3}, "[g1 s0 s1]+ [s2 s3 s4]+ [s5 s6 s7]+ [g2]"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, To: &mid}, "[g1]+ []"},
		{bounded, coffer.FinlogQuery{Currency: "gold", Limit: 1, From: &mid, Desc: true}, "[g2]+ []"},
		{e.store, coffer.FinlogQuery{Currency: "gold", Limit: 1}, "[g1]+ [g2]"},
	} {
		if got := pages(c.store, c.q); got != c.want {
			t.Errorf("finlog %+v = %s, want %s", c.q, got, c.want)
		}
	}
}

// TestBalancesRead: a read lists the currencies the player holds in
// currency id order, whatever order their lots came in; a named currency
// is listed even at zero; a player with nothing has an empty list.
func TestBalancesRead(t *testing.T) {
	e := newEnv(t)
	e.mustChange(21, "a", free("credits", 3))
	e.mustChange(21, "b", free("silver", 5))
	e.mustChange(21, "c", free("gold", 7), paid("gold", 11, "o-1"))
	b, err := e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 21})
	must(t, err)
	want := []coffer.Balance{{Currency: "gold", Total: 18, Paid: 11, Free: 7}, {Currency: "silver", Total: 5, Free: 5}, {Currency: "credits", Total: 3, Free: 3}}
	if b.Version != 3 || !reflect.DeepEqual(b.Balances, want) {
		t.Fatalf("balances: %+v, want %+v", b, want)
	}
	b, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 22, Currency: "silver"})
	must(t, err)
	if !reflect.DeepEqual(b.Balances, []coffer.Balance{{Currency: "silver"}}) {
		t.Fatalf("a named currency at zero: %+v", b)
	}
	b, err = e.store.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 22})
	must(t, err)
	if b.Balances == nil || len(b.Balances) != 0 {
		t.Fatalf("a player with nothing: %#v", b.Balances)
	}
}

// TestLotsLoadEveryField: a lot loads back with every field the ledger
// gave it. Each field of coffer.BookLot but New and Changed (what a plan
// did to it) is set in some lot of the player below: a field stored but
// not loaded, or added to the lot without its column, fails here instead
// of in a rule that reads it (as the lot's trx did, once).
func TestLotsLoadEveryField(t *testing.T) {
	e := newEnv(t)
	const p = 72
	e.mustChange(p, "buy", paid("gold", 10, "o-72"))
	_, _, err := e.store.Exchange(ctx, coffer.ExchangeRequest{Scope: scope(p, "ex"), From: "gold", To: "silver", Amount: 5})
	must(t, err)
	expires := time.Now().Add(time.Hour)
	e.mustChange(p, "reward", coffer.OpRequest{Currency: "credits", Amount: 5, ExpiresAt: &expires, Priority: 3})
	_, _, err = e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(p, "hold"), Ops: []coffer.OpRequest{free("silver", -100)}, Hold: true})
	must(t, err)
	e.mustChange(p, "buy-2", paid("silver", 10, "o-72-2"))
	e.mustRefund(refundOf(p, "r", "o-72"))
	lots, err := e.store.Lots(ctx, e.router.Map().ShardOf(p), 1, p)
	must(t, err)
	typ := reflect.TypeFor[coffer.BookLot]()
	for _, f := range reflect.VisibleFields(typ) {
		if f.Anonymous || f.Name == "New" || f.Name == "Changed" {
			continue
		}
		set := false
		for _, l := range lots {
			set = set || !reflect.ValueOf(*l).FieldByIndex(f.Index).IsZero()
		}
		if !set {
			t.Errorf("no lot loaded with %s set: %d lots", f.Name, len(lots))
		}
	}
}
