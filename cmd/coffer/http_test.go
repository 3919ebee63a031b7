package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/internal/pgtest"
	"github.com/cofferhq/coffer/wallet"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func twoServers(t *testing.T) []*pgserver.Server {
	return []*pgserver.Server{pgtest.Server(t, 0), pgtest.Server(t, 1)}
}

func grant(key, currency string, amount coffer.Amount) wallet.Change {
	return wallet.Change{IdempotencyKey: key, Ops: []coffer.OpRequest{{Currency: currency, Amount: amount}}}
}

func balanceOf(t *testing.T, c *wallet.Conn, player coffer.PlayerID, currency string) coffer.Balance {
	t.Helper()
	b, err := c.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: player, Currency: currency})
	must(t, err)
	if len(b.Balances) != 1 {
		t.Fatalf("balances %+v", b)
	}
	return b.Balances[0]
}

// TestHTTPChangeReplayAndConflict: a new write is 201, the same key and
// payload 200 with the same body, another payload 409; insufficient funds
// writes nothing.
func TestHTTPChangeReplayAndConflict(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	path := "/v1/namespaces/1/players/42/transactions"
	body := `{"idempotency_key": "order-7731", "reason": "purchase", "meta": {"b": 1, "a": "x"},
	  "ops": [{"currency": "gold", "amount": 500, "kind": "paid",
	           "purchase": {"store": "steam", "order_id": "7731", "price": 499, "fiat": "USD"}},
	          {"currency": "silver", "amount": 30}]}`
	first := s.call("POST", path, devKey, body)
	wantStatus(t, first, http.StatusCreated, "")
	again := s.call("POST", path, devKey, body)
	wantStatus(t, again, http.StatusOK, "")
	if string(again.body) != string(first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", first.body, again.body)
	}
	var trx coffer.Trx
	must(t, json.Unmarshal(first.body, &trx))
	if trx.Kind != coffer.TrxChange || trx.Status != coffer.StatusCommitted || len(trx.Ops) != 2 || trx.Version != 1 ||
		trx.Ops[0].Purchase == nil || trx.Ops[0].BalanceAfter != 500 || string(trx.Meta) != `{"a":"x","b":1}` {
		t.Fatalf("trx %s", first.body)
	}
	conflict := s.call("POST", path, devKey, strings.Replace(body, "30", "31", 1))
	wantStatus(t, conflict, http.StatusConflict, coffer.CodeIdempotencyConflict)

	poor := s.call("POST", path, devKey, `{"idempotency_key": "spend-1", "ops": [{"currency": "silver", "amount": -10}, {"currency": "gold", "amount": -501}]}`)
	wantStatus(t, poor, http.StatusConflict, coffer.CodeInsufficientFunds)
	b, err := s.dev.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: 42})
	must(t, err)
	if b.Version != 1 || b.Balances[0].Total != 500 || b.Balances[0].Paid != 500 || b.Balances[1].Total != 30 {
		t.Fatalf("after insufficient funds: %+v", b)
	}
	// Only held currencies are listed, unless one is asked for.
	if len(b.Balances) != 2 || b.Balances[0].Currency != "gold" || b.Balances[1].Currency != "silver" {
		t.Fatalf("held currencies: %+v", b.Balances)
	}
	if c := balanceOf(t, s.dev, 42, "credits"); c.Total != 0 {
		t.Fatalf("credits: %+v", c)
	}
	// The corrected request with the same key goes through.
	ok := s.call("POST", path, devKey, `{"idempotency_key": "spend-1", "ops": [{"currency": "silver", "amount": -10}, {"currency": "gold", "amount": -500}]}`)
	wantStatus(t, ok, http.StatusCreated, "")
	if got := balanceOf(t, s.dev, 42, "gold"); got.Total != 0 {
		t.Fatalf("gold after spend: %+v", got)
	}
}

// TestIdempotencyKeyOfCharacters: a key is 1–128 characters (DESIGN), not
// bytes: 128 characters of three bytes each are written, replayed and
// read back by the key.
func TestIdempotencyKeyOfCharacters(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	key := strings.Repeat("€", 128)
	path := "/v1/namespaces/1/players/43/transactions"
	body := `{"idempotency_key": "` + key + `", "ops": [{"currency": "gold", "amount": 5}]}`
	wantStatus(t, s.call("POST", path, devKey, body), http.StatusCreated, "")
	wantStatus(t, s.call("POST", path, devKey, body), http.StatusOK, "")
	got := s.call("GET", path+"/"+url.PathEscape(key), devKey, "")
	wantStatus(t, got, http.StatusOK, "")
	var trx coffer.Trx
	must(t, json.Unmarshal(got.body, &trx))
	if trx.IdempotencyKey != key || trx.Version != 1 {
		t.Fatalf("trx %s", got.body)
	}
}

