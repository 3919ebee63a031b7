package grpc

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	cofferhttp "github.com/cofferhq/coffer/http"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func testCatalog(tb testing.TB) *coffer.Catalog {
	tb.Helper()
	c, err := coffer.NewCatalog([]coffer.Currency{{ID: 1, Code: "gold", Paid: true}, {ID: 2, Code: "silver", Paid: true}, {ID: 3, Code: "credits"}},
		10*time.Minute, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.AddRate(1, "gold", "silver", coffer.Rate{Num: 100, Den: 1}); err != nil {
		tb.Fatal(err)
	}
	return c
}

var fuzzScope = coffer.Scope{Namespace: 1, PlayerID: 42, Emitter: 7}

// outcome is what the domain makes of a request: its hash, or its error's
// code.
func outcome(c *coffer.Catalog, req any, err error) string {
	if err == nil {
		switch r := req.(type) {
		case coffer.ChangeRequest:
			var v coffer.ValidChange
			if v, err = c.ValidateChange(r); err == nil {
				return hex.EncodeToString(v.Hash.Sum)
			}
		case coffer.ExchangeRequest:
			var v coffer.ValidExchange
			if v, err = c.ValidateExchange(r); err == nil {
				return hex.EncodeToString(v.Hash.Sum)
			}
		}
	}
	return "error " + string(coffer.ErrorCode(err))
}

// TestTimestampsAreChecked: a timestamp AsTime would take for another
// time is invalid_argument, in every request that carries one (a paid
// grant was acknowledged with an expiry wrapped to 1970).
func TestTimestampsAreChecked(t *testing.T) {
	s, ctx := &Server{}, context.Background()
	for name, ts := range map[string]*timestamppb.Timestamp{
		"past year 9999":    {Seconds: 1 << 62},
		"before year 0001":  {Seconds: -1 << 40},
		"negative nanos":    {Seconds: 2e9, Nanos: -1},
		"a second of nanos": {Seconds: 2e9, Nanos: 1e9},
	} {
		_, err := changeRequest(&cofferv1.ChangeRequest{Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: ts}}}, fuzzScope)
		_, err2 := s.GetBalances(ctx, &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: 1, At: ts})
		_, err3 := s.Finlog(ctx, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: 1, To: ts})
		_, err4 := s.Revenue(ctx, &cofferv1.RevenueRequest{Namespace: 1, From: timestamppb.Now(), To: ts})
		for i, err := range []error{err, err2, err3, err4} {
			if coffer.ErrorCode(err) != coffer.CodeInvalid {
				t.Errorf("%s (%d): %v", name, i, err)
			}
		}
	}
}

