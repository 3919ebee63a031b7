package api

import (
	"encoding/json"
	"time"

	"github.com/cofferhq/coffer"
)

// ChangeBody is the JSON body of a change over HTTP: a coffer.ChangeRequest less
// what the path (namespace, player) and the API key (emitter) give. The
// server decodes it and the Go client sends it.
type ChangeBody struct {
	IdempotencyKey string             `json:"idempotency_key"`
	Ops            []coffer.OpRequest `json:"ops"`
	Reason         string             `json:"reason,omitempty"`
	Meta           json.RawMessage    `json:"meta,omitempty"`
	Hold           bool               `json:"hold,omitempty"`
	HoldTTLSeconds int64              `json:"hold_ttl_seconds,omitempty"`
}

// ExchangeBody is the JSON body of an exchange over HTTP.
type ExchangeBody struct {
	IdempotencyKey string          `json:"idempotency_key"`
	From           string          `json:"from"`
	To             string          `json:"to"`
	Amount         coffer.Amount   `json:"amount"`
	Reason         string          `json:"reason,omitempty"`
	Meta           json.RawMessage `json:"meta,omitempty"`
}

// RefundBody is the JSON body of a refund over HTTP.
type RefundBody struct {
	IdempotencyKey string            `json:"idempotency_key"`
	Store          string            `json:"store"`
	OrderID        string            `json:"order_id"`
	Kind           coffer.RefundKind `json:"kind"`
	Reason         string            `json:"reason,omitempty"`
}

// BatchBody is the JSON body of a batch over HTTP: the changes, each with
// its player. The server decodes each change on its own, so that a
// malformed one fails alone; the Go client sends it whole.
type BatchBody struct {
	Changes []BatchChangeBody `json:"changes"`
}

// BatchChangeBody is one change of a batch: a ChangeBody and its player.
// Its fields are ChangeBody's, not an embedded ChangeBody, whose name
// the JSON decoder would put in the messages of type errors.
type BatchChangeBody struct {
	PlayerID       coffer.PlayerID    `json:"player_id"`
	IdempotencyKey string             `json:"idempotency_key"`
	Ops            []coffer.OpRequest `json:"ops"`
	Reason         string             `json:"reason,omitempty"`
	Meta           json.RawMessage    `json:"meta,omitempty"`
	Hold           bool               `json:"hold,omitempty"`
	HoldTTLSeconds int64              `json:"hold_ttl_seconds,omitempty"`
}

// HoldTTL reads a hold_ttl_seconds field; 0 means the default. Values that
// would overflow a time.Duration are invalid_argument; the catalog checks
// the configured bounds.
func HoldTTL(seconds int64) (time.Duration, error) {
	if seconds < 0 || seconds > coffer.HoldTTLSecondsMax {
		return 0, coffer.Errorf(coffer.CodeInvalid, "hold_ttl_seconds: out of range")
	}
	return time.Duration(seconds) * time.Second, nil
}

// Request is the coffer.ChangeRequest of a change body in scope sc (whose key is
// replaced by the body's). Errors (invalid_argument) are those of the
// fields read here; Catalog.ValidateChange checks the rest.
func (b ChangeBody) Request(sc coffer.Scope) (coffer.ChangeRequest, error) {
	ttl, err := HoldTTL(b.HoldTTLSeconds)
	if err != nil {
		return coffer.ChangeRequest{}, err
	}
	sc.IdempotencyKey = b.IdempotencyKey
	return coffer.ChangeRequest{Scope: sc, Ops: b.Ops, Reason: b.Reason, Meta: b.Meta, Hold: b.Hold, HoldTTL: ttl}, nil
}

// Request is the coffer.ChangeRequest of one change of a batch in namespace ns,
// for the client of emitter.
func (b BatchChangeBody) Request(ns coffer.Namespace, emitter coffer.Emitter) (coffer.ChangeRequest, error) {
	c := ChangeBody{IdempotencyKey: b.IdempotencyKey, Ops: b.Ops, Reason: b.Reason, Meta: b.Meta, Hold: b.Hold, HoldTTLSeconds: b.HoldTTLSeconds}
	return c.Request(coffer.Scope{Namespace: ns, PlayerID: b.PlayerID, Emitter: emitter})
}
