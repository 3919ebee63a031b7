package http

import (
	"net/http"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// revenueReport is the body of a revenue report.
type revenueReport struct {
	Namespace coffer.Namespace     `json:"namespace"`
	From      time.Time            `json:"from"`
	To        time.Time            `json:"to"`
	Lines     []coffer.RevenueLine `json:"lines"`
}

func (s *Server) getBalances(r *http.Request, _ *coffer.Client) (int, any, error) {
	q := coffer.BalanceQuery{}
	var err error
	if q.Namespace, q.PlayerID, err = pathPlayer(r); err != nil {
		return 0, nil, err
	}
	v := query(r)
	q.Currency = v.str("currency")
	q.At = v.time("at")
	q.Lots = v.bool("lots")
	if v.err != nil {
		return 0, nil, v.err
	}
	b, err := s.Ledger.Balances(r.Context(), q)
	return http.StatusOK, b, err
}

func (s *Server) change(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := playerScope(r, c)
	if err != nil {
		return 0, nil, err
	}
	req, err := DecodeChange(bounded(r, s.BodyBytesMax), sc)
	if err != nil {
		return 0, nil, bodyError(err, s.BodyBytesMax)
	}
	if req, err = c.SupportChange(req); err != nil {
		return 0, nil, err
	}
	trx, replay, err := s.Ledger.Change(r.Context(), req)
	return written(trx, replay, err)
}

func (s *Server) commit(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := s.scope(r, c, coffer.PermSupportWrite)
	if err != nil {
		return 0, nil, err
	}
	trx, replay, err := s.Ledger.Commit(r.Context(), coffer.FinishRequest{Scope: sc, By: c.Emitter})
	return written(trx, replay, err)
}

func (s *Server) rollback(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := s.scope(r, c, coffer.PermSupportWrite)
	if err != nil {
		return 0, nil, err
	}
	trx, replay, err := s.Ledger.Rollback(r.Context(), coffer.FinishRequest{Scope: sc, By: c.Emitter})
	return written(trx, replay, err)
}

func (s *Server) getTrx(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := s.scope(r, c, coffer.PermSupport)
	if err != nil {
		return 0, nil, err
	}
	trx, err := s.Ledger.Trx(r.Context(), sc)
	return http.StatusOK, trx, err
}

func (s *Server) exchange(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := playerScope(r, c)
	if err != nil {
		return 0, nil, err
	}
	req, err := DecodeExchange(bounded(r, s.BodyBytesMax), sc)
	if err != nil {
		return 0, nil, bodyError(err, s.BodyBytesMax)
	}
	trx, replay, err := s.Ledger.Exchange(r.Context(), req)
	return written(trx, replay, err)
}

func (s *Server) refund(r *http.Request, c *coffer.Client) (int, any, error) {
	sc, err := playerScope(r, c)
	if err != nil {
		return 0, nil, err
	}
	req, err := DecodeRefund(bounded(r, s.BodyBytesMax), sc)
	if err != nil {
		return 0, nil, bodyError(err, s.BodyBytesMax)
	}
	if err := c.SupportRefund(req); err != nil {
		return 0, nil, err
	}
	trx, replay, err := s.Ledger.Refund(r.Context(), req)
	return written(trx, replay, err)
}

func (s *Server) finlog(r *http.Request, _ *coffer.Client) (int, any, error) {
	q := coffer.FinlogQuery{}
	var err error
	if q.Namespace, q.PlayerID, err = pathPlayer(r); err != nil {
		return 0, nil, err
	}
	v := query(r)
	q.From, q.To = v.time("from"), v.time("to")
	q.Currency, q.Reason, q.Cursor = v.str("currency"), v.str("reason"), v.str("cursor")
	q.Kind, q.Status, q.IdempotencyKey = coffer.TrxKind(v.str("kind")), coffer.TrxStatus(v.str("status")), v.str("idempotency_key")
	q.Limit = int(v.int("limit"))
	if v.err != nil {
		return 0, nil, v.err
	}
	if q.Desc, err = coffer.FinlogOrder(v.str("order")); err != nil {
		return 0, nil, err
	}
	page, err := s.Ledger.Finlog(r.Context(), q)
	return http.StatusOK, page, err
}

func (s *Server) revenue(r *http.Request, _ *coffer.Client) (int, any, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return 0, nil, err
	}
	v := query(r)
	from, to := v.time("from"), v.time("to")
	if v.err != nil {
		return 0, nil, v.err
	}
	q, err := coffer.NewRevenueQuery(ns, from, to, v.str("currency"))
	if err != nil {
		return 0, nil, err
	}
	lines, err := s.Ledger.Revenue(r.Context(), q)
	if lines == nil {
		lines = []coffer.RevenueLine{}
	}
	return http.StatusOK, revenueReport{Namespace: ns, From: q.From.UTC(), To: q.To.UTC(), Lines: lines}, err
}

func (s *Server) getOrder(r *http.Request, _ *coffer.Client) (int, any, error) {
	ns, err := pathNamespace(r)
	if err != nil {
		return 0, nil, err
	}
	o, err := s.Ledger.Order(r.Context(), coffer.PurchaseKey{Namespace: ns, Store: r.PathValue("store"), OrderID: r.PathValue("order_id")})
	return http.StatusOK, o, err
}

func (s *Server) getClient(_ *http.Request, c *coffer.Client) (int, any, error) {
	return http.StatusOK, api.NewClientInfo(c, s.Clients), nil
}

func (s *Server) getStatus(r *http.Request, _ *coffer.Client) (int, any, error) {
	return http.StatusOK, s.Status(r.Context()), nil
}

// written answers a write: 201 for a new trx, 200 for a replay.
func written(trx coffer.Trx, replay bool, err error) (int, any, error) {
	if replay {
		return http.StatusOK, trx, err
	}
	return http.StatusCreated, trx, err
}
