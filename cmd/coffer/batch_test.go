package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/wallet"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const batchPath = "/v1/namespaces/1/transactions:batch"

// batchAnswer is an HTTP batch answer with each trx and error as sent.
type batchAnswer struct {
	Results []struct {
		Status int             `json:"status"`
		Trx    json.RawMessage `json:"trx"`
		Replay bool            `json:"replay"`
		Error  *struct {
			Code   coffer.Code `json:"code"`
			Detail string      `json:"detail"`
		} `json:"error"`
	} `json:"results"`
}

func (s *service) batch(key, body string) batchAnswer {
	s.t.Helper()
	r := s.call("POST", batchPath, key, body)
	wantStatus(s.t, r, http.StatusOK, "")
	var a batchAnswer
	must(s.t, json.Unmarshal(r.body, &a))
	return a
}

// TestHTTPBatchAnswersEachChangeAsAlone: a batch with new changes, a
// change that needs the one before it, failures, a replay and a conflict
// of a key used earlier in the batch, and changes that do not decode: each
// is answered, in request order, with the status and body the change sent
// alone gets; sent again, what was applied replays.
func TestHTTPBatchAnswersEachChangeAsAlone(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	changes := []string{
		`{"player_id": 501, "idempotency_key": "a", "ops": [{"currency": "gold", "amount": 100}]}`,
		`{"player_id": 502, "idempotency_key": "b", "ops": [{"currency": "gold", "amount": -10}]}`,
		`{"player_id": 501, "idempotency_key": "c", "ops": [{"currency": "gold", "amount": -30}], "reason": "shop"}`,
		`{"player_id": 501, "idempotency_key": "a", "ops": [{"currency": "gold", "amount": 100}]}`,
		`{"player_id": 501, "idempotency_key": "a", "ops": [{"currency": "gold", "amount": 101}]}`,
		`{"player_id": 503, "idempotency_key": "d", "ops": [{"currency": "gold", "amount": 5}], "colour": "red"}`,
		`{"player_id": 503, "idempotency_key": "d", "ops": [{"currency": "gold", "amount": "5"}]}`,
		`{"player_id": 0, "idempotency_key": "d", "ops": [{"currency": "gold", "amount": 5}]}`,
		`{"player_id": 502, "idempotency_key": "e", "ops": [{"currency": "silver", "amount": 5}], "meta": {"b": 1, "a": 2}, "hold": true}`,
		`{"player_id": 503, "idempotency_key": "d", "ops": [{"currency": "gold", "amount": 1}]}`,
	}
	body := `{"changes": [` + strings.Join(changes, ",") + `]}`
	first := s.batch(devKey, body)
	want := []struct {
		status int
		code   coffer.Code
	}{{201, ""}, {409, coffer.CodeInsufficientFunds}, {201, ""}, {200, ""}, {409, coffer.CodeIdempotencyConflict},
		{400, coffer.CodeInvalid}, {400, coffer.CodeInvalid}, {400, coffer.CodeInvalid}, {201, ""}, {201, ""}}
	if len(first.Results) != len(want) {
		t.Fatalf("%d results for %d changes", len(first.Results), len(want))
	}
	for i, r := range first.Results {
		if r.Status != want[i].status || (r.Error == nil) != (want[i].code == "") || (r.Error != nil && r.Error.Code != want[i].code) ||
			(r.Trx == nil) == (r.Error == nil) || r.Replay != (r.Status == 200) {
			t.Fatalf("change %d: HTTP %d, trx %s, replay %v, error %+v; want HTTP %d %s", i, r.Status, r.Trx, r.Replay, r.Error, want[i].status, want[i].code)
		}
	}
	if !bytes.Equal(first.Results[3].Trx, first.Results[0].Trx) {
		t.Fatalf("the replay inside the batch differs:\n%s\n%s", first.Results[0].Trx, first.Results[3].Trx)
	}
	// Each change sent alone now: the body of a success is the batch's
	// trx; a failure has the batch's code and detail.
	for i, c := range changes {
		var fields map[string]json.RawMessage
		must(t, json.Unmarshal([]byte(c), &fields))
		player := string(fields["player_id"])
		delete(fields, "player_id")
		single, _ := json.Marshal(fields)
		r := s.call("POST", "/v1/namespaces/1/players/"+player+"/transactions", devKey, string(single))
		b := first.Results[i]
		if b.Error == nil {
			if r.status != 200 || !bytes.Equal(bytes.TrimSpace(r.body), b.Trx) {
				t.Fatalf("change %d alone: HTTP %d %s, in the batch %s", i, r.status, r.body, b.Trx)
			}
			continue
		}
		p := *b.Error
		must(t, json.Unmarshal(r.body, &p))
		if player == "0" {
			p.Detail = b.Error.Detail // alone, the path names the player, and its detail says so
		}
		if r.status != b.Status || p != *b.Error {
			t.Fatalf("change %d alone: HTTP %d %s, in the batch %d %+v", i, r.status, r.body, b.Status, b.Error)
		}
	}
	again := s.batch(devKey, body)
	for i, r := range again.Results {
		if first.Results[i].Error == nil && (r.Status != 200 || !bytes.Equal(r.Trx, first.Results[i].Trx)) {
			t.Fatalf("change %d sent again: %+v, first %s", i, r, first.Results[i].Trx)
		}
	}
	if g := balanceOf(t, s.dev, 501, "gold"); g.Total != 70 {
		t.Fatalf("player 501: %+v", g)
	}
}

