package http

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

func testCatalog(tb testing.TB) *coffer.Catalog {
	c, err := coffer.NewCatalog([]coffer.Currency{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "credits"}}, time.Minute, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// FuzzDecodeChange: the strict decoder never panics, fails only with
// invalid_argument, and what it accepts survives a round trip and the
// domain validation without panicking.
func FuzzDecodeChange(f *testing.F) {
	for _, seed := range []string{
		`{"idempotency_key": "order-7731", "ops": [{"currency": "gold", "amount": 500, "kind": "paid", "purchase": {"store": "steam", "order_id": "7731", "price": 499, "fiat": "USD"}}, {"currency": "credits", "amount": -20}], "reason": "purchase", "meta": {"any": "json"}, "hold": false}`,
		`{"idempotency_key": "h", "ops": [{"currency": "gold", "amount": -1}], "hold": true, "hold_ttl_seconds": 30}`,
		`{"idempotency_key": "e", "ops": [{"currency": "gold", "amount": 1, "expires_at": "2030-01-01T00:00:00Z", "priority": 3}]}`,
		`{"ops": null}`, `{"colour": 1}`, `[]`, `{"idempotency_key": 5}`, `{} {}`, ``,
		`{"idempotency_key": "a", "idempotency_key": "b"}`, `{"IDEMPOTENCY_KEY": "k"}`, `{"idempotency_key": "\ud800"}`,
		`{"idempotency_key": "k", "meta": {"a": 1, "\u0061": 2}}`, "{\"idempotency_key\": \"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	cat := testCatalog(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var body api.ChangeBody
		err := decodeJSON(bytes.NewReader(raw), &body, true)
		if err != nil {
			if coffer.ErrorCode(err) != coffer.CodeInvalid {
				t.Fatalf("decode error with code %q: %v", coffer.ErrorCode(err), err)
			}
			return
		}
		again, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("accepted body does not encode: %v", err)
		}
		var body2 api.ChangeBody
		if err := decodeJSON(bytes.NewReader(again), &body2, true); err != nil {
			t.Fatalf("re-encoded body rejected: %v\n%s", err, again)
		}
		req := coffer.ChangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: 1, Emitter: 1, IdempotencyKey: body.IdempotencyKey},
			Ops: body.Ops, Reason: body.Reason, Meta: body.Meta, Hold: body.Hold, HoldTTL: time.Duration(body.HoldTTLSeconds) * time.Second}
		if _, err := cat.ValidateChange(req); err != nil && coffer.ErrorCode(err) != coffer.CodeInvalid {
			t.Fatalf("validation error with code %q: %v", coffer.ErrorCode(err), err)
		}
	})
}

// FuzzDecodeExchange is FuzzDecodeChange for exchanges.
func FuzzDecodeExchange(f *testing.F) {
	for _, seed := range []string{
		`{"idempotency_key": "ex-1", "from": "gold", "amount": 10, "to": "credits"}`,
		`{"idempotency_key": "ex-1", "from": "gold", "amount": -10, "to": "gold", "meta": {"a": [1, 2, {"b": null}]}}`,
		`{"amount": 1e3}`, `{"amount": 99999999999999999999}`, `{"meta": "x"}`,
	} {
		f.Add([]byte(seed))
	}
	cat := testCatalog(f)
	if err := cat.AddRate(1, "gold", "credits", coffer.Rate{Num: 3, Den: 2}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var body api.ExchangeBody
		if err := decodeJSON(bytes.NewReader(raw), &body, true); err != nil {
			if coffer.ErrorCode(err) != coffer.CodeInvalid {
				t.Fatalf("decode error with code %q: %v", coffer.ErrorCode(err), err)
			}
			return
		}
		req := coffer.ExchangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: 1, Emitter: 1, IdempotencyKey: body.IdempotencyKey},
			From: body.From, To: body.To, Amount: body.Amount, Reason: body.Reason, Meta: body.Meta}
		if _, err := cat.ValidateExchange(req); err != nil && coffer.ErrorCode(err) != coffer.CodeInvalid {
			t.Fatalf("validation error with code %q: %v", coffer.ErrorCode(err), err)
		}
	})
}

