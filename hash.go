package coffer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
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
	// v1 is the hash coffer stored before Sum (hashV1), computed only to
	// compare with such a hash.
	v1 func() []byte
}

// hashVersion leads Sum. Hashes stored before it had no version and are
// hashV1Len bytes long.
const (
	hashVersion = 2
	hashV1Len   = 16
)

// Same tells whether stored, the hash kept with a trx, is this payload's.
// A hash stored before Sum had a version is compared with that older hash
// of this request, so that a retry of a write sent before an upgrade still
// replays when sent again unchanged after it.
func (h RequestHash) Same(stored []byte) bool {
	if len(stored) == hashV1Len && h.v1 != nil {
		return bytes.Equal(stored, h.v1())
	}
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

// changeHash is the hash of a validated change; holdTTL and meta are the
// request's as sent, for the older hash.
func changeHash(v ValidChange, holdTTL time.Duration, meta json.RawMessage) RequestHash {
	p := changePayload{Reason: v.Reason, Meta: v.Meta, Hold: v.Hold, HoldTTL: holdTTL}
	for _, op := range v.Ops {
		p.Ops = append(p.Ops, opPayload{Currency: op.Currency.ID, Amount: op.Amount, Paid: op.Paid,
			ExpiresAt: op.ExpiresAt, Priority: op.Priority, Purchase: op.Purchase})
	}
	req := v.ChangeRequest
	return RequestHash{Sum: hashPayload("change", p), v1: func() []byte {
		req.Meta = metaV1(meta)
		return hashV1("change", req)
	}}
}

// exchangeHash is the hash of a validated exchange; meta is the request's
// as sent, for the older hash.
func exchangeHash(v ValidExchange, meta json.RawMessage) RequestHash {
	p := exchangePayload{From: v.From.ID, To: v.To.ID, Amount: v.Amount, Reason: v.Reason, Meta: v.Meta}
	req := v.ExchangeRequest
	return RequestHash{Sum: hashPayload("exchange", p), v1: func() []byte {
		req.Meta = metaV1(meta)
		return hashV1("exchange", req)
	}}
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

// hashV1 is the hash stored before hashVersion: 16 bytes of the SHA-256
// of the kind, the length and the JSON of the request (ChangeRequest or
// ExchangeRequest) with its scope, its ops as sent but for times in UTC
// to the microsecond, a hold's life resolved, and meta as metaV1 makes it.
// TestHashV1 holds it to hashes that version stored.
func hashV1(kind string, req any) []byte {
	h := sha256.New()
	h.Write([]byte(kind))
	b, _ := json.Marshal(req)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
	return h.Sum(nil)[:16]
}

// metaV1 is meta as hashV1 took it: keys sorted by Go's map order,
// numbers as written, strings as encoding/json writes them.
func metaV1(meta json.RawMessage) json.RawMessage {
	if len(meta) == 0 || string(meta) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(meta))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil
	}
	out, _ := json.Marshal(obj)
	return out
}