// TestClientRefusesTextJSONCannotCarry: the Go client refuses a key (or
// any text) that is not valid UTF-8 and sends nothing: encoding/json
// would send "k\xff" and "k\xfe" both as "k\ufffd", and the second,
// another write, would come back as the first's replay. What it sends
// keeps <, > and & as they are (meta is bounded as sent).
func TestClientRefusesTextJSONCannotCarry(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	for _, key := range []string{"k\xff", "k\xfe"} {
		_, _, err := s.dev.Change(ctx, 1, 44, wallet.Change{IdempotencyKey: key, Ops: []coffer.OpRequest{{Currency: "gold", Amount: 5}}})
		if coffer.ErrorCode(err) != coffer.CodeInvalid || !strings.Contains(err.Error(), "nothing was sent") {
			t.Errorf("key %q: %v", key, err)
		}
	}
	page, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 44})
	must(t, err)
	if len(page.Items) != 0 {
		t.Fatalf("the refused keys wrote %d trx", len(page.Items))
	}
	meta := `{"note": "` + strings.Repeat("<&>", 1300) + `"}`
	trx, _, err := s.dev.Change(ctx, 1, 44, wallet.Change{IdempotencyKey: "k", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 5}}, Meta: json.RawMessage(meta)})
	must(t, err)
	if trx.Version != 1 {
		t.Fatalf("trx %+v", trx)
	}
}

// TestEqualRequestsReplay: a request that means the same write as the
// first is its replay, however it is spelled and whichever transport
// brings it: idempotency_conflict would tell the client its write did not
// happen when it did.
func TestEqualRequestsReplay(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	path := "/v1/namespaces/1/players/43/transactions"
	first := s.call("POST", path, devKey, `{"idempotency_key": "eq-1", "reason": "r", "meta": {"b": 1, "aa": 2.50, "s": "<&>"},
	  "ops": [{"currency": "gold", "amount": 5, "kind": "free", "expires_at": "2030-01-01T00:00:00Z"}]}`)
	wantStatus(t, first, http.StatusCreated, "")
	again := s.call("POST", path, devKey, `{"ops": [{"expires_at": "2030-01-01T01:00:00.0000001+01:00", "amount": 5, "currency": "gold"}],
	  "meta": {"s": "\u003c&>", "aa": 25e-1, "b": 1.0}, "reason": "r", "idempotency_key": "eq-1"}`)
	wantStatus(t, again, http.StatusOK, "")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", first.body, again.body)
	}
	// Stored as the first answer had it: every read serves those bytes.
	read := s.call("GET", path+"/eq-1", devKey, "")
	var a, b struct{ Meta json.RawMessage }
	must(t, json.Unmarshal(first.body, &a))
	must(t, json.Unmarshal(read.body, &b))
	if string(a.Meta) != `{"aa":2.5,"b":1,"s":"<&>"}` || string(b.Meta) != string(a.Meta) {
		t.Fatalf("meta answered %s, read %s", a.Meta, b.Meta)
	}
	meta, _ := structpb.NewStruct(map[string]any{"s": "<&>", "aa": 2.5, "b": 1})
	var hdr metadata.MD
	trx, err := s.grpc.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 43, IdempotencyKey: "eq-1", Reason: "r", Meta: meta,
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 5, ExpiresAt: timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}}}, grpc.Header(&hdr))
	must(t, err)
	if len(hdr.Get("coffer-replay")) != 1 || trx.Version != 1 {
		t.Fatalf("gRPC: %v, header %v", trx, hdr)
	}
}

