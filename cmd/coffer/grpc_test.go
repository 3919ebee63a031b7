package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	coffergrpc "github.com/cofferhq/coffer/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// rawCodec sends a request's bytes as they are, so a test can send what
// no protobuf encoder writes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

func wantGRPC(t *testing.T, err error, c codes.Code, code coffer.Code) {
	t.Helper()
	if status.Code(err) != c || coffergrpc.Code(err) != code {
		t.Fatalf("got %v (coffer code %q), want %s / %s", err, coffergrpc.Code(err), c, code)
	}
}

// TestGRPCEveryCall drives every rpc over gRPC, with replays and errors.
func TestGRPCEveryCall(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	w, dev := s.grpc, grpcCtx(devKey)
	const p = 314
	meta, _ := structpb.NewStruct(map[string]any{"match": "m-1", "score": 12})
	change := &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "g-1", Reason: "reward", Meta: meta,
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 50}, {Currency: "silver", Amount: 900, Kind: "paid",
			Purchase: &cofferv1.Purchase{Store: "apple", OrderId: "a1", Price: 199, Fiat: "USD"}}}}
	var hdr metadata.MD
	trx, err := w.Change(dev, change, grpc.Header(&hdr))
	must(t, err)
	if len(hdr.Get("coffer-replay")) != 0 || trx.Version != 1 || len(trx.Ops) != 2 || trx.Meta.Fields["score"].GetNumberValue() != 12 {
		t.Fatalf("change %v, header %v", trx, hdr)
	}
	again, err := w.Change(dev, change, grpc.Header(&hdr))
	must(t, err)
	if hdr.Get("coffer-replay")[0] != "true" || again.Id != trx.Id {
		t.Fatalf("replay %v, header %v", again, hdr)
	}
	// The same payload sent over HTTP is a replay too: meta is compared in
	// canonical form.
	r := s.call("POST", "/v1/namespaces/1/players/314/transactions", devKey, `{"idempotency_key": "g-1", "reason": "reward",
	  "meta": {"score": 12, "match": "m-1"}, "ops": [{"currency": "gold", "amount": 50}, {"currency": "silver", "amount": 900,
	  "kind": "paid", "purchase": {"store": "apple", "order_id": "a1", "price": 199, "fiat": "USD"}}]}`)
	wantStatus(t, r, 200, "")
	change.Ops[0].Amount = 51
	_, err = w.Change(dev, change)
	wantGRPC(t, err, codes.AlreadyExists, coffer.CodeIdempotencyConflict)

	bal, err := w.GetBalances(dev, &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: p, Lots: true})
	must(t, err)
	if bal.Version != 1 || bal.Balances[0].Total != 50 || bal.Balances[1].Paid != 900 || len(bal.Balances[1].Lots) != 1 {
		t.Fatalf("balances %v", bal)
	}
	past, err := w.GetBalances(dev, &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: p, At: timestamppb.New(trx.CreatedAt.AsTime().Add(-time.Second))})
	must(t, err)
	if len(past.Balances) != 0 {
		t.Fatalf("before the first trx the player held nothing: %v", past)
	}

	_, err = w.Change(dev, &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h-1", Hold: true, HoldTtlSeconds: 60,
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: -20}}})
	must(t, err)
	ref := &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h-1"}
	committed, err := w.Commit(dev, ref)
	must(t, err)
	if committed.Status != "committed" {
		t.Fatalf("commit %v", committed)
	}
	_, err = w.Rollback(dev, ref)
	wantGRPC(t, err, codes.FailedPrecondition, coffer.CodeHoldNotPending)
	got, err := w.GetTrx(dev, ref)
	must(t, err)
	if got.Id != committed.Id {
		t.Fatalf("GetTrx %v", got)
	}
	_, err = w.GetTrx(dev, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "none"})
	wantGRPC(t, err, codes.NotFound, coffer.CodeNotFound)
	_, err = w.Change(dev, &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h-2", Hold: true,
		Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: -1}}})
	must(t, err)
	rolled, err := w.Rollback(dev, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h-2"})
	must(t, err)
	if rolled.Status != "rolled_back" {
		t.Fatalf("rollback %v", rolled)
	}

	ex, err := w.Exchange(dev, &cofferv1.ExchangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "x-1", From: "silver", To: "credits", Amount: 100})
	must(t, err)
	if ex.Kind != "exchange" {
		t.Fatalf("exchange %v", ex)
	}
	_, err = w.Exchange(dev, &cofferv1.ExchangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "x-2", From: "gold", To: "silver", Amount: 1000})
	wantGRPC(t, err, codes.FailedPrecondition, coffer.CodeInsufficientFunds)

	page, err := w.Finlog(dev, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: p, Limit: 2, Order: "desc"})
	must(t, err)
	if len(page.Items) != 2 || page.Items[0].IdempotencyKey != "x-1" || page.NextCursor == "" {
		t.Fatalf("finlog %v", page)
	}
	page, err = w.Finlog(dev, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: p, Cursor: page.NextCursor, Order: "desc"})
	must(t, err)
	if len(page.Items) != 2 || page.NextCursor != "" {
		t.Fatalf("finlog page 2 %v", page)
	}
	refund := &cofferv1.RefundRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "r-1", Store: "apple", OrderId: "a1", Kind: "chargeback"}
	refunded, err := w.Refund(dev, refund, grpc.Header(&hdr))
	must(t, err)
	// 100 of the 900 paid silver went into credits: under silver's
	// write_off they are the shortfall.
	if refunded.Kind != "refund" || refunded.Refund.GetKind() != "chargeback" || len(refunded.Ops) != 1 || refunded.Ops[0].Amount != -800 || refunded.Ops[0].Cause != "refund" ||
		len(refunded.Refund.Shortfall) != 1 || refunded.Refund.Shortfall[0].Amount != 100 || refunded.Refund.Shortfall[0].Value != 22 || // 100 of 900 bought for 199
		len(hdr.Get("coffer-replay")) != 0 {
		t.Fatalf("refund %v", refunded)
	}
	again, err = w.Refund(dev, refund, grpc.Header(&hdr))
	must(t, err)
	if hdr.Get("coffer-replay")[0] != "true" || again.Id != refunded.Id {
		t.Fatalf("refund replay %v, header %v", again, hdr)
	}
	refund.IdempotencyKey = "r-2"
	_, err = w.Refund(dev, refund)
	wantGRPC(t, err, codes.AlreadyExists, coffer.CodeAlreadyRefunded)
	refund.OrderId = "a2"
	_, err = w.Refund(dev, refund)
	wantGRPC(t, err, codes.NotFound, coffer.CodeNotFound)
	rev, err := w.Revenue(dev, &cofferv1.RevenueRequest{Namespace: 1, From: timestamppb.New(time.Now().Add(-time.Hour)), To: timestamppb.New(time.Now().Add(time.Hour))})
	must(t, err)
	if len(rev.Lines) == 0 {
		t.Fatalf("revenue %v", rev)
	}
	st, err := w.GetStatus(dev, &cofferv1.StatusRequest{})
	must(t, err)
	if st.ShardCount != 8 || st.ShardsAvailable != 8 {
		t.Fatalf("status %v", st)
	}
	// The batches' own pools, which wrote the above, beside the router's.
	batchConns := int32(0)
	for _, db := range st.Databases {
		if db.BatchConnsMax < 1 || db.BatchConnsTotal > db.BatchConnsMax {
			t.Fatalf("database %s: batch connections %d of %d", db.Name, db.BatchConnsTotal, db.BatchConnsMax)
		}
		batchConns += db.BatchConnsTotal
	}
	if batchConns == 0 {
		t.Fatalf("no batch connection in the status after writes: %v", st)
	}
}

