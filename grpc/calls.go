package grpc

import (
	"context"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// GetBalances implements the rpc of the same name: a player's balances, now or at a past time.
func (s *Server) GetBalances(ctx context.Context, req *cofferv1.GetBalancesRequest) (*cofferv1.Balances, error) {
	at, err := optTime("at", req.At)
	if err != nil {
		return nil, err
	}
	b, err := s.Ledger.Balances(ctx, coffer.BalanceQuery{
		Namespace: coffer.Namespace(req.Namespace), PlayerID: coffer.PlayerID(req.PlayerId),
		Currency: req.Currency, At: at, Lots: req.Lots,
	})
	if err != nil {
		return nil, err
	}
	return toBalances(b), nil
}

// Change implements the rpc of the same name: a one-phase change or the begin of a hold.
func (s *Server) Change(ctx context.Context, req *cofferv1.ChangeRequest) (*cofferv1.Trx, error) {
	change, err := changeRequest(req, scope(ctx, req.Namespace, req.PlayerId, req.IdempotencyKey))
	if err == nil {
		change, err = clientOf(ctx).SupportChange(change)
	}
	if err != nil {
		return nil, err
	}
	trx, replay, err := s.Ledger.Change(ctx, change)
	return written(ctx, trx, replay, err)
}

// Commit implements the rpc of the same name: applies a pending hold.
func (s *Server) Commit(ctx context.Context, req *cofferv1.TrxRequest) (*cofferv1.Trx, error) {
	sc, err := trxScope(ctx, req, coffer.PermSupportWrite)
	if err != nil {
		return nil, err
	}
	trx, replay, err := s.Ledger.Commit(ctx, coffer.FinishRequest{Scope: sc, By: clientOf(ctx).Emitter})
	return written(ctx, trx, replay, err)
}

// Rollback implements the rpc of the same name: returns a pending hold's reservations.
func (s *Server) Rollback(ctx context.Context, req *cofferv1.TrxRequest) (*cofferv1.Trx, error) {
	sc, err := trxScope(ctx, req, coffer.PermSupportWrite)
	if err != nil {
		return nil, err
	}
	trx, replay, err := s.Ledger.Rollback(ctx, coffer.FinishRequest{Scope: sc, By: clientOf(ctx).Emitter})
	return written(ctx, trx, replay, err)
}

// GetTrx implements the rpc of the same name: one trx of the calling client.
func (s *Server) GetTrx(ctx context.Context, req *cofferv1.TrxRequest) (*cofferv1.Trx, error) {
	sc, err := trxScope(ctx, req, coffer.PermSupport)
	if err != nil {
		return nil, err
	}
	trx, err := s.Ledger.Trx(ctx, sc)
	if err != nil {
		return nil, err
	}
	return toTrx(trx)
}

// Exchange implements the rpc of the same name.
func (s *Server) Exchange(ctx context.Context, req *cofferv1.ExchangeRequest) (*cofferv1.Trx, error) {
	exchange, err := exchangeRequest(req, scope(ctx, req.Namespace, req.PlayerId, req.IdempotencyKey))
	if err != nil {
		return nil, err
	}
	trx, replay, err := s.Ledger.Exchange(ctx, exchange)
	return written(ctx, trx, replay, err)
}

// Refund implements the rpc of the same name: a refund or chargeback of a store order.
func (s *Server) Refund(ctx context.Context, req *cofferv1.RefundRequest) (*cofferv1.Trx, error) {
	refund := coffer.RefundRequest{Scope: scope(ctx, req.Namespace, req.PlayerId, req.IdempotencyKey),
		Store: req.Store, OrderID: req.OrderId, Kind: coffer.RefundKind(req.Kind), Reason: req.Reason}
	if err := clientOf(ctx).SupportRefund(refund); err != nil {
		return nil, err
	}
	trx, replay, err := s.Ledger.Refund(ctx, refund)
	return written(ctx, trx, replay, err)
}

// Finlog implements the rpc of the same name: a page of a player's finlog.
func (s *Server) Finlog(ctx context.Context, req *cofferv1.FinlogRequest) (*cofferv1.FinlogPage, error) {
	from, to, err := period(req.From, req.To)
	if err != nil {
		return nil, err
	}
	q := coffer.FinlogQuery{
		Namespace: coffer.Namespace(req.Namespace), PlayerID: coffer.PlayerID(req.PlayerId),
		From: from, To: to, Currency: req.Currency, Reason: req.Reason,
		Kind: coffer.TrxKind(req.Kind), Status: coffer.TrxStatus(req.Status), IdempotencyKey: req.IdempotencyKey,
		Limit: int(req.Limit), Cursor: req.Cursor,
	}
	if q.Desc, err = coffer.FinlogOrder(req.Order); err != nil {
		return nil, err
	}
	page, err := s.Ledger.Finlog(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &cofferv1.FinlogPage{NextCursor: page.NextCursor}
	for _, trx := range page.Items {
		t, err := toTrx(trx)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, t)
	}
	return out, nil
}

// Revenue implements the rpc of the same name: the revenue report of a namespace.
func (s *Server) Revenue(ctx context.Context, req *cofferv1.RevenueRequest) (*cofferv1.RevenueReport, error) {
	from, to, err := period(req.From, req.To)
	if err != nil {
		return nil, err
	}
	q, err := coffer.NewRevenueQuery(coffer.Namespace(req.Namespace), from, to, req.Currency)
	if err != nil {
		return nil, err
	}
	lines, err := s.Ledger.Revenue(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &cofferv1.RevenueReport{Namespace: req.Namespace, From: req.From, To: req.To}
	for _, l := range lines {
		out.Lines = append(out.Lines, &cofferv1.RevenueLine{
			Currency: l.Currency, Fiat: l.Fiat, Opening: int64(l.Opening), Deposited: int64(l.Deposited), Recognised: int64(l.Recognised),
			ConvertedIn: int64(l.ConvertedIn), ConvertedOut: int64(l.ConvertedOut), Expired: int64(l.Expired),
			Refunded: int64(l.Refunded), RefundShortfall: int64(l.RefundShortfall), Deferred: int64(l.Deferred),
			OpeningValue: int64(l.OpeningValue), DepositedValue: int64(l.DepositedValue), RecognisedValue: int64(l.RecognisedValue),
			ConvertedInValue: int64(l.ConvertedInValue), ConvertedOutValue: int64(l.ConvertedOutValue), ExpiredValue: int64(l.ExpiredValue),
			RefundedValue: int64(l.RefundedValue), RefundShortfallValue: int64(l.RefundShortfallValue), DeferredValue: int64(l.DeferredValue),
		})
	}
	return out, nil
}

// GetStatus implements the rpc of the same name: the operators' view.
func (s *Server) GetStatus(ctx context.Context, _ *cofferv1.StatusRequest) (*cofferv1.Status, error) {
	return toStatusMessage(s.Status(ctx)), nil
}

// GetOrder implements the rpc of the same name: who presented a store order first.
func (s *Server) GetOrder(ctx context.Context, req *cofferv1.OrderRequest) (*cofferv1.OrderClaim, error) {
	o, err := s.Ledger.Order(ctx, coffer.PurchaseKey{Namespace: coffer.Namespace(req.Namespace), Store: req.Store, OrderID: req.OrderId})
	if err != nil {
		return nil, err
	}
	return &cofferv1.OrderClaim{Namespace: int32(o.Namespace), Store: o.Store, OrderId: o.OrderID, PlayerId: int64(o.PlayerID),
		Emitter: int32(o.Emitter), IdempotencyKey: o.IdempotencyKey, CreatedAt: timestamppb.New(o.CreatedAt)}, nil
}

// GetClient implements the rpc of the same name: the calling client.
func (s *Server) GetClient(ctx context.Context, _ *cofferv1.ClientRequest) (*cofferv1.ClientInfo, error) {
	return toClientInfo(api.NewClientInfo(clientOf(ctx), s.Clients)), nil
}

// period reads the from and to of a query, either of which may be left out.
func period(from, to *timestamppb.Timestamp) (*time.Time, *time.Time, error) {
	f, err := optTime("from", from)
	if err != nil {
		return nil, nil, err
	}
	t, err := optTime("to", to)
	return f, t, err
}

func scope(ctx context.Context, ns int32, player int64, key string) coffer.Scope {
	return coffer.Scope{Namespace: coffer.Namespace(ns), PlayerID: coffer.PlayerID(player), Emitter: clientOf(ctx).Emitter, IdempotencyKey: key}
}

// trxScope is the scope of a call on one trx: the calling client's, or
// with req's emitter another client's, which only a client with
// permission other may name (coffer.Client.TrxEmitter).
func trxScope(ctx context.Context, req *cofferv1.TrxRequest, other coffer.Permission) (coffer.Scope, error) {
	sc := scope(ctx, req.Namespace, req.PlayerId, req.IdempotencyKey)
	var err error
	sc.Emitter, err = clientOf(ctx).TrxEmitter(sc.Namespace, coffer.Emitter(req.Emitter), other)
	return sc, err
}

// written answers a write; a replay is flagged in the response header.
func written(ctx context.Context, trx coffer.Trx, replay bool, err error) (*cofferv1.Trx, error) {
	if err != nil {
		return nil, err
	}
	if replay {
		_ = grpc.SetHeader(ctx, metadata.Pairs("coffer-replay", "true"))
	}
	return toTrx(trx)
}