// TestMetaReadsBack: canonical meta becomes a Struct that protojson writes
// as the same meta; meta stored before it was canonical, with numbers
// beyond a double, still reads (protojson refused the whole trx).
func TestMetaReadsBack(t *testing.T) {
	c := testCatalog(t)
	v, err := c.ValidateChange(coffer.ChangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "k"},
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1}}, Meta: []byte(`{"a":[1,2.5,"x",null,true,{"b":1e-7}],"c":-9007199254740991}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, v.Meta); !bytes.Equal(got, v.Meta) {
		t.Errorf("meta %s reads back as %s", v.Meta, got)
	}
	legacy := json.RawMessage(`{"a": 1` + strings.Repeat("0", 400) + `, "b": 12345678901234567890}`)
	trx, err := toTrx(coffer.Trx{Meta: legacy})
	if err != nil || !math.IsInf(trx.Meta.Fields["a"].GetNumberValue(), 1) || trx.Meta.Fields["b"].GetNumberValue() != 12345678901234567890 {
		t.Fatalf("legacy meta %s: %v %v", legacy, trx, err)
	}
}

// readBack is meta as a gRPC reader gets it, written out as JSON.
func readBack(tb testing.TB, meta json.RawMessage) json.RawMessage {
	tb.Helper()
	trx, err := toTrx(coffer.Trx{Meta: meta})
	if err != nil {
		tb.Fatalf("meta %s: %v", meta, err)
	}
	raw, err := metaJSON(trx.Meta)
	if err != nil {
		tb.Fatalf("meta %s: %v", meta, err)
	}
	v, err := testCatalog(tb).ValidateChange(coffer.ChangeRequest{Scope: coffer.Scope{Namespace: 1, PlayerID: 1, IdempotencyKey: "k"},
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1}}, Meta: raw})
	if err != nil {
		tb.Fatalf("meta %s read back as %s: %v", meta, raw, err)
	}
	return v.Meta
}

// FuzzTransportsAgree feeds one JSON text to both transports: as an HTTP
// body, and as the proto3 JSON of the gRPC message. Where both can read
// it, the domain must make the same of it: the same hash, or the same
// error code.
func FuzzTransportsAgree(f *testing.F) {
	for _, seed := range []string{
		`{"idempotency_key": "order-7731", "ops": [{"currency": "gold", "amount": 500, "kind": "paid", "purchase": {"store": "steam", "order_id": "7731", "price": 499, "fiat": "USD"}}, {"currency": "silver", "amount": -20}], "reason": "purchase", "meta": {"any": "json", "n": [2.50, 1e2, -0]}, "hold": false}`,
		`{"idempotency_key": "h", "ops": [{"currency": "gold", "amount": -1}], "hold": true, "hold_ttl_seconds": 30}`,
		`{"idempotency_key": "e", "ops": [{"currency": "credits", "amount": 1, "kind": "free", "expires_at": "2030-01-01T01:00:00.0000015+01:00", "priority": 3}]}`,
		`{"idempotency_key": "m", "ops": [{"currency": "gold", "amount": 1}], "meta": {"big": 9007199254740993, "s": "\u0000<>"}}`,
		`{"idempotency_key": "m", "ops": [{"currency": "gold", "amount": 1}], "meta": {}}`,
		`{"idempotency_key": "m", "ops": [{"currency": "gold", "amount": 1}], "meta": null, "reason": "a\u0000"}`,
		`{"idempotency_key": "x", "from": "gold", "amount": 10, "to": "silver", "meta": {"b": 1, "a": [0.10000000000000001]}}`,
		`{"idempotency_key": "x", "from": "gold", "amount": 0, "to": "credits"}`,
		`{"idempotency_key": "", "ops": []}`,
	} {
		f.Add([]byte(seed))
	}
	c := testCatalog(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		change, errH := cofferhttp.DecodeChange(bytes.NewReader(raw), fuzzScope)
		var msg cofferv1.ChangeRequest
		if err := protojson.Unmarshal(raw, &msg); err == nil && errH == nil {
			viaGRPC, errG := changeRequest(&msg, scopeOf(&msg))
			if h, g := outcome(c, change, errH), outcome(c, viaGRPC, errG); h != g {
				t.Fatalf("change %s: over HTTP %s, over gRPC %s", raw, h, g)
			}
		}
		exchange, errH := cofferhttp.DecodeExchange(bytes.NewReader(raw), fuzzScope)
		var xmsg cofferv1.ExchangeRequest
		if err := protojson.Unmarshal(raw, &xmsg); err == nil && errH == nil {
			viaGRPC, errG := exchangeRequest(&xmsg, scopeOf(&xmsg))
			if h, g := outcome(c, exchange, errH), outcome(c, viaGRPC, errG); h != g {
				t.Fatalf("exchange %s: over HTTP %s, over gRPC %s", raw, h, g)
			}
		}
	})
}

// scopeOf is the scope of a gRPC write as the HTTP side of the fuzz has
// it: the path's namespace and player, the client's emitter.
func scopeOf(m interface{ GetIdempotencyKey() string }) coffer.Scope {
	sc := fuzzScope
	sc.IdempotencyKey = m.GetIdempotencyKey()
	return sc
}

// FuzzGRPCChange drives the converters with any message gRPC can carry
// (timestamps out of range, NaN in meta): they fail only with
// invalid_argument; what the domain accepts has an HTTP body with the same
// hash; and its meta reads back over gRPC as it was written.
func FuzzGRPCChange(f *testing.F) {
	meta, _ := structpb.NewStruct(map[string]any{"a": 2.5, "b": []any{"x", nil, true}, "c": map[string]any{"d": 1e-7}})
	odd, _ := structpb.NewStruct(map[string]any{"nan": math.NaN(), "inf": math.Inf(1), "big": 1e300, "id": 1 << 53})
	exp := timestamppb.New(time.Date(2030, 1, 1, 0, 0, 0, 1500, time.UTC))
	for _, m := range []*cofferv1.ChangeRequest{
		{IdempotencyKey: "k", Reason: "r", Meta: meta, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 5, Kind: "paid",
			Purchase: &cofferv1.Purchase{Store: "s", OrderId: "o", Price: 1, Fiat: "USD"}}, {Currency: "credits", Amount: 1, ExpiresAt: exp, Priority: 2}}},
		{IdempotencyKey: "k", Meta: odd, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}},
		{IdempotencyKey: "k", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &timestamppb.Timestamp{Seconds: 1 << 62}}}},
		{IdempotencyKey: "k", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &timestamppb.Timestamp{Seconds: 2e9, Nanos: -1}}}},
		{IdempotencyKey: "k", Hold: true, HoldTtlSeconds: 60, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: -1}, {Currency: "silver", Amount: 2}}},
	} {
		raw, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	c := testCatalog(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var msg cofferv1.ChangeRequest
		if proto.Unmarshal(raw, &msg) != nil {
			return
		}
		req, err := changeRequest(&msg, scopeOf(&msg))
		if err != nil {
			if coffer.ErrorCode(err) != coffer.CodeInvalid {
				t.Fatalf("converter error with code %q: %v", coffer.ErrorCode(err), err)
			}
			return
		}
		v, err := c.ValidateChange(req)
		if err != nil {
			if coffer.ErrorCode(err) != coffer.CodeInvalid {
				t.Fatalf("validation error with code %q: %v", coffer.ErrorCode(err), err)
			}
			return
		}
		body, err := json.Marshal(api.ChangeBody{IdempotencyKey: req.IdempotencyKey, Ops: req.Ops, Reason: req.Reason,
			Meta: req.Meta, Hold: req.Hold, HoldTTLSeconds: int64(req.HoldTTL / time.Second)})
		if err != nil {
			t.Fatalf("%v has no HTTP body: %v", req, err)
		}
		viaHTTP, err := cofferhttp.DecodeChange(bytes.NewReader(body), fuzzScope)
		if h := outcome(c, viaHTTP, err); h != hex.EncodeToString(v.Hash.Sum) {
			t.Fatalf("%s: over gRPC %x, over HTTP %s", body, v.Hash.Sum, h)
		}
		if v.Meta != nil {
			if back := readBack(t, v.Meta); !bytes.Equal(back, v.Meta) {
				t.Fatalf("meta %s reads back over gRPC as %s", v.Meta, back)
			}
		}
	})
}
