package coffer

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"time"
)

// RequestHash identifies the payload of a write for idempotency: a request
// whose key names a stored trx is a replay if it has that trx's payload,
// an idempotency_conflict otherwise. Sum is stored with the trx. It is
// the hash of the request as validation leaves it, so requests that
// validate to the same request have the same Sum, whichever transport
// brought them and however they were spelled (docs/api.md, Idempotency).
type RequestHash struct {
	Sum []byte
}

// hashVersion leads Sum, so that a hash computed otherwise by a later
// version is never taken for this one. (Version 1, unversioned, was
// coffer's before 1.0: no release stored it.)
const hashVersion = 2

// Same tells whether stored, the hash kept with a trx, is this payload's.
func (h RequestHash) Same(stored []byte) bool {
	return bytes.Equal(stored, h.Sum)
}

// changePayload is what identifies a change: the validated request less
// its scope (the scope finds the stored trx). Ops name currencies by id
// and say paid or not, so "kind": "free" and no kind are one request;
// times are in UTC, to the microsecond; meta is canonical. HoldTTL is the
// life the request asked for (zero for the default), so that an unchanged
// retry still replays after the configured default changed.
type changePayload struct {
	Ops     []opPayload     `json:"ops"`
	Reason  string          `json:"reason"`
	Meta    json.RawMessage `json:"meta"`
	Hold    bool            `json:"hold"`
	HoldTTL time.Duration   `json:"hold_ttl"`
}

type opPayload struct {
	Currency  CurrencyID `json:"currency"`
	Amount    Amount     `json:"amount"`
	Paid      bool       `json:"paid"`
	ExpiresAt *time.Time `json:"expires_at"`
	Priority  int32      `json:"priority"`
	Purchase  *Purchase  `json:"purchase"`
}

type exchangePayload struct {
	From   CurrencyID      `json:"from"`
	To     CurrencyID      `json:"to"`
	Amount Amount          `json:"amount"`
	Reason string          `json:"reason"`
	Meta   json.RawMessage `json:"meta"`
}

// changeHash is the hash of a validated change; holdTTL is the hold's
// life as the request asked it (zero for the default).
func changeHash(v ValidChange, holdTTL time.Duration) RequestHash {
	p := changePayload{Reason: v.Reason, Meta: v.Meta, Hold: v.Hold, HoldTTL: holdTTL}
	for _, op := range v.Ops {
		p.Ops = append(p.Ops, opPayload{Currency: op.Currency.ID, Amount: op.Amount, Paid: op.Paid,
			ExpiresAt: op.ExpiresAt, Priority: op.Priority, Purchase: op.Purchase})
	}
	return RequestHash{Sum: hashPayload("change", p)}
}

// exchangeHash is the hash of a validated exchange.
func exchangeHash(v ValidExchange) RequestHash {
	p := exchangePayload{From: v.From.ID, To: v.To.ID, Amount: v.Amount, Reason: v.Reason, Meta: v.Meta}
	return RequestHash{Sum: hashPayload("exchange", p)}
}

// hashPayload is hashVersion and 16 bytes of the SHA-256 of the kind and
// the payload's JSON (deterministic: fields in a fixed order).
func hashPayload(kind string, payload any) []byte {
	b, _ := json.Marshal(payload)
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write(b)
	return append([]byte{hashVersion}, h.Sum(nil)[:16]...)
}