func TestDecodeStrict(t *testing.T) {
	for _, c := range []struct {
		body     string
		required bool
		ok       bool
	}{
		{`{"idempotency_key": "k"}`, true, true},
		{``, false, true},
		{" \n", false, true},
		{``, true, false},
		{`{"idempotency_key": "k"} x`, true, false},
		{`{"idempotency_key": "k"} {}`, true, false},
		{`{"idempotency_key": "k", "x": 1}`, true, false},
		{`{"ops": [{"currency": "gold", "amount": 1, "lot": 2}]}`, true, false},
		{`{"ops": [{"currency": "gold", "amount": "1"}]}`, true, false},
		{`null`, true, false},
		{`[]`, true, false},
		// One payload, one spelling: no name twice (encoding/json keeps
		// the last), no name in another case (it matches them), no bad
		// UTF-8 or lone surrogate (it makes both U+FFFD).
		{`{"idempotency_key": "a", "idempotency_key": "b"}`, true, false},
		{`{"ops": [{"currency": "gold", "amount": 1, "amount": 2}]}`, true, false},
		{`{"idempotency_key": "k", "meta": {"a": 1, "a": 2}}`, true, false},
		{`{"idempotency_key": "k", "meta": {"a": {"b": 1, "\u0062": 2}}}`, true, false},
		{`{"IDEMPOTENCY_KEY": "k"}`, true, false},
		{`{"Idempotency_Key": "k"}`, true, false},
		{`{"ops": [{"Currency": "gold", "amount": 1}]}`, true, false},
		{`{"ops": [{"currency": "gold", "amount": 1, "kind": "paid", "purchase": {"STORE": "s"}}]}`, true, false},
		{"{\"idempotency_key\": \"k\xff\"}", true, false},
		{"{\"idempotency_key\": \"k\", \"meta\": {\"\xff\": 1}}", true, false},
		{`{"idempotency_key": "k\ud800"}`, true, false},
		{`{"idempotency_key": "k\ud83d\ude00"}`, true, true},
		{`{"idempotency_key": "k", "meta": {"a": 1}}`, true, true},
	} {
		var body api.ChangeBody
		err := decodeJSON(strings.NewReader(c.body), &body, c.required)
		if (err == nil) != c.ok || (err != nil && coffer.ErrorCode(err) != coffer.CodeInvalid) {
			t.Errorf("%q (required %v): %v", c.body, c.required, err)
		}
	}
	var body api.ChangeBody
	if err := decodeJSON(strings.NewReader(`{"idempotency_key": "k", "hold": true}`), &body, true); err != nil ||
		!reflect.DeepEqual(body, api.ChangeBody{IdempotencyKey: "k", Hold: true}) {
		t.Fatalf("%+v %v", body, err)
	}
	if err := decodeJSON(strings.NewReader(`{"a": 1}`), &struct{}{}, false); coffer.ErrorCode(err) != coffer.CodeInvalid {
		t.Fatalf("a body for a call that takes none: %v", err)
	}
}

// TestPathIDsHaveOneSpelling: ParseInt reads +5 and 007 as 5 and 7.
func TestPathIDsHaveOneSpelling(t *testing.T) {
	for id, ok := range map[string]bool{"5": true, "9223372036854775807": true, "+5": false, "007": false, "0": false,
		"-1": false, " 5": false, "5 ": false, "0x5": false, "5_0": false, "9223372036854775808": false, "": false} {
		r := httptest.NewRequest("GET", "/", nil)
		r.SetPathValue("namespace", "1")
		r.SetPathValue("player_id", id)
		_, p, err := pathPlayer(r)
		if (err == nil) != ok || (err != nil && coffer.ErrorCode(err) != coffer.CodeInvalid) || (ok && strconv.FormatInt(int64(p), 10) != id) {
			t.Errorf("player %q: %d %v", id, p, err)
		}
		r.SetPathValue("namespace", id)
		r.SetPathValue("player_id", "1")
		if _, err := pathNamespace(r); (err == nil) != (ok && len(id) < 10) {
			t.Errorf("namespace %q: %v", id, err)
		}
	}
	for limit, ok := range map[string]bool{"5": true, "0": true, "%2B5": false, "007": false, "-1": false} {
		v, err := checkQuery(httptest.NewRequest("GET", "/?limit="+limit, nil), []string{"limit"})
		if err != nil {
			t.Fatal(err)
		}
		q := &params{v: v}
		q.int("limit")
		if (q.err == nil) != ok {
			t.Errorf("limit %q: %v", limit, q.err)
		}
	}
}

// BenchmarkDecodeChange is the strict decoder on a typical change: the
// strict reader, the names' check and encoding/json.
func BenchmarkDecodeChange(b *testing.B) {
	raw := []byte(`{"idempotency_key": "order-7731", "ops": [{"currency": "gold", "amount": 500, "kind": "paid", "purchase": {"store": "steam", "order_id": "7731", "price": 499, "fiat": "USD"}}, {"currency": "credits", "amount": -20}], "reason": "purchase", "meta": {"any": "json", "n": 12}}`)
	for b.Loop() {
		var body api.ChangeBody
		if err := decodeJSON(bytes.NewReader(raw), &body, true); err != nil {
			b.Fatal(err)
		}
	}
}