// TestHTTPBatchEnvelope: a batch whose envelope is wrong fails as a whole,
// before any change applies.
func TestHTTPBatchEnvelope(t *testing.T) {
	s := startService(t, twoServers(t), func(c *Config) { c.Limits.BatchBodyBytesMax = 128 << 10 })
	one := `{"player_id": 601, "idempotency_key": "k", "ops": [{"currency": "gold", "amount": 5}]}`
	long := `{"player_id": 601, "idempotency_key": "k", "ops": [{"currency": "gold", "amount": 5}], "reason": "` + strings.Repeat("x", 100) + `"}`
	many := func(n int, change string) string {
		return `{"changes": [` + strings.TrimSuffix(strings.Repeat(change+",", n), ",") + `]}`
	}
	for _, c := range []struct {
		name, path, key, body string
		status                int
		code                  coffer.Code
	}{
		{"no changes", batchPath, devKey, `{"changes": []}`, 400, coffer.CodeInvalid},
		{"changes missing", batchPath, devKey, `{}`, 400, coffer.CodeInvalid},
		{"1001 changes", batchPath, devKey, many(1001, `{}`), 400, coffer.CodeInvalid},
		{"unknown field", batchPath, devKey, `{"changes": [` + one + `], "namespace": 1}`, 400, coffer.CodeInvalid},
		{"not an array", batchPath, devKey, `{"changes": {}}`, 400, coffer.CodeInvalid},
		{"body over the batch limit", batchPath, devKey, many(900, long), 413, coffer.CodePayloadTooLarge},
		{"no write permission", batchPath, readerKey, many(1, one), 403, coffer.CodePermissionDenied},
		{"namespace of no client", "/v1/namespaces/3/transactions:batch", devKey, many(1, one), 403, coffer.CodePermissionDenied},
		{"no key", batchPath, "", many(1, one), 401, coffer.CodeUnauthenticated},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantStatus(t, s.call("POST", c.path, c.key, c.body), c.status, c.code)
		})
	}
	if g := balanceOf(t, s.dev, 601, "gold"); g.Total != 0 {
		t.Fatalf("a refused batch wrote: %+v", g)
	}
	// A thousand changes, over the single-call body limit (64 KiB), are
	// fine.
	var changes []string
	for i := range coffer.BatchChangesMax {
		changes = append(changes, fmt.Sprintf(`{"player_id": %d, "idempotency_key": "k", "ops": [{"currency": "gold", "amount": 5}]}`, 1000+i))
	}
	for i, r := range s.batch(devKey, `{"changes": [`+strings.Join(changes, ",")+`]}`).Results {
		if r.Status != 201 {
			t.Fatalf("change %d of 1000: %+v", i, r)
		}
	}
	// One change over that limit is payload_too_large, as alone, and
	// the other applies.
	padded := `{"player_id": 602, "idempotency_key": "k",` + strings.Repeat(" ", 70<<10) + `"ops": [{"currency": "gold", "amount": 5}]}`
	if r := s.batch(devKey, `{"changes": [`+padded+`, `+one+`]}`).Results; r[0].Status != 413 || r[0].Error.Code != coffer.CodePayloadTooLarge ||
		r[1].Status != 201 {
		t.Fatalf("a change of 70 KiB: %+v", r)
	}
}