// TestGRPCErrors: auth and bad input map to their gRPC codes with the
// coffer code as ErrorInfo reason.
func TestGRPCErrors(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	w := s.grpc
	bal := &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: 1}
	_, err := w.GetBalances(ctx, bal)
	wantGRPC(t, err, codes.Unauthenticated, coffer.CodeUnauthenticated)
	_, err = w.GetBalances(grpcCtx("wrong"), bal)
	wantGRPC(t, err, codes.Unauthenticated, coffer.CodeUnauthenticated)
	_, err = w.Change(grpcCtx(readerKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "k", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}})
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	_, err = w.GetBalances(grpcCtx(devKey), &cofferv1.GetBalancesRequest{Namespace: 3, PlayerId: 1})
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	for _, key := range []string{readerKey, auditorKey} {
		_, err = w.GetStatus(grpcCtx(key), &cofferv1.StatusRequest{})
		wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	}
	_, err = w.GetStatus(grpcCtx(monitorKey), &cofferv1.StatusRequest{})
	must(t, err)
	_, err = w.GetBalances(grpcCtx(devKey), &cofferv1.GetBalancesRequest{Namespace: 0, PlayerId: 1})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.GetBalances(grpcCtx(devKey), &cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: -4})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "k", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 0}}})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.Finlog(grpcCtx(devKey), &cofferv1.FinlogRequest{Namespace: 1, PlayerId: 1, Order: "up"})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.Revenue(grpcCtx(devKey), &cofferv1.RevenueRequest{Namespace: 1})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	// gRPC validates what HTTP validates: an expiry AsTime would read as
	// another time (the driver wrapped this one to 1970) is refused.
	_, err = w.Change(grpcCtx(devKey), &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "k", Ops: []*cofferv1.OpRequest{
		{Currency: "gold", Amount: 1, Kind: "paid", ExpiresAt: &timestamppb.Timestamp{Seconds: 1 << 62},
			Purchase: &cofferv1.Purchase{Store: "s", OrderId: "o", Price: 1, Fiat: "USD"}}}})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.Finlog(grpcCtx(devKey), &cofferv1.FinlogRequest{Namespace: 1, PlayerId: 1, From: &timestamppb.Timestamp{Nanos: -1}})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	_, err = w.Finlog(grpcCtx(devKey), &cofferv1.FinlogRequest{Namespace: 1, PlayerId: 1, From: timestamppb.New(time.Now()), To: timestamppb.New(time.Now().Add(-time.Hour))})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	// The scheme is Bearer, in any case, and required.
	_, err = w.GetBalances(metadata.AppendToOutgoingContext(ctx, "authorization", devKey), bal)
	wantGRPC(t, err, codes.Unauthenticated, coffer.CodeUnauthenticated)
	_, err = w.GetBalances(metadata.AppendToOutgoingContext(ctx, "authorization", "bearer "+devKey), bal)
	must(t, err)
	// Refused while decoding, before any interceptor in gRPC itself: the
	// code is carried all the same, after the key is checked.
	big := &cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "k", Reason: string(make([]byte, 70<<10))}
	_, err = w.Change(grpcCtx(devKey), big)
	wantGRPC(t, err, codes.ResourceExhausted, coffer.CodePayloadTooLarge)
	_, err = w.Change(grpcCtx("wrong"), big)
	wantGRPC(t, err, codes.Unauthenticated, coffer.CodeUnauthenticated)
	// Field 1 announces 5 bytes and 1 follows: no valid ChangeRequest.
	_, err = s.invokeRaw(devKey, cofferv1.Wallet_Change_FullMethodName, []byte{0x0a, 0x05, 0x61})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	// Over its rpc's limit, the message is refused by its size before it
	// is decoded: decoding takes many times the bytes sent.
	junk := append([]byte{0x0a, 0x05, 0x61}, make([]byte, 70<<10)...)
	_, err = s.invokeRaw(devKey, cofferv1.Wallet_Change_FullMethodName, junk)
	wantGRPC(t, err, codes.ResourceExhausted, coffer.CodePayloadTooLarge)
	// A field the contract does not have, at the top or in an op, is
	// refused as HTTP refuses an unknown name: a client that sends one
	// (a dry_run of its own version of the contract) must not be
	// written as if it had not.
	unknown := func(raw []byte) []byte {
		return protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 1)
	}
	top, _ := proto.Marshal(&cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "u1", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 3}}})
	op, _ := proto.Marshal(&cofferv1.OpRequest{Currency: "gold", Amount: 3})
	inOp, _ := proto.Marshal(&cofferv1.ChangeRequest{Namespace: 1, PlayerId: 1, IdempotencyKey: "u2"})
	inOp = protowire.AppendBytes(protowire.AppendTag(inOp, 4, protowire.BytesType), unknown(op)) // ops = 4
	for at, raw := range map[string][]byte{"request:": unknown(top), "request.ops[0]:": inOp} {
		_, err = s.invokeRaw(devKey, cofferv1.Wallet_Change_FullMethodName, raw)
		if status.Code(err) != codes.InvalidArgument || coffergrpc.Code(err) != coffer.CodeInvalid || !strings.Contains(err.Error(), at+" field number 99") {
			t.Errorf("an unknown field in %s %v", at, err)
		}
	}
	// The key's namespaces are checked first, as HTTP checks the path's
	// before it reads the body: namespace 3 is not the dev key's.
	other, _ := proto.Marshal(&cofferv1.ChangeRequest{Namespace: 3, PlayerId: 1, IdempotencyKey: "u3", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 3}}})
	_, err = s.invokeRaw(devKey, cofferv1.Wallet_Change_FullMethodName, unknown(other))
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	b, err := w.GetBalances(grpcCtx(devKey), bal)
	must(t, err)
	if b.Version != 0 {
		t.Fatalf("refused requests wrote: %v", b)
	}
}

