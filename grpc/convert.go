package grpc

import (
	"encoding/json"
	"time"

	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func optTime(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func optTimestamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// metaJSON is a request's meta as JSON; the domain canonicalizes it, so the
// same meta sent over HTTP and gRPC is the same payload.
func metaJSON(s *structpb.Struct) (json.RawMessage, error) {
	if s == nil {
		return nil, nil
	}
	raw, err := protojson.Marshal(s)
	if err != nil {
		return nil, coffer.Errorf(coffer.CodeInvalid, "meta: %v", err)
	}
	return raw, nil
}

func fromOpRequest(op *cofferv1.OpRequest) coffer.OpRequest {
	out := coffer.OpRequest{Currency: op.Currency, Amount: coffer.Amount(op.Amount), Kind: op.Kind,
		ExpiresAt: optTime(op.ExpiresAt), Priority: op.Priority}
	if p := op.Purchase; p != nil {
		out.Purchase = &coffer.Purchase{Store: p.Store, OrderID: p.OrderId, Price: p.Price, Fiat: p.Fiat}
	}
	return out
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
	out := &cofferv1.Trx{Id: t.ID, IdempotencyKey: t.IdempotencyKey, Kind: string(t.Kind), Status: string(t.Status),
		Reason: t.Reason, CreatedAt: timestamppb.New(t.CreatedAt), HoldExpiresAt: optTimestamp(t.HoldExpiresAt), Version: t.Version}
	if len(t.Meta) > 0 {
		out.Meta = &structpb.Struct{}
		if err := protojson.Unmarshal(t.Meta, out.Meta); err != nil {
			return nil, err
		}
	}
	for _, op := range t.Ops {
		out.Ops = append(out.Ops, &cofferv1.Op{Currency: op.Currency, Amount: int64(op.Amount), Kind: string(op.Kind), Paid: op.Paid,
			LotId: op.LotID, BalanceAfter: int64(op.BalanceAfter), Pending: op.Pending, Purchase: toPurchase(op.Purchase)})
	}
	for _, b := range t.Balances {
		out.Balances = append(out.Balances, toBalance(b))
	}
	return out, nil
}

func toStatusMessage(st coffer.Status) *cofferv1.Status {
	out := &cofferv1.Status{Version: st.Version, StartedAt: timestamppb.New(st.StartedAt), ShardCount: st.ShardCount, ShardsAvailable: st.ShardsAvailable}
	for _, db := range st.Databases {
		d := &cofferv1.DatabaseStatus{Name: db.Name, Up: db.Up, SchemaVerified: db.SchemaVerified, Error: db.Error,
			CheckedAt: optTimestamp(db.CheckedAt), ConnsTotal: db.ConnsTotal, ConnsAcquired: db.ConnsAcquired, ConnsMax: db.ConnsMax}
		for _, r := range db.Shards {
			d.Shards = append(d.Shards, &cofferv1.ShardRange{Min: r.Min, Max: r.Max})
		}
		out.Databases = append(out.Databases, d)
	}
	return out
}