// TestHTTPHoldLife: a hold reserves at once, commit applies its grants,
// commit again is a replay, rollback after commit is hold_not_pending; a
// second hold rolls back into its lots; a third expires by the sweeper.
func TestHTTPHoldLife(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	const p = 7
	_, _, err := s.dev.Change(ctx, 1, p, grant("seed", "gold", 100))
	must(t, err)
	hold := wallet.Change{IdempotencyKey: "match-1", Hold: true, Ops: []coffer.OpRequest{
		{Currency: "gold", Amount: -40}, {Currency: "silver", Amount: 5}}}
	trx, replay, err := s.dev.Change(ctx, 1, p, hold)
	must(t, err)
	if replay || trx.Status != coffer.StatusPending || trx.HoldExpiresAt == nil {
		t.Fatalf("hold: %+v", trx)
	}
	if g, sv := balanceOf(t, s.dev, p, "gold"), balanceOf(t, s.dev, p, "silver"); g.Total != 60 || sv.Total != 0 {
		t.Fatalf("during hold: gold %+v silver %+v", g, sv)
	}
	commit := s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions/match-1/commit", p), devKey, "")
	wantStatus(t, commit, http.StatusCreated, "")
	again := s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions/match-1/commit", p), devKey, "{}")
	wantStatus(t, again, http.StatusOK, "")
	if string(again.body) != string(commit.body) {
		t.Fatalf("commit replay differs:\n%s\n%s", commit.body, again.body)
	}
	rb := s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/transactions/match-1/rollback", p), devKey, "")
	wantStatus(t, rb, http.StatusConflict, coffer.CodeHoldNotPending)
	if sv := balanceOf(t, s.dev, p, "silver"); sv.Total != 5 {
		t.Fatalf("after commit: silver %+v", sv)
	}

	hold.IdempotencyKey = "match/2 ü" // escaped in the path
	hold.Ops = hold.Ops[:1]
	_, _, err = s.dev.Change(ctx, 1, p, hold)
	must(t, err)
	trx, replay, err = s.dev.Rollback(ctx, 1, p, "match/2 ü")
	must(t, err)
	if replay || trx.Status != coffer.StatusRolledBack {
		t.Fatalf("rollback: %+v", trx)
	}
	if g := balanceOf(t, s.dev, p, "gold"); g.Total != 60 {
		t.Fatalf("after rollback: gold %+v", g)
	}
	_, err = s.dev.Trx(ctx, 1, p, "match/2 ü")
	must(t, err)
	_, _, err = s.dev.Commit(ctx, 1, p, "match/2 ü")
	if coffer.ErrorCode(err) != coffer.CodeHoldNotPending {
		t.Fatalf("commit after rollback: %v", err)
	}

	// A key that is a dot segment is a key like any other: the client
	// escapes it, where a path would resolve it away (RFC 3986 §5.2.4)
	// and the call would miss its trx.
	for _, key := range []string{".", ".."} {
		hold.IdempotencyKey = key
		_, _, err = s.dev.Change(ctx, 1, p, hold)
		must(t, err)
		if trx, err = s.dev.Trx(ctx, 1, p, key); err != nil || trx.IdempotencyKey != key {
			t.Fatalf("trx %q: %+v %v", key, trx, err)
		}
		if trx, _, err = s.dev.Rollback(ctx, 1, p, key); err != nil || trx.Status != coffer.StatusRolledBack {
			t.Fatalf("rollback %q: %+v %v", key, trx, err)
		}
	}

	hold.IdempotencyKey, hold.HoldTTLSeconds = "abandoned", 1
	_, _, err = s.dev.Change(ctx, 1, p, hold)
	must(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		trx, err = s.dev.Trx(ctx, 1, p, "abandoned")
		must(t, err)
		if trx.Status == coffer.StatusExpired || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if trx.Status != coffer.StatusExpired {
		t.Fatalf("the sweeper did not expire the hold: %+v", trx)
	}
	if g := balanceOf(t, s.dev, p, "gold"); g.Total != 60 {
		t.Fatalf("after expiry: gold %+v", g)
	}
	if _, _, err = s.dev.Commit(ctx, 1, p, "abandoned"); coffer.ErrorCode(err) != coffer.CodeHoldExpired && coffer.ErrorCode(err) != coffer.CodeHoldNotPending {
		t.Fatalf("commit after expiry: %v", err)
	}
	_, err = s.dev.Trx(ctx, 1, p, "never")
	if coffer.ErrorCode(err) != coffer.CodeNotFound {
		t.Fatalf("unknown key: %v", err)
	}
}

// TestHTTPExchangeAtAndFinlog: an exchange carries the paid share; a past
// balance (at=) equals what the finlog said then; the finlog pages both
// ways; the revenue report sees the purchase.
func TestHTTPExchangeAtAndFinlog(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	const p = 99
	paid := wallet.Change{IdempotencyKey: "buy", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 10, Kind: "paid",
		Purchase: &coffer.Purchase{Store: "steam", OrderID: "o1", Price: 99, Fiat: "EUR"}}}}
	first, _, err := s.dev.Change(ctx, 1, p, paid)
	must(t, err)
	var keys []string
	for i := 0; i < 4; i++ {
		k := fmt.Sprintf("free-%d", i)
		keys = append(keys, k)
		_, _, err := s.dev.Change(ctx, 1, p, grant(k, "gold", 1))
		must(t, err)
	}
	ex, replay, err := s.dev.Exchange(ctx, 1, p, wallet.Exchange{IdempotencyKey: "ex-1", From: "gold", To: "silver", Amount: 12})
	must(t, err)
	if replay || ex.Kind != coffer.TrxExchange {
		t.Fatalf("exchange %+v", ex)
	}
	sv := balanceOf(t, s.dev, p, "silver")
	if sv.Total != 1200 || sv.Paid+sv.Free != 1200 || sv.Paid == 0 {
		t.Fatalf("silver %+v", sv)
	}
	r := s.call("POST", fmt.Sprintf("/v1/namespaces/1/players/%d/exchanges", p), devKey, `{"idempotency_key": "ex-2", "from": "silver", "to": "credits", "amount": 9}`)
	wantStatus(t, r, http.StatusBadRequest, coffer.CodeInvalid) // yields 0 credits

	at := first.CreatedAt.Format(time.RFC3339Nano)
	r = s.call("GET", fmt.Sprintf("/v1/namespaces/1/players/%d/balances?currency=gold&at=%s", p, url.QueryEscape(at)), devKey, "")
	wantStatus(t, r, http.StatusOK, "")
	var past coffer.Balances
	must(t, json.Unmarshal(r.body, &past))
	if past.At == nil || past.Balances[0].Total != 10 || past.Balances[0].Paid != 10 {
		t.Fatalf("at %s: %s", at, r.body)
	}
	r = s.call("GET", fmt.Sprintf("/v1/namespaces/1/players/%d/balances?lots=true", p), devKey, "")
	wantStatus(t, r, http.StatusOK, "")

	var seen []string
	q := coffer.FinlogQuery{Namespace: 1, PlayerID: p, Limit: 2}
	for pages := 0; ; pages++ {
		page, err := s.dev.Finlog(ctx, q)
		must(t, err)
		for _, trx := range page.Items {
			seen = append(seen, trx.IdempotencyKey)
		}
		if page.NextCursor == "" {
			break
		}
		if pages > 10 {
			t.Fatal("finlog does not end")
		}
		q.Cursor = page.NextCursor
	}
	want := append(append([]string{"buy"}, keys...), "ex-1")
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("finlog asc %v, want %v", seen, want)
	}
	page, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: p, Limit: 1, Desc: true})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].IdempotencyKey != "ex-1" || page.NextCursor == "" {
		t.Fatalf("finlog desc %+v", page)
	}
	r = s.call("GET", fmt.Sprintf("/v1/namespaces/1/players/%d/finlog?currency=silver&order=asc&limit=10", p), devKey, "")
	wantStatus(t, r, http.StatusOK, "")
	// A cursor pages the finlog it came from. Another player's, or one
	// no page gave (its time wrapped to the future: an empty page, as if
	// the finlog ended; or another spelling of a page's), is refused, not
	// read as some other position.
	raw, err := base64.RawURLEncoding.DecodeString(page.NextCursor)
	must(t, err)
	cut := strings.LastIndexByte(string(raw), ':')
	spelt := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	r = s.call("GET", "/v1/namespaces/1/players/99/finlog?order=desc&cursor="+url.QueryEscape(spelt(string(raw))), devKey, "")
	wantStatus(t, r, http.StatusOK, "")
	for _, c := range []struct{ path, cursor string }{
		{"/v1/namespaces/1/players/98/finlog", page.NextCursor},
		{"/v1/namespaces/2/players/99/finlog", page.NextCursor},
		{"/v1/namespaces/1/players/99/finlog", spelt("1:99:-9223372036854775808:1")},
		{"/v1/namespaces/1/players/99/finlog", spelt(string(raw[:cut+1]) + "+" + string(raw[cut+1:]))},
		{"/v1/namespaces/1/players/99/finlog", spelt(string(raw[:cut+1]) + "0" + string(raw[cut+1:]))},
	} {
		r = s.call("GET", c.path+"?cursor="+url.QueryEscape(c.cursor), devKey, "")
		wantStatus(t, r, http.StatusBadRequest, coffer.CodeInvalid)
	}

	lines, err := s.dev.Revenue(ctx, coffer.RevenueQuery{Namespace: 1, From: first.CreatedAt.Add(-time.Hour), To: time.Now().Add(time.Hour)})
	must(t, err)
	if len(lines) == 0 || lines[0].Currency != "gold" || lines[0].Deposited != 10 {
		t.Fatalf("revenue %+v", lines)
	}
	r = s.call("GET", "/v1/namespaces/1/reports/revenue?from=2026-01-01T00:00:00Z&to=2030-01-01T00:00:00Z", devKey, "")
	wantStatus(t, r, http.StatusOK, "")
	st, err := s.dev.Status(ctx)
	must(t, err)
	if st.ShardCount != 8 || len(st.Databases) != 2 || !st.Databases[0].SchemaVerified {
		t.Fatalf("status %+v", st)
	}
}