// TestGRPCRefusesAKeyBeforeItsMessage: a key that does not authenticate,
// or whose client lacks the call's permission, is refused on the call's
// headers, before its message is read or decoded, as HTTP refuses one
// before the body: a caller without a key, or with a key of another
// permission, cannot make the server hold a message (up to 8 MiB, and
// many times that decoded) per stream. These streams send none; read
// first, gRPC would wait for it until the deadline.
func TestGRPCRefusesAKeyBeforeItsMessage(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	for _, c := range []struct {
		key, method string
		code        codes.Code
		coffer      coffer.Code
	}{
		{"wrong", cofferv1.Wallet_Change_FullMethodName, codes.Unauthenticated, coffer.CodeUnauthenticated},
		{monitorKey, cofferv1.Wallet_BatchChange_FullMethodName, codes.PermissionDenied, coffer.CodePermissionDenied},
		{readerKey, cofferv1.Wallet_Change_FullMethodName, codes.PermissionDenied, coffer.CodePermissionDenied},
		{auditorKey, cofferv1.Wallet_GetStatus_FullMethodName, codes.PermissionDenied, coffer.CodePermissionDenied},
	} {
		waitCtx, cancel := context.WithTimeout(grpcCtx(c.key), 20*time.Second)
		stream, err := s.conn.NewStream(waitCtx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, c.method, grpc.ForceCodec(rawCodec{}))
		must(t, err)
		wantGRPC(t, stream.RecvMsg(new([]byte)), c.code, c.coffer)
		cancel()
	}
	// Measured as any call is, under its rpc; a method the caller made up
	// (refused on its headers too) is no label of the metrics.
	_, err := s.invokeRaw("wrong", "/coffer.v1.Wallet/MadeUp", []byte{})
	wantGRPC(t, err, codes.Unauthenticated, coffer.CodeUnauthenticated)
	metrics := s.metrics()
	if !strings.Contains(metrics, `coffer_request_duration_seconds_count{call="Change",outcome="unauthenticated"} 1`) ||
		!strings.Contains(metrics, `coffer_request_duration_seconds_count{call="BatchChange",outcome="permission_denied"} 1`) || strings.Contains(metrics, "MadeUp") {
		t.Fatalf("metrics of refused calls:\n%s", grepLines(metrics, "coffer_request_duration_seconds_count"))
	}
}