// TestGRPCBatch: the same semantics over gRPC, each failure a status with
// the code a single call gets; a change applied by a gRPC batch replays
// over HTTP, and the Go client's batch reads the same answers.
func TestGRPCBatch(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	w, dev := s.grpc, grpcCtx(devKey)
	change := func(player int64, key string, amount int64) *cofferv1.BatchChange {
		return &cofferv1.BatchChange{PlayerId: player, IdempotencyKey: key, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: amount}}}
	}
	req := &cofferv1.BatchChangeRequest{Namespace: 1, Changes: []*cofferv1.BatchChange{
		change(701, "g1", 50), change(701, "g2", -80), change(701, "g1", 50), change(701, "g1", 51),
		change(702, "g3", 0), {PlayerId: 702, IdempotencyKey: "g4", HoldTtlSeconds: -1, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}},
		change(702, "g5", 7), change(701, "g6", -50),
	}}
	resp, err := w.BatchChange(dev, req)
	must(t, err)
	want := []struct {
		grpc codes.Code
		code coffer.Code
	}{{codes.OK, ""}, {codes.FailedPrecondition, coffer.CodeInsufficientFunds}, {codes.OK, ""}, {codes.AlreadyExists, coffer.CodeIdempotencyConflict},
		{codes.InvalidArgument, coffer.CodeInvalid}, {codes.InvalidArgument, coffer.CodeInvalid}, {codes.OK, ""}, {codes.OK, ""}}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results for %d changes", len(resp.Results), len(want))
	}
	for i, r := range resp.Results {
		if want[i].grpc == codes.OK {
			if r.Error != nil || r.Trx == nil || r.Status != 0 || r.Replay != (i == 2) {
				t.Fatalf("change %d: %v", i, r)
			}
			continue
		}
		if r.Trx != nil {
			t.Fatalf("change %d failed with a trx: %v", i, r)
		}
		wantGRPC(t, status.ErrorProto(r.Error), want[i].grpc, want[i].code)
	}
	if resp.Results[2].Trx.Id != resp.Results[0].Trx.Id || resp.Results[7].Trx.Balances[0].Total != 0 {
		t.Fatalf("replay %v, last %v", resp.Results[2].Trx, resp.Results[7].Trx)
	}
	r := s.call("POST", "/v1/namespaces/1/players/701/transactions", devKey, `{"idempotency_key": "g1", "ops": [{"currency": "gold", "amount": 50}]}`)
	wantStatus(t, r, http.StatusOK, "")

	for _, c := range []struct {
		key  string
		req  *cofferv1.BatchChangeRequest
		grpc codes.Code
		code coffer.Code
	}{
		{devKey, &cofferv1.BatchChangeRequest{Namespace: 1}, codes.InvalidArgument, coffer.CodeInvalid},
		{devKey, &cofferv1.BatchChangeRequest{Namespace: 1, Changes: make([]*cofferv1.BatchChange, coffer.BatchChangesMax+1)}, codes.InvalidArgument, coffer.CodeInvalid},
		{devKey, &cofferv1.BatchChangeRequest{Namespace: 0, Changes: req.Changes}, codes.InvalidArgument, coffer.CodeInvalid},
		{readerKey, req, codes.PermissionDenied, coffer.CodePermissionDenied},
	} {
		_, err := w.BatchChange(grpcCtx(c.key), c.req)
		wantGRPC(t, err, c.grpc, c.code)
	}

	results, err := s.dev.BatchChange(ctx, 1, []wallet.BatchChange{
		{PlayerID: 701, IdempotencyKey: "g1", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 50}}},
		{PlayerID: 704, IdempotencyKey: "g7", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 3}}},
		{PlayerID: 704, IdempotencyKey: "g8", Ops: []coffer.OpRequest{{Currency: "gold", Amount: -4}}},
	})
	must(t, err)
	if !results[0].Replay || results[0].Trx.ID != resp.Results[0].Trx.Id || results[1].Replay || results[1].Trx.Version != 1 ||
		coffer.ErrorCode(results[2].Err) != coffer.CodeInsufficientFunds {
		t.Fatalf("client: %+v", results)
	}
}

