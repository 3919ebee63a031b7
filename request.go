package coffer

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// OpRequest is one requested movement: a grant (Amount > 0) or a consume
// (Amount < 0) in a currency.
type OpRequest struct {
	Currency string `json:"currency"`
	Amount   Amount `json:"amount"`
	// Kind is paid or free, for grants; empty means free.
	Kind      string     `json:"kind,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Priority  int32      `json:"priority,omitempty"`
	Purchase  *Purchase  `json:"purchase,omitempty"`
}

// A fiat code (ISO 4217) is FiatLen of FiatChars: USD.
const (
	FiatLen   = 3
	FiatChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

// The kinds of a grant (OpRequest.Kind); empty means GrantFree.
const (
	GrantFree = "free"
	GrantPaid = "paid"
)

// Scope identifies a trx: the namespace, player, calling client's emitter
// and idempotency key.
type Scope struct {
	Namespace      Namespace
	PlayerID       PlayerID
	Emitter        Emitter
	IdempotencyKey string
}

// ChangeRequest is a one-phase change, or with Hold the begin of a hold.
type ChangeRequest struct {
	Scope
	Ops    []OpRequest
	Reason string
	Meta   json.RawMessage
	Hold   bool
	// HoldTTL is the hold's life; zero means the catalog's default.
	HoldTTL time.Duration
}

// FinishRequest commits or rolls back the pending hold of Scope (its
// client's emitter and key). By is the emitter of the client that
// finishes it: the hold's own, or a support agent's (Client.TrxEmitter);
// the trx records it (Trx.FinishedBy).
type FinishRequest struct {
	Scope
	By Emitter
}

// Validate checks the hold's scope and that a client finishes it.
// Errors are invalid_argument.
func (r FinishRequest) Validate() error {
	if r.By <= 0 {
		return Errorf(CodeInvalid, "a hold is finished by a client: emitter %d is none", r.By)
	}
	return r.Scope.Validate()
}

// ExchangeRequest consumes Amount of From and grants To at the configured
// rate.
type ExchangeRequest struct {
	Scope
	From, To string
	Amount   Amount
	Reason   string
	Meta     json.RawMessage
}

// ValidOp is an OpRequest checked against the catalog.
type ValidOp struct {
	Currency  *Currency
	Amount    Amount // signed
	Paid      bool
	ExpiresAt *time.Time
	Priority  int32
	Purchase  *Purchase
}

// ValidChange is a ChangeRequest checked against the catalog, with the hash
// that identifies its payload for idempotency. Its Meta is in canonical
// form and its HoldTTL resolved (the catalog's default for zero).
type ValidChange struct {
	ChangeRequest
	Ops  []ValidOp
	Hash RequestHash
}

// Validate checks the scope's ids and idempotency key. Errors are
// invalid_argument.
func (s Scope) Validate() error {
	switch {
	case s.Namespace <= 0:
		return Errorf(CodeInvalid, "namespace must be > 0")
	case s.PlayerID <= 0:
		return Errorf(CodeInvalid, "player_id must be > 0")
	}
	return checkText("idempotency_key", s.IdempotencyKey, 1, IdempotencyKeyLenMax, inCharacters)
}

// checkText checks a text field: min–max units (bytes, or characters
// where the contract counts characters) of UTF-8 without NUL.
// PostgreSQL's text cannot hold NUL, and a reader that repairs bad UTF-8
// (as Go's encoding/json does, with U+FFFD) would make two different
// fields one. Errors are invalid_argument.
func checkText(field, s string, min, max int, u unit) error {
	if n := u.count(s); n >= min && n <= max && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return nil
	}
	if min == 0 {
		return Errorf(CodeInvalid, "%s: must be at most %d %s of UTF-8, without NUL", field, max, u)
	}
	return Errorf(CodeInvalid, "%s: must be %d–%d %s of UTF-8, without NUL", field, min, max, u)
}

// unit is what a text field's bounds count.
type unit string

const (
	// inBytes bounds what is stored by its size (a reason).
	inBytes unit = "bytes"
	// inCharacters bounds what the contract bounds in characters (the
	// idempotency key, as its column's check does).
	inCharacters unit = "characters"
)

func (u unit) count(s string) int {
	if u == inCharacters {
		return utf8.RuneCountInString(s)
	}
	return len(s)
}

// The times a request may carry lie in the years 0001–9999: what RFC 3339
// writes and google.protobuf.Timestamp allows, so both transports can say
// them, and what PostgreSQL stores exactly (a time beyond what the driver
// encodes wrapped around, to 1970 and worse).
var (
	timeMin = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	timeMax = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// CheckTime checks that t lies in the years 0001–9999, as every time a
// request carries must. Errors are invalid_argument.
func CheckTime(field string, t time.Time) error {
	if t.Before(timeMin) || !t.Before(timeMax) {
		return Errorf(CodeInvalid, "%s: must lie in the years 0001–9999", field)
	}
	return nil
}

// ValidateChange checks a change against the catalog. It does not read
// the clock: whether an expiry lies in the future is CheckExpiries', for
// the store to ask once it knows the key is new (a retry of a grant that
// succeeded gets its first answer, even after its expiry passed). Errors
// are CodeInvalid.
func (c *Catalog) ValidateChange(req ChangeRequest) (ValidChange, error) {
	if err := req.Scope.Validate(); err != nil {
		return ValidChange{}, err
	}
	if err := checkText("reason", req.Reason, 0, ReasonLenMax, inBytes); err != nil {
		return ValidChange{}, err
	}
	meta, err := canonicalMeta(req.Meta)
	if err != nil {
		return ValidChange{}, err
	}
	askedTTL := req.HoldTTL
	req.Meta = meta
	if len(req.Ops) == 0 || len(req.Ops) > OpsMax {
		return ValidChange{}, Errorf(CodeInvalid, "ops: 1–%d ops required", OpsMax)
	}
	if !req.Hold && req.HoldTTL != 0 {
		return ValidChange{}, Errorf(CodeInvalid, "hold_ttl_seconds is only for holds")
	}
	if req.Hold {
		if req.HoldTTL == 0 {
			req.HoldTTL = c.HoldTTLDefault
		}
		if req.HoldTTL < time.Second || req.HoldTTL > c.HoldTTLMax {
			return ValidChange{}, Errorf(CodeInvalid, "hold_ttl_seconds must be 1–%d", int(c.HoldTTLMax/time.Second))
		}
	}
	req.Ops = append([]OpRequest(nil), req.Ops...)
	for i := range req.Ops {
		if t := req.Ops[i].ExpiresAt; t != nil {
			// PostgreSQL keeps microseconds; normalise so that a replay
			// and the stored lot agree with the request.
			u := t.UTC().Truncate(time.Microsecond)
			req.Ops[i].ExpiresAt = &u
		}
	}
	v := ValidChange{ChangeRequest: req}
	fiats := map[PurchaseKey]string{}
	for i, op := range req.Ops {
		vop, err := c.validateOp(i, op)
		if err != nil {
			return ValidChange{}, err
		}
		// An order is paid in one fiat: its refund adds up what its coins
		// cost as one value.
		if p := op.Purchase; p != nil {
			k := p.Key(req.Namespace)
			if f, seen := fiats[k]; seen && f != p.Fiat {
				return ValidChange{}, Errorf(CodeInvalid, "ops[%d].purchase.fiat: order %q of %s is paid in %s in an earlier op; an order has one fiat", i, p.OrderID, p.Store, f)
			}
			fiats[k] = p.Fiat
		}
		v.Ops = append(v.Ops, vop)
	}
	v.Hash = changeHash(v, askedTTL)
	return v, nil
}

func (c *Catalog) validateOp(i int, op OpRequest) (ValidOp, error) {
	cur, ok := c.byCode[op.Currency]
	if !ok {
		return ValidOp{}, Errorf(CodeInvalid, "ops[%d].currency: unknown currency %q", i, op.Currency)
	}
	abs := op.Amount
	if abs < 0 {
		abs = -abs
	}
	if op.Amount == 0 || abs > OpAmountMax || abs < 0 {
		return ValidOp{}, Errorf(CodeInvalid, "ops[%d].amount: must be non-zero, at most %d in absolute value", i, OpAmountMax)
	}
	v := ValidOp{Currency: cur, Amount: op.Amount, ExpiresAt: op.ExpiresAt, Priority: op.Priority, Purchase: op.Purchase}
	if op.Amount < 0 {
		if op.Kind != "" || op.ExpiresAt != nil || op.Priority != 0 || op.Purchase != nil {
			return ValidOp{}, Errorf(CodeInvalid, "ops[%d]: a consume takes only currency and amount", i)
		}
		return v, nil
	}
	switch op.Kind {
	case "", GrantFree:
		if op.Purchase != nil {
			return ValidOp{}, Errorf(CodeInvalid, "ops[%d].purchase: only paid grants carry a purchase", i)
		}
	case GrantPaid:
		if !cur.Paid {
			return ValidOp{}, Errorf(CodeInvalid, "ops[%d].kind: %s cannot be bought, so it cannot be paid", i, cur.Code)
		}
		if err := checkPurchase(i, op.Purchase); err != nil {
			return ValidOp{}, err
		}
		v.Paid = true
	default:
		return ValidOp{}, Errorf(CodeInvalid, "ops[%d].kind: must be paid or free", i)
	}
	if op.ExpiresAt != nil {
		if err := CheckTime(fmt.Sprintf("ops[%d].expires_at", i), *op.ExpiresAt); err != nil {
			return ValidOp{}, err
		}
	}
	return v, nil
}

// CheckExpiries checks that every grant's expiry lies after now, the
// write's time. Errors are CodeInvalid.
func (v ValidChange) CheckExpiries(now time.Time) error {
	for i, op := range v.Ops {
		if op.ExpiresAt != nil && !op.ExpiresAt.After(now) {
			return Errorf(CodeInvalid, "ops[%d].expires_at: must be in the future", i)
		}
	}
	return nil
}

func checkPurchase(i int, p *Purchase) error {
	if p == nil {
		return Errorf(CodeInvalid, "ops[%d].purchase: a paid grant must carry its purchase", i)
	}
	if err := checkOrder(fmt.Sprintf("ops[%d].purchase.", i), p.Store, p.OrderID); err != nil {
		return err
	}
	switch {
	case p.Price < 0 || Amount(p.Price) > PriceMax:
		return Errorf(CodeInvalid, "ops[%d].purchase.price: must be 0–%d minor units", i, PriceMax)
	case len(p.Fiat) != FiatLen || strings.Trim(p.Fiat, FiatChars) != "":
		return Errorf(CodeInvalid, "ops[%d].purchase.fiat: must be an ISO 4217 code like USD", i)
	}
	return nil
}

// ValidExchange is an ExchangeRequest checked against the catalog.
type ValidExchange struct {
	ExchangeRequest
	From, To *Currency
	Rate     Rate
	Hash     RequestHash
}

// ValidateExchange checks an exchange. The yield is checked at the
// store, where the paid share is known; a zero yield is rejected here.
func (c *Catalog) ValidateExchange(req ExchangeRequest) (ValidExchange, error) {
	if err := req.Scope.Validate(); err != nil {
		return ValidExchange{}, err
	}
	if err := checkText("reason", req.Reason, 0, ReasonLenMax, inBytes); err != nil {
		return ValidExchange{}, err
	}
	meta, err := canonicalMeta(req.Meta)
	if err != nil {
		return ValidExchange{}, err
	}
	req.Meta = meta
	from, ok1 := c.byCode[req.From]
	to, ok2 := c.byCode[req.To]
	if !ok1 || !ok2 {
		return ValidExchange{}, Errorf(CodeInvalid, "from/to: unknown currency")
	}
	rate, ok := c.Rate(req.Namespace, from.ID, to.ID)
	if !ok {
		return ValidExchange{}, Errorf(CodeInvalid, "no exchange rate for %s→%s in namespace %d", from.Code, to.Code, req.Namespace)
	}
	if req.Amount <= 0 || req.Amount > OpAmountMax {
		return ValidExchange{}, Errorf(CodeInvalid, "amount: must be 1–%d", OpAmountMax)
	}
	total, _, ok := rate.Exchange(req.Amount, 0, false)
	if !ok || total <= 0 || total > OpAmountMax {
		return ValidExchange{}, Errorf(CodeInvalid, "amount: %d %s yields %d %s at %s; must yield 1–%d", req.Amount, from.Code, total, to.Code, rate, OpAmountMax)
	}
	v := ValidExchange{ExchangeRequest: req, From: from, To: to, Rate: rate}
	v.Hash = exchangeHash(v)
	return v, nil
}