// TestRequestIDOverBothTransports: HTTP and gRPC keep a caller's sane
// request id and replace any other by the same rule (api.RequestID):
// a space would split the id in a log line, on either transport.
func TestRequestIDOverBothTransports(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	for given, kept := range map[string]bool{"trace-7731": true, "trace 7731": false} {
		req, err := http.NewRequest("GET", s.base+"/v1/namespaces/1/players/1/balances", nil)
		must(t, err)
		req.Header.Set("Authorization", "Bearer "+devKey)
		req.Header.Set("X-Request-Id", given)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		if got := resp.Header.Get("X-Request-Id"); (got == given) != kept || got == "" {
			t.Errorf("HTTP: sent %q, answered %q; kept: want %v", given, got, kept)
		}
		var hdr metadata.MD
		_, err = s.grpc.GetBalances(metadata.AppendToOutgoingContext(grpcCtx(devKey), "x-request-id", given),
			&cofferv1.GetBalancesRequest{Namespace: 1, PlayerId: 1}, grpc.Header(&hdr))
		must(t, err)
		if got := hdr.Get("x-request-id"); len(got) != 1 || (got[0] == given) != kept || got[0] == "" {
			t.Errorf("gRPC: sent %q, answered %q; kept: want %v", given, got, kept)
		}
	}
}
