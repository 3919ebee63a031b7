// Package coffer is the domain of the coffer service: the types, invariants,
// error codes and service interfaces that every adapter (postgres, shard,
// http, grpc) implements or calls. It imports nothing of ours.
package coffer

import (
	"encoding/json"
	"math"
	"time"
)

// PlayerID identifies a player, the owner of balances and the shard key.
// Valid ids are > 0.
type PlayerID int64

// ShardID is the number of a shard: the suffix of its tables (trx_7, op_7).
type ShardID int

// Namespace is a balance-sharing domain; games bound to one namespace see the
// same balances. Valid ids are > 0.
type Namespace int32

// CurrencyID is the numeric id of a configured currency.
type CurrencyID int32

// Emitter scopes a client's idempotency keys.
type Emitter int32

// Amount is a quantity of currency in minor units.
type Amount int64

// Add is a + b, and false if the sum would pass int64: every sum of the
// ledger is checked, never wrapped.
func (a Amount) Add(b Amount) (Amount, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

// Limits of amounts and keys.
const (
	// OpAmountMax is the largest amount of one op.
	OpAmountMax Amount = 1_000_000_000_000_000
	// IdempotencyKeyLenMax is the longest idempotency key, in characters
	// (DESIGN: 1–128 chars; the trx column checks the same).
	IdempotencyKeyLenMax = 128
	// OpsMax bounds the ops of one request.
	OpsMax = 64
	// ReasonLenMax bounds the reason of a request, in bytes.
	ReasonLenMax = 128
	// PriceMax is the highest price of one purchase, in minor units of
	// its fiat (10¹² is ten billion dollars in cents): the value sums of
	// an order, of a player's lots and of a revenue report then stay far
	// below int64 (a report of a namespace passes it only after millions
	// of purchases at this price, and then fails rather than wraps).
	PriceMax Amount = 1_000_000_000_000
	// HoldTTLSecondsMax bounds the hold_ttl_seconds a request may say,
	// whatever the configuration allows (holds.ttl_max), so that it
	// converts to a time.Duration without overflow.
	HoldTTLSecondsMax = 1 << 32
)

// Bounds of what one player may hold and one trx may move, so that no sum
// can wrap and a write's work (and the time it holds the player's lock)
// stays bounded. The Book enforces them; the audit checks them again.
const (
	// BalanceMax bounds a player's balance in a currency plus what its
	// pending holds reserve there. A grant that would pass it is refused,
	// so a rollback, which returns a reservation, can never overflow; it
	// lies well below int64, so that no sum of a few bounded amounts
	// wraps before it is checked.
	BalanceMax Amount = 1_000_000_000_000_000_000
	// LotsMax bounds a player's held lots in a currency: lots with an
	// amount, or with a reservation a rollback may return to them. Free
	// grants of the same expiry and priority join one lot; a grant that
	// needs a lot beyond the bound is too_many_lots.
	LotsMax = 1000
	// TrxOpsMax bounds the ops one trx plans in one write (a change, an
	// exchange or a hold's begin, one per lot moved); a hold's commit or
	// rollback then writes at most as many.
	TrxOpsMax = 2000
)

// OpKind is the kind of an op.
type OpKind string

// Op kinds: grant adds to a lot, consume and expire take from it.
const (
	OpGrant   OpKind = "grant"
	OpConsume OpKind = "consume"
	OpExpire  OpKind = "expire"
)

// TrxKind is the kind of a trx.
type TrxKind string

// Trx kinds. Expire is written by the lot-expiry sweeper, not by clients;
// refund takes a store order back (a refund or a chargeback).
const (
	TrxChange   TrxKind = "change"
	TrxHold     TrxKind = "hold"
	TrxExchange TrxKind = "exchange"
	TrxExpire   TrxKind = "expire"
	TrxRefund   TrxKind = "refund"
)

// TrxKinds lists every trx kind: what a finlog may be filtered by.
var TrxKinds = []TrxKind{TrxChange, TrxHold, TrxExchange, TrxExpire, TrxRefund}

// TrxStatus is the state of a trx; only holds are ever pending.
type TrxStatus string

// Trx statuses.
const (
	StatusCommitted  TrxStatus = "committed"
	StatusPending    TrxStatus = "pending"
	StatusRolledBack TrxStatus = "rolled_back"
	StatusExpired    TrxStatus = "expired"
)

// TrxStatuses lists every trx status: what a finlog may be filtered by.
var TrxStatuses = []TrxStatus{StatusCommitted, StatusPending, StatusRolledBack, StatusExpired}

// Purchase is the record of real money behind a paid grant.
type Purchase struct {
	Store   string `json:"store"`
	OrderID string `json:"order_id"`
	// Price in minor units of Fiat, an ISO 4217 code.
	Price int64  `json:"price"`
	Fiat  string `json:"fiat"`
}

// Lot is one balance row. A player's balance in a currency is the sum of the
// amounts of its live (unexpired) lots.
type Lot struct {
	ID        int64      `json:"id"`
	Currency  string     `json:"currency"`
	Paid      bool       `json:"paid"`
	Amount    Amount     `json:"amount"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Priority  int32      `json:"priority"`
	CreatedAt time.Time  `json:"created_at"`
}

// Balance is a player's balance in one currency.
type Balance struct {
	Currency string `json:"currency"`
	Total    Amount `json:"total"`
	Paid     Amount `json:"paid"`
	Free     Amount `json:"free"`
	Lots     []Lot  `json:"lots,omitempty"`
}

// Balances is a player's balances in a namespace. Version increases with
// every change of the player's balances in the namespace.
type Balances struct {
	Namespace Namespace  `json:"namespace"`
	PlayerID  PlayerID   `json:"player_id"`
	Version   int64      `json:"version"`
	At        *time.Time `json:"at,omitempty"`
	Balances  []Balance  `json:"balances"`
}

// Op is one movement on one lot inside a trx.
type Op struct {
	Currency string `json:"currency"`
	// Amount is signed: + for grant, − for consume and expire.
	Amount Amount `json:"amount"`
	Kind   OpKind `json:"kind"`
	// Cause tells what moved the amount: a change (also a pending hold's
	// grant, an expiry, and an exchange's consume that is revenue), a
	// hold's reservation returned (release), an exchange's other ops
	// (exchange), a refund, or a refund taking back coins a rolled-back
	// hold returned (refund_held).
	Cause OpCause `json:"cause"`
	Paid  bool    `json:"paid"`
	// LotID and BalanceAfter are zero for a pending hold's grants.
	LotID        int64     `json:"lot_id,omitempty"`
	BalanceAfter Amount    `json:"balance_after"`
	Pending      bool      `json:"pending,omitempty"`
	Purchase     *Purchase `json:"purchase,omitempty"`
	// Value is the real money the op moved, signed as Amount: a paid
	// grant's price, what a consume took of its lot's value (for a
	// consume that is recognised, what the player paid for what it
	// bought), what expired. Only the ops of lots with a value have one.
	Value *Money `json:"value,omitempty"`
}

// Money is an amount of real money: minor units of an ISO 4217 code.
type Money struct {
	Amount Amount `json:"amount"`
	Fiat   string `json:"fiat"`
}

// value is the op's Value in minor units, 0 without one.
func (o Op) value() Amount {
	if o.Value == nil {
		return 0
	}
	return o.Value.Amount
}

// Trx is one accepted request, the unit of idempotency.
type Trx struct {
	ID             int64  `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	// Emitter is the emitter of the client that wrote the trx, whose
	// idempotency key it is; 0 for the expiries coffer records itself.
	Emitter       Emitter         `json:"emitter,omitempty"`
	Kind          TrxKind         `json:"kind"`
	Status        TrxStatus       `json:"status"`
	Reason        string          `json:"reason,omitempty"`
	Meta          json.RawMessage `json:"meta,omitempty"`
	Ops           []Op            `json:"ops"`
	CreatedAt     time.Time       `json:"created_at"`
	HoldExpiresAt *time.Time      `json:"hold_expires_at,omitempty"`
	// Refund is a refund trx's order, kind and shortfall.
	Refund *Refund `json:"refund,omitempty"`
	// FinishedBy is the emitter of the client that committed or rolled
	// back a hold: the hold's own, or a support agent's that finished
	// another client's hold; 0 while it is pending, and when coffer
	// expired it.
	FinishedBy Emitter `json:"finished_by,omitempty"`
	// Version and Balances are the player's, right after the trx (or its
	// commit or rollback), for the currencies it touched.
	Version  int64     `json:"version"`
	Balances []Balance `json:"balances,omitempty"`
}