// TestGRPCBatchLimits: a BatchChange is bounded by
// limits.batch_body_bytes_max, not by the single calls' body_bytes_max
// (64 KiB): a batch past 64 KiB is served, one past the batch's limit is
// payload_too_large; to a client that may not write, permission_denied,
// though its namespace could not be read, as HTTP refuses it before
// reading the body.
func TestGRPCBatchLimits(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	w, dev := s.grpc, grpcCtx(devKey)
	var many []*cofferv1.BatchChange
	for i := range coffer.BatchChangesMax {
		many = append(many, &cofferv1.BatchChange{PlayerId: int64(2000 + i), IdempotencyKey: "k", Reason: strings.Repeat("r", 100),
			Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}})
	}
	resp, err := w.BatchChange(dev, &cofferv1.BatchChangeRequest{Namespace: 1, Changes: many})
	must(t, err)
	for i, r := range resp.Results {
		if r.Error != nil {
			t.Fatalf("change %d of a batch past 64 KiB: %v", i, r)
		}
	}
	// One change over the single calls' limit is payload_too_large, as
	// alone, and the other applies.
	resp, err = w.BatchChange(dev, &cofferv1.BatchChangeRequest{Namespace: 1, Changes: []*cofferv1.BatchChange{
		{PlayerId: 704, IdempotencyKey: "k", Reason: strings.Repeat("r", 70<<10), Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}},
		{PlayerId: 704, IdempotencyKey: "l", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 1}}}}})
	must(t, err)
	wantGRPC(t, status.ErrorProto(resp.Results[0].Error), codes.ResourceExhausted, coffer.CodePayloadTooLarge)
	if resp.Results[1].Trx == nil {
		t.Fatalf("the change beside one of 70 KiB: %v", resp.Results[1])
	}
	big := &cofferv1.BatchChangeRequest{Namespace: 1, Changes: []*cofferv1.BatchChange{{PlayerId: 703, Reason: strings.Repeat("x", 5<<20)}}}
	_, err = w.BatchChange(dev, big)
	wantGRPC(t, err, codes.ResourceExhausted, coffer.CodePayloadTooLarge)
	_, err = w.BatchChange(grpcCtx(readerKey), big)
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
}

// TestGRPCBatchUnknownFieldFailsItsChangeAlone: a change with a field the
// contract does not have is answered invalid_argument alone, as HTTP
// answers a change with an unknown name, and the others apply; one in the
// envelope fails the call.
func TestGRPCBatchUnknownFieldFailsItsChangeAlone(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	change := func(key string, extra bool) []byte {
		raw, err := proto.Marshal(&cofferv1.BatchChange{PlayerId: 711, IdempotencyKey: key, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 3}}})
		must(t, err)
		if extra {
			raw = protowire.AppendVarint(protowire.AppendTag(raw, 99, protowire.VarintType), 1)
		}
		return raw
	}
	batch, err := proto.Marshal(&cofferv1.BatchChangeRequest{Namespace: 1})
	must(t, err)
	for i, extra := range []bool{false, true, false} {
		batch = protowire.AppendBytes(protowire.AppendTag(batch, 2, protowire.BytesType), change(fmt.Sprint("u", i), extra)) // changes = 2
	}
	raw, err := s.invokeRaw(devKey, cofferv1.Wallet_BatchChange_FullMethodName, batch)
	must(t, err)
	var resp cofferv1.BatchChangeResponse
	must(t, proto.Unmarshal(raw, &resp))
	if len(resp.Results) != 3 || resp.Results[0].Trx == nil || resp.Results[2].Trx.GetVersion() != 2 {
		t.Fatalf("the changes without the unknown field: %v", resp.Results)
	}
	bad := status.ErrorProto(resp.Results[1].Error)
	wantGRPC(t, bad, codes.InvalidArgument, coffer.CodeInvalid)
	if !strings.Contains(bad.Error(), "request: field number 99") {
		t.Fatalf("the change with an unknown field: %v", bad)
	}
	envelope := protowire.AppendVarint(protowire.AppendTag(batch, 99, protowire.VarintType), 1)
	_, err = s.invokeRaw(devKey, cofferv1.Wallet_BatchChange_FullMethodName, envelope)
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
}