// TestHTTPAuth: keys and permissions are checked before anything else.
func TestHTTPAuth(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	bal := "/v1/namespaces/1/players/5/balances"
	write := `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 1}]}`
	for _, c := range []struct {
		name, method, path, key, body string
		status                        int
		code                          coffer.Code
	}{
		{"no key", "GET", bal, "", "", 401, coffer.CodeUnauthenticated},
		{"unknown key", "GET", bal, "nope", "", 401, coffer.CodeUnauthenticated},
		{"unknown key before bad input", "POST", "/v1/namespaces/x/players/0/transactions", "nope", "{", 401, coffer.CodeUnauthenticated},
		{"reader writes", "POST", "/v1/namespaces/1/players/5/transactions", readerKey, write, 403, coffer.CodePermissionDenied},
		{"reader in namespace 2", "GET", "/v1/namespaces/2/players/5/balances", readerKey, "", 403, coffer.CodePermissionDenied},
		{"dev in namespace 3", "GET", "/v1/namespaces/3/players/5/balances", devKey, "", 403, coffer.CodePermissionDenied},
		{"revenue needs admin", "GET", "/v1/namespaces/1/reports/revenue?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z", game2Key, "", 403, coffer.CodePermissionDenied},
		{"status needs ops, not read", "GET", "/v1/status", readerKey, "", 403, coffer.CodePermissionDenied},
		{"status needs ops, not admin", "GET", "/v1/status", auditorKey, "", 403, coffer.CodePermissionDenied},
		{"ops reads status", "GET", "/v1/status", monitorKey, "", 200, ""},
		{"ops reads no balance", "GET", bal, monitorKey, "", 403, coffer.CodePermissionDenied},
		{"reader reads", "GET", bal, readerKey, "", 200, ""},
		{"no route", "GET", "/v2/nothing", devKey, "", 404, coffer.CodeNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantStatus(t, s.call(c.method, c.path, c.key, c.body), c.status, c.code)
		})
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json"} {
		wantStatus(t, s.call("GET", p, "", ""), 200, "")
	}
	// The scheme is Bearer, in any case, and required.
	for header, status := range map[string]int{"bearer " + readerKey: 200, "BEARER  " + readerKey: 200,
		readerKey: 401, "Basic " + readerKey: 401, "Bearer": 401} {
		r := s.callAuth("GET", bal, header, "")
		if r.status != status {
			t.Errorf("Authorization: %s: %d %s", header, r.status, r.body)
		}
	}
	if b := balanceOf(t, s.dev, 5, "gold"); b.Total != 0 {
		t.Fatalf("a refused write was applied: %+v", b)
	}
}

