package grpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// optTime reads a timestamp a request may leave out. One that is not
// valid (nanos out of range, or beyond the years 0001–9999) is
// invalid_argument: AsTime would take it as some other time.
func optTime(field string, ts *timestamppb.Timestamp) (*time.Time, error) {
	if ts == nil {
		return nil, nil
	}
	if err := ts.CheckValid(); err != nil {
		return nil, coffer.Errorf(coffer.CodeInvalid, "%s: %v", field, err)
	}
	t := ts.AsTime()
	return &t, nil
}

func optTimestamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// metaJSON is a request's meta as JSON; the domain checks it and makes it
// canonical, so the same meta sent over HTTP and gRPC is the same payload.
// It is compacted: protojson puts spaces after commas or not depending on
// the build, and the domain bounds meta as sent, so the same meta would be
// accepted by one build and refused by the next.
func metaJSON(s *structpb.Struct) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	raw, err := protojson.Marshal(s)
	if err != nil {
		return nil, coffer.Errorf(coffer.CodeInvalid, "meta: %v", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// changeRequest is a Change rpc's request as the domain takes it; the
// domain validates it, as it does what the HTTP transport decodes.
func changeRequest(req *cofferv1.ChangeRequest, sc coffer.Scope) (coffer.ChangeRequest, error) {
	meta, err := metaJSON(req.Meta)
	if err != nil {
		return coffer.ChangeRequest{}, err
	}
	ttl, err := api.HoldTTL(req.HoldTtlSeconds)
	if err != nil {
		return coffer.ChangeRequest{}, err
	}
	out := coffer.ChangeRequest{Scope: sc, Reason: req.Reason, Meta: meta, Hold: req.Hold, HoldTTL: ttl,
		Ops: make([]coffer.OpRequest, len(req.Ops))}
	for i, op := range req.Ops {
		if out.Ops[i], err = fromOpRequest(i, op); err != nil {
			return coffer.ChangeRequest{}, err
		}
	}
	return out, nil
}

func fromOpRequest(i int, op *cofferv1.OpRequest) (coffer.OpRequest, error) {
	expires, err := optTime(fmt.Sprintf("ops[%d].expires_at", i), op.ExpiresAt)
	if err != nil {
		return coffer.OpRequest{}, err
	}
	out := coffer.OpRequest{Currency: op.Currency, Amount: coffer.Amount(op.Amount), Kind: op.Kind,
		ExpiresAt: expires, Priority: op.Priority}
	if p := op.Purchase; p != nil {
		out.Purchase = &coffer.Purchase{Store: p.Store, OrderID: p.OrderId, Price: p.Price, Fiat: p.Fiat}
	}
	return out, nil
}

// exchangeRequest is an Exchange rpc's request as the domain takes it.
func exchangeRequest(req *cofferv1.ExchangeRequest, sc coffer.Scope) (coffer.ExchangeRequest, error) {
	meta, err := metaJSON(req.Meta)
	if err != nil {
		return coffer.ExchangeRequest{}, err
	}
	return coffer.ExchangeRequest{Scope: sc, From: req.From, To: req.To, Amount: coffer.Amount(req.Amount),
		Reason: req.Reason, Meta: meta}, nil
}

func toMoney(m *coffer.Money) *cofferv1.Money {
	if m == nil {
		return nil
	}
	return &cofferv1.Money{Amount: int64(m.Amount), Fiat: m.Fiat}
}

func toPurchase(p *coffer.Purchase) *cofferv1.Purchase {
	if p == nil {
		return nil
	}
	return &cofferv1.Purchase{Store: p.Store, OrderId: p.OrderID, Price: p.Price, Fiat: p.Fiat}
}

func toBalance(b coffer.Balance) *cofferv1.Balance {
	out := &cofferv1.Balance{Currency: b.Currency, Total: int64(b.Total), Paid: int64(b.Paid), Free: int64(b.Free)}
	for _, l := range b.Lots {
		out.Lots = append(out.Lots, &cofferv1.Lot{Id: l.ID, Currency: l.Currency, Paid: l.Paid, Amount: int64(l.Amount),
			ExpiresAt: optTimestamp(l.ExpiresAt), Priority: l.Priority, CreatedAt: timestamppb.New(l.CreatedAt)})
	}
	return out
}

func toBalances(b coffer.Balances) *cofferv1.Balances {
	out := &cofferv1.Balances{Namespace: int32(b.Namespace), PlayerId: int64(b.PlayerID), Version: b.Version, At: optTimestamp(b.At)}
	for _, bal := range b.Balances {
		out.Balances = append(out.Balances, toBalance(bal))
	}
	return out
}

func toTrx(t coffer.Trx) (*cofferv1.Trx, error) {
	out := &cofferv1.Trx{Id: t.ID, IdempotencyKey: t.IdempotencyKey, Emitter: int32(t.Emitter), Kind: string(t.Kind), Status: string(t.Status),
		Reason: t.Reason, CreatedAt: timestamppb.New(t.CreatedAt), HoldExpiresAt: optTimestamp(t.HoldExpiresAt), Version: t.Version,
		FinishedBy: int32(t.FinishedBy)}
	if len(t.Meta) > 0 {
		meta, err := coffer.ParseJSON(t.Meta, math.MaxInt)
		if err != nil {
			return nil, fmt.Errorf("trx %d: meta: %w", t.ID, err)
		}
		out.Meta = toValue(meta).GetStructValue()
	}
	for _, op := range t.Ops {
		out.Ops = append(out.Ops, &cofferv1.Op{Currency: op.Currency, Amount: int64(op.Amount), Kind: string(op.Kind), Cause: string(op.Cause),
			Paid: op.Paid, LotId: op.LotID, BalanceAfter: int64(op.BalanceAfter), Pending: op.Pending, Purchase: toPurchase(op.Purchase), Value: toMoney(op.Value)})
	}
	for _, b := range t.Balances {
		out.Balances = append(out.Balances, toBalance(b))
	}
	if r := t.Refund; r != nil {
		out.Refund = &cofferv1.Refund{Store: r.Store, OrderId: r.OrderID, Kind: string(r.Kind),
			Shortfall: toRefundAmounts(r.Shortfall), Exchanged: toRefundAmounts(r.Exchanged)}
	}
	return out, nil
}

func toClientInfo(c api.ClientInfo) *cofferv1.ClientInfo {
	out := &cofferv1.ClientInfo{Name: c.Name, Emitter: int32(c.Emitter)}
	for _, ns := range c.Namespaces {
		out.Namespaces = append(out.Namespaces, int32(ns))
	}
	for _, p := range c.Permissions {
		out.Permissions = append(out.Permissions, string(p))
	}
	for _, n := range c.Clients {
		out.Clients = append(out.Clients, &cofferv1.ClientName{Emitter: int32(n.Emitter), Name: n.Name, Support: n.Support})
	}
	return out
}

func toRefundAmounts(in []coffer.RefundAmount) []*cofferv1.RefundAmount {
	var out []*cofferv1.RefundAmount
	for _, a := range in {
		out = append(out, &cofferv1.RefundAmount{Currency: a.Currency, Amount: int64(a.Amount), Value: int64(a.Value)})
	}
	return out
}

func toStatusMessage(st coffer.Status) *cofferv1.Status {
	out := &cofferv1.Status{Version: st.Version, StartedAt: timestamppb.New(st.StartedAt), ShardCount: st.ShardCount, ShardsAvailable: st.ShardsAvailable}
	for _, db := range st.Databases {
		d := &cofferv1.DatabaseStatus{Name: db.Name, Up: db.Up, SchemaVerified: db.SchemaVerified, Error: db.Error,
			CheckedAt: optTimestamp(db.CheckedAt), ConnsTotal: db.ConnsTotal, ConnsAcquired: db.ConnsAcquired, ConnsMax: db.ConnsMax,
			BatchConnsTotal: db.BatchConnsTotal, BatchConnsAcquired: db.BatchConnsAcquired, BatchConnsMax: db.BatchConnsMax,
			Primary: db.Primary, WritesRefused: db.WritesRefused}
		if db.SynchronousStandbys != nil {
			d.SynchronousStandbys = *db.SynchronousStandbys
		}
		for _, r := range db.Shards {
			d.Shards = append(d.Shards, &cofferv1.ShardRange{Min: r.Min, Max: r.Max})
		}
		out.Databases = append(out.Databases, d)
	}
	for _, mv := range st.Moves {
		out.Moves = append(out.Moves, &cofferv1.ShardMove{Shard: mv.Shard, Epoch: mv.Epoch, Source: mv.Source, Target: mv.Target, State: mv.State})
	}
	return out
}

// toValue is a JSON value as a google.protobuf.Value. It cannot fail:
// meta stored by this version is canonical, and its numbers are doubles;
// a number stored before beyond the range of a double reads as ±Inf
// (protojson would refuse the whole trx).
func toValue(v *coffer.JSONValue) *structpb.Value {
	switch v.Kind {
	case coffer.JSONObject:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(v.Names))}
		for i, name := range v.Names {
			s.Fields[name] = toValue(v.Elems[i])
		}
		return structpb.NewStructValue(s)
	case coffer.JSONArray:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(v.Elems))}
		for i, e := range v.Elems {
			l.Values[i] = toValue(e)
		}
		return structpb.NewListValue(l)
	case coffer.JSONString:
		return structpb.NewStringValue(v.Text)
	case coffer.JSONNumber:
		f, _ := strconv.ParseFloat(v.Text, 64)
		return structpb.NewNumberValue(f)
	case coffer.JSONBool:
		return structpb.NewBoolValue(v.Text == "true")
	}
	return structpb.NewNullValue()
}