// TestIdempotencyKeysScopedToClient: two clients with the same key write
// two trx.
func TestIdempotencyKeysScopedToClient(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	game2 := wallet.New(s.base, game2Key, nil)
	a, _, err := s.dev.Change(ctx, 1, 11, grant("same", "gold", 1))
	must(t, err)
	b, replay, err := game2.Change(ctx, 1, 11, grant("same", "gold", 1))
	must(t, err)
	if replay || a.ID == b.ID {
		t.Fatalf("second client's trx was taken for a replay: %+v %+v", a, b)
	}
	if g := balanceOf(t, s.dev, 11, "gold"); g.Total != 2 {
		t.Fatalf("gold %+v", g)
	}
	if _, err := game2.Trx(ctx, 1, 11, "same"); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPBadInput: every malformed request is a 4xx with its code, and
// nothing is written.
func TestHTTPBadInput(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) { c.Limits.BodyBytesMax = 2048 })
	tx := "/v1/namespaces/1/players/77/transactions"
	op := func(extra string) string {
		return `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 5` + extra + `}]}`
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     coffer.Code
	}{
		{"unknown field", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 5}], "colour": 1}`, 400, coffer.CodeInvalid},
		{"unknown op field", "POST", tx, op(`, "bonus": true`), 400, coffer.CodeInvalid},
		{"amount as string", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": "5"}]}`, 400, coffer.CodeInvalid},
		{"amount fractional", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 1.5}]}`, 400, coffer.CodeInvalid},
		{"amount zero", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 0}]}`, 400, coffer.CodeInvalid},
		{"amount over 10^15", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 1000000000000001}]}`, 400, coffer.CodeInvalid},
		{"amount over int64", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "gold", "amount": 99999999999999999999}]}`, 400, coffer.CodeInvalid},
		{"unknown currency", "POST", tx, `{"idempotency_key": "k", "ops": [{"currency": "mana", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"paid credits", "POST", tx, op(`, "kind": "paid", "purchase": {"store": "s", "order_id": "1", "price": 1, "fiat": "USD"}`), 201, ""},
		{"no ops", "POST", tx, `{"idempotency_key": "k2", "ops": []}`, 400, coffer.CodeInvalid},
		{"key too long", "POST", tx, `{"idempotency_key": "` + strings.Repeat("k", 129) + `", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"key of 129 characters", "POST", tx, `{"idempotency_key": "` + strings.Repeat("€", 129) + `", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"no key", "POST", tx, `{"ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"malformed JSON", "POST", tx, `{"idempotency_key": "k",`, 400, coffer.CodeInvalid},
		{"trailing data", "POST", tx, op("") + ` {}`, 400, coffer.CodeInvalid},
		{"empty body", "POST", tx, ``, 400, coffer.CodeInvalid},
		{"meta not an object", "POST", tx, `{"idempotency_key": "k3", "ops": [{"currency": "gold", "amount": 5}], "meta": [1]}`, 400, coffer.CodeInvalid},
		{"body too large", "POST", tx, `{"idempotency_key": "k4", "reason": "` + strings.Repeat("x", 3000) + `", "ops": []}`, 413, coffer.CodePayloadTooLarge},
		{"ttl without hold", "POST", tx, `{"idempotency_key": "k5", "ops": [{"currency": "gold", "amount": 5}], "hold_ttl_seconds": 5}`, 400, coffer.CodeInvalid},
		{"namespace not a number", "GET", "/v1/namespaces/one/players/77/balances", "", 400, coffer.CodeInvalid},
		{"player zero", "GET", "/v1/namespaces/1/players/0/balances", "", 400, coffer.CodeInvalid},
		{"player overflows", "GET", "/v1/namespaces/1/players/9223372036854775808/balances", "", 400, coffer.CodeInvalid},
		{"unknown query parameter", "GET", "/v1/namespaces/1/players/77/balances?colour=red", "", 400, coffer.CodeInvalid},
		{"query parameter given twice", "GET", "/v1/namespaces/1/players/77/balances?currency=gold&currency=silver", "", 400, coffer.CodeInvalid},
		{"malformed query", "GET", "/v1/namespaces/1/players/77/balances?currency=%zz", "", 400, coffer.CodeInvalid},
		{"bad at", "GET", "/v1/namespaces/1/players/77/balances?at=yesterday", "", 400, coffer.CodeInvalid},
		{"bad lots", "GET", "/v1/namespaces/1/players/77/balances?lots=maybe", "", 400, coffer.CodeInvalid},
		{"bad order", "GET", "/v1/namespaces/1/players/77/finlog?order=sideways", "", 400, coffer.CodeInvalid},
		{"bad limit", "GET", "/v1/namespaces/1/players/77/finlog?limit=100000", "", 400, coffer.CodeInvalid},
		{"bad cursor", "GET", "/v1/namespaces/1/players/77/finlog?cursor=zzz", "", 400, coffer.CodeInvalid},
		// An empty period is a mistake (from and to swapped), not an
		// empty finlog, as in the revenue report.
		{"finlog from after to", "GET", "/v1/namespaces/1/players/77/finlog?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z", "", 400, coffer.CodeInvalid},
		{"finlog from at to", "GET", "/v1/namespaces/1/players/77/finlog?from=2030-01-01T00:00:00Z&to=2030-01-01T00:00:00Z", "", 400, coffer.CodeInvalid},
		{"revenue from after to", "GET", "/v1/namespaces/1/reports/revenue?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z", "", 400, coffer.CodeInvalid},
		{"revenue without range", "GET", "/v1/namespaces/1/reports/revenue", "", 400, coffer.CodeInvalid},
		// A filter by a currency the catalog does not have (coffer.Catalog.Named).
		{"balances of an unknown currency", "GET", "/v1/namespaces/1/players/77/balances?currency=mana", "", 400, coffer.CodeInvalid},
		{"balances at a time of an unknown currency", "GET", "/v1/namespaces/1/players/77/balances?currency=mana&at=2026-01-01T00:00:00Z", "", 400, coffer.CodeInvalid},
		{"finlog of an unknown currency", "GET", "/v1/namespaces/1/players/77/finlog?currency=mana", "", 400, coffer.CodeInvalid},
		{"revenue of an unknown currency", "GET", "/v1/namespaces/1/reports/revenue?from=2026-01-01T00:00:00Z&to=2027-01-01T00:00:00Z&currency=mana", "", 400, coffer.CodeInvalid},
		{"commit with a body", "POST", tx + "/k/commit", `{"force": true}`, 400, coffer.CodeInvalid},
		// A write takes no query: a client that asks for a hold there
		// must not get a one-phase change.
		{"change with a query", "POST", tx + "?hold=true", op(""), 400, coffer.CodeInvalid},
		{"exchange with a query", "POST", "/v1/namespaces/1/players/77/exchanges?dry_run=1", `{"idempotency_key": "e2", "from": "gold", "to": "silver", "amount": 5}`, 400, coffer.CodeInvalid},
		{"refund with a query", "POST", "/v1/namespaces/1/players/77/refunds?x=1", `{"idempotency_key": "r", "store": "s", "order_id": "o", "kind": "refund"}`, 400, coffer.CodeInvalid},
		{"batch with a query", "POST", "/v1/namespaces/1/transactions:batch?atomic=true", `{"changes": [{"player_id": 77, "idempotency_key": "b", "ops": [{"currency": "gold", "amount": 5}]}]}`, 400, coffer.CodeInvalid},
		{"commit with a query", "POST", tx + "/k/commit?force=true", ``, 400, coffer.CodeInvalid},
		{"exchange without rate", "POST", "/v1/namespaces/1/players/77/exchanges", `{"idempotency_key": "e", "from": "credits", "to": "gold", "amount": 5}`, 400, coffer.CodeInvalid},
		// One request, one spelling (docs/api.md, Strict JSON).
		{"a name twice", "POST", tx, `{"idempotency_key": "k", "idempotency_key": "k6", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"a name in another case", "POST", tx, `{"Idempotency_Key": "k7", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"a name twice in meta", "POST", tx, `{"idempotency_key": "k8", "ops": [{"currency": "gold", "amount": 5}], "meta": {"a": 1, "a": 2}}`, 400, coffer.CodeInvalid},
		{"invalid UTF-8", "POST", tx, "{\"idempotency_key\": \"k9\xff\", \"ops\": [{\"currency\": \"gold\", \"amount\": 5}]}", 400, coffer.CodeInvalid},
		{"a lone surrogate", "POST", tx, `{"idempotency_key": "k9\udc00", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"a key with NUL", "POST", tx, `{"idempotency_key": "k9\u0000", "ops": [{"currency": "gold", "amount": 5}]}`, 400, coffer.CodeInvalid},
		{"player +77", "GET", "/v1/namespaces/1/players/+77/balances", "", 400, coffer.CodeInvalid},
		{"player 077", "POST", "/v1/namespaces/1/players/077/transactions", op(""), 400, coffer.CodeInvalid},
		{"namespace 01", "GET", "/v1/namespaces/01/players/77/balances", "", 400, coffer.CodeInvalid},
		// meta is bounded as served (jsonb printed 1e131071 in 131072
		// digits) and fits gRPC's doubles.
		{"meta printed long", "POST", tx, `{"idempotency_key": "k10", "ops": [{"currency": "gold", "amount": 5}], "meta": {"a": 1e131071}}`, 400, coffer.CodeInvalid},
		{"meta beyond a double", "POST", tx, `{"idempotency_key": "k11", "ops": [{"currency": "gold", "amount": 5}], "meta": {"a": 1e400}}`, 400, coffer.CodeInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "paid credits" {
				c.body = strings.Replace(c.body, "gold", "credits", 1)
				c.status, c.code = 400, coffer.CodeInvalid
			}
			wantStatus(t, s.call(c.method, c.path, devKey, c.body), c.status, c.code)
		})
	}
	page, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: 77})
	must(t, err)
	if len(page.Items) != 0 {
		t.Fatalf("bad input wrote %d trx", len(page.Items))
	}
}

// TestHTTPOrderCreditedOnce: a store order presented by a second request —
// another player on the other database, another key, another client, in
// a batch — is 409 purchase_already_credited with nothing in the body
// about the first buyer, and writes nothing; the first request's retry
// is a replay.
func TestHTTPOrderCreditedOnce(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	players := map[int]coffer.PlayerID{}
	for p := coffer.PlayerID(777001); len(players) < 2; p++ {
		players[s.m.DatabaseOf(s.m.ShardOf(p)).Index] = p
	}
	buyer, other := players[0], players[1]
	ops := `"ops": [{"currency": "gold", "amount": 500, "kind": "paid",
	  "purchase": {"store": "apple", "order_id": "one-receipt", "price": 499, "fiat": "USD"}}]`
	path := func(p coffer.PlayerID) string { return fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", p) }
	first := s.call("POST", path(buyer), devKey, `{"idempotency_key": "first-buyer-key", `+ops+`}`)
	wantStatus(t, first, http.StatusCreated, "")
	for _, r := range []response{
		s.call("POST", path(other), devKey, `{"idempotency_key": "first-buyer-key", `+ops+`}`),
		s.call("POST", path(buyer), devKey, `{"idempotency_key": "second-key", `+ops+`}`),
		s.call("POST", path(buyer), game2Key, `{"idempotency_key": "first-buyer-key", `+ops+`}`),
	} {
		wantStatus(t, r, http.StatusConflict, coffer.CodePurchaseAlreadyCredited)
		if body := string(r.body); strings.Contains(body, fmt.Sprint(buyer)) || strings.Contains(body, "first-buyer-key") {
			t.Fatalf("the refusal names the first buyer: %s", body)
		}
	}
	a := s.batch(devKey, fmt.Sprintf(`{"changes": [{"player_id": %d, "idempotency_key": "in-a-batch", %s}]}`, other, ops))
	if r := a.Results[0]; r.Status != http.StatusConflict || r.Error == nil || r.Error.Code != coffer.CodePurchaseAlreadyCredited {
		t.Fatalf("in a batch: %+v", r)
	}
	_, err := s.grpc.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: int64(other), IdempotencyKey: "over-grpc",
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 500, Kind: "paid",
			Purchase: &cofferv1.Purchase{Store: "apple", OrderId: "one-receipt", Price: 499, Fiat: "USD"}}}})
	wantGRPC(t, err, codes.AlreadyExists, coffer.CodePurchaseAlreadyCredited)
	again := s.call("POST", path(buyer), devKey, `{"idempotency_key": "first-buyer-key", `+ops+`}`)
	wantStatus(t, again, http.StatusOK, "")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", first.body, again.body)
	}
	if b := balanceOf(t, s.dev, buyer, "gold"); b.Paid != 500 {
		t.Fatalf("buyer gold %+v", b)
	}
	if b := balanceOf(t, s.dev, other, "gold"); b.Total != 0 {
		t.Fatalf("other player gold %+v", b)
	}
}

// TestHTTPRefund: a refund over HTTP takes back what is left of the
// order's lot (gold is write_off in the dev config: the spent part is
// the shortfall) and answers 201; its retry replays the same bytes; the
// same key with another payload is idempotency_conflict, another key
// already_refunded, an order not credited not_found, bad input 400 and a
// read-only client 403, none of them writing; the Go client refunds too.
func TestHTTPRefund(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	const p = 778001
	tx, path := fmt.Sprintf("/v1/namespaces/1/players/%d/transactions", p), fmt.Sprintf("/v1/namespaces/1/players/%d/refunds", p)
	buy := func(key, order string) {
		wantStatus(t, s.call("POST", tx, devKey, `{"idempotency_key": "`+key+`", "ops": [{"currency": "gold", "amount": 500, "kind": "paid",
		  "purchase": {"store": "google", "order_id": "`+order+`", "price": 499, "fiat": "EUR"}}]}`), http.StatusCreated, "")
	}
	buy("buy-1", "GPA.1")
	wantStatus(t, s.call("POST", tx, devKey, `{"idempotency_key": "spend", "ops": [{"currency": "gold", "amount": -200}]}`), http.StatusCreated, "")
	wantStatus(t, s.call("POST", tx, devKey, `{"idempotency_key": "reward", "ops": [{"currency": "gold", "amount": 30}]}`), http.StatusCreated, "")
	body := `{"idempotency_key": "refund-1", "store": "google", "order_id": "GPA.1", "kind": "refund", "reason": "support ticket 9"}`
	first := s.call("POST", path, devKey, body)
	wantStatus(t, first, http.StatusCreated, "")
	var trx coffer.Trx
	must(t, json.Unmarshal(first.body, &trx))
	if trx.Kind != coffer.TrxRefund || len(trx.Ops) != 1 || trx.Ops[0].Amount != -300 || trx.Ops[0].Cause != coffer.CauseRefund || trx.Refund == nil ||
		trx.Refund.Kind != coffer.RefundRefund || fmt.Sprint(trx.Refund.Shortfall) != "[{gold 200 200}]" { // 200 of 500 coins bought for 499
		t.Fatalf("refund %s", first.body)
	}
	again := s.call("POST", path, devKey, body)
	wantStatus(t, again, http.StatusOK, "")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay body differs:\n%s\n%s", first.body, again.body)
	}
	for _, c := range []struct {
		key, body string
		status    int
		code      coffer.Code
	}{
		{devKey, `{"idempotency_key": "refund-1", "store": "google", "order_id": "GPA.1", "kind": "chargeback", "reason": "support ticket 9"}`,
			http.StatusConflict, coffer.CodeIdempotencyConflict},
		{devKey, `{"idempotency_key": "refund-2", "store": "google", "order_id": "GPA.1", "kind": "chargeback"}`, http.StatusConflict, coffer.CodeAlreadyRefunded},
		{devKey, `{"idempotency_key": "refund-3", "store": "google", "order_id": "GPA.2", "kind": "refund"}`, http.StatusNotFound, coffer.CodeNotFound},
		{devKey, `{"idempotency_key": "refund-4", "store": "google", "order_id": "GPA.1", "kind": "REFUND"}`, http.StatusBadRequest, coffer.CodeInvalid},
		{devKey, `{"idempotency_key": "refund-5", "store": "google", "order_id": "GPA.1"}`, http.StatusBadRequest, coffer.CodeInvalid},
		{devKey, `{"idempotency_key": "refund-6", "store": "google", "order_id": "GPA.1", "kind": "refund", "amount": 5}`, http.StatusBadRequest, coffer.CodeInvalid},
		{readerKey, `{"idempotency_key": "refund-7", "store": "google", "order_id": "GPA.1", "kind": "refund"}`, http.StatusForbidden, coffer.CodePermissionDenied},
	} {
		wantStatus(t, s.call("POST", path, c.key, c.body), c.status, c.code)
	}
	page, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: p, Desc: true})
	must(t, err)
	if len(page.Items) != 4 || page.Items[0].IdempotencyKey != "refund-1" {
		t.Fatalf("finlog: %+v", page.Items)
	}
	buy("buy-2", "GPA.2")
	req := wallet.Refund{IdempotencyKey: "refund-8", Store: "google", OrderID: "GPA.2", Kind: coffer.RefundChargeback}
	got, replay, err := s.dev.Refund(ctx, 1, p, req)
	if err != nil || replay || got.Refund == nil || got.Refund.Kind != coffer.RefundChargeback || len(got.Refund.Shortfall) != 0 {
		t.Fatalf("client refund: %+v %v %v", got, replay, err)
	}
	if _, replay, err := s.dev.Refund(ctx, 1, p, req); err != nil || !replay {
		t.Fatalf("client replay: %v %v", replay, err)
	}
	if b := balanceOf(t, s.dev, p, "gold"); b.Total != 30 || b.Paid != 0 {
		t.Fatalf("gold %+v", b)
	}
}
