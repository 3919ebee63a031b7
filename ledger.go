package coffer

import (
	"cmp"
	"context"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// BalanceQuery selects balances to read.
type BalanceQuery struct {
	Namespace Namespace
	PlayerID  PlayerID
	// Currency limits the answer to one currency code; empty means all.
	Currency string
	// At asks for the balances as they were at that time.
	At *time.Time
	// Lots asks for the lots behind each current balance.
	Lots bool
}

// FinlogQuery selects a page of a player's finlog.
type FinlogQuery struct {
	Namespace Namespace
	PlayerID  PlayerID
	From, To  *time.Time // [From, To)
	Currency  string
	Reason    string
	// Kind, Status and IdempotencyKey, when set, list only the trx of
	// that kind, in that status (pending: the player's holds still
	// pending), or under that key, whichever client gave it.
	Kind           TrxKind
	Status         TrxStatus
	IdempotencyKey string
	Limit          int
	Cursor         string
	Desc           bool
}

// Filtered tells whether the query lists only some trx: a page then looks
// at a bounded number of them, and may hold fewer than Limit.
func (q FinlogQuery) Filtered() bool {
	return q.Currency != "" || q.Reason != "" || q.Kind != "" || q.Status != "" || q.IdempotencyKey != ""
}

// FinlogPage is one page of trx, oldest first (or newest first with Desc).
// NextCursor is empty on the last page.
type FinlogPage struct {
	Items      []Trx  `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// FinlogLimitMax bounds a finlog page.
const FinlogLimitMax = 500

// RevenueQuery selects a revenue report: paid currency movements of a
// namespace in [From, To).
type RevenueQuery struct {
	Namespace Namespace
	From, To  time.Time
	Currency  string
}

// RevenueLine is the report of one currency and fiat over [From, To):
// each figure in coins (minor units of the currency) and, in the field
// named with Value, in real money (minor units of Fiat). The figures
// reconcile exactly (Reconciles):
//
//	Opening + Deposited + ConvertedIn = Recognised + ConvertedOut + Expired + Refunded + Deferred
//
// and over all currencies of one fiat ConvertedIn and ConvertedOut cancel
// in value (an exchange moves value, it makes none): what was paid is
// recognised, expired, refunded or still deferred.
type RevenueLine struct {
	Currency string `json:"currency"`
	Fiat     string `json:"fiat"`
	// Opening is paid currency outstanding at From: Deferred of the
	// period before (0 from the ledger's start).
	Opening Amount `json:"opening"`
	// Deposited is paid currency granted by purchases in the period.
	Deposited Amount `json:"deposited"`
	// Recognised is paid currency consumed in the period: revenue
	// recognised. A hold's consume counts when the hold commits; until
	// then it is deferred.
	Recognised Amount `json:"recognised"`
	// ConvertedIn and ConvertedOut are paid currency carried over by
	// exchanges (paid A into paid B): not revenue.
	ConvertedIn  Amount `json:"converted_in"`
	ConvertedOut Amount `json:"converted_out"`
	// Expired is paid currency that expired in the period (breakage).
	Expired Amount `json:"expired"`
	// Refunded is paid currency taken back by refunds and chargebacks
	// in the period; RefundShortfall what they could not take back
	// (spent, which stays recognised; expired, which stays breakage;
	// reserved by pending holds or exchanged away), less what holds rolled
	// back in the period gave back to earlier refunds (coins the holds
	// reserved when their orders were refunded).
	Refunded        Amount `json:"refunded"`
	RefundShortfall Amount `json:"refund_shortfall"`
	// Deferred is paid currency outstanding at To, with what pending
	// holds reserve: deferred revenue.
	Deferred Amount `json:"deferred"`

	OpeningValue         Amount `json:"opening_value"`
	DepositedValue       Amount `json:"deposited_value"`
	RecognisedValue      Amount `json:"recognised_value"`
	ConvertedInValue     Amount `json:"converted_in_value"`
	ConvertedOutValue    Amount `json:"converted_out_value"`
	ExpiredValue         Amount `json:"expired_value"`
	RefundedValue        Amount `json:"refunded_value"`
	RefundShortfallValue Amount `json:"refund_shortfall_value"`
	DeferredValue        Amount `json:"deferred_value"`
}

// Figures are the line's figures, in coins then in value, each in the
// order of the fields: the order a store reads them in.
func (l *RevenueLine) Figures() []*Amount {
	return []*Amount{&l.Opening, &l.Deposited, &l.Recognised, &l.ConvertedIn, &l.ConvertedOut, &l.Expired, &l.Refunded,
		&l.RefundShortfall, &l.Deferred,
		&l.OpeningValue, &l.DepositedValue, &l.RecognisedValue, &l.ConvertedInValue, &l.ConvertedOutValue, &l.ExpiredValue,
		&l.RefundedValue, &l.RefundShortfallValue, &l.DeferredValue}
}

// Add adds r's figures to l's (the lines of one currency and fiat from
// two shards). Errors: internal, when a figure would pass int64, with l
// unchanged: a report never answers a wrapped sum.
func (l *RevenueLine) Add(r RevenueLine) error {
	sum := *l
	for i, f := range r.Figures() {
		to := sum.Figures()[i]
		v, ok := to.Add(*f)
		if !ok {
			return Errorf(CodeInternal, "revenue of %s %s: a figure passes int64 minor units", l.Currency, l.Fiat)
		}
		*to = v
	}
	*l = sum
	return nil
}

// Reconciles checks the line's identity, in coins and in value: Opening
// + Deposited + ConvertedIn = Recognised + ConvertedOut + Expired +
// Refunded + Deferred. The sums are exact (big integers): a damaged
// figure near int64 is reported, never wrapped. The error says by how
// much each side differs.
func (l RevenueLine) Reconciles() error {
	var errs []string
	for _, side := range []struct {
		unit string
		in   []Amount
		out  []Amount
	}{
		{"coins", []Amount{l.Opening, l.Deposited, l.ConvertedIn}, []Amount{l.Recognised, l.ConvertedOut, l.Expired, l.Refunded, l.Deferred}},
		{"value", []Amount{l.OpeningValue, l.DepositedValue, l.ConvertedInValue},
			[]Amount{l.RecognisedValue, l.ConvertedOutValue, l.ExpiredValue, l.RefundedValue, l.DeferredValue}},
	} {
		diff := new(big.Int)
		for _, a := range side.in {
			diff.Add(diff, big.NewInt(int64(a)))
		}
		for _, a := range side.out {
			diff.Sub(diff, big.NewInt(int64(a)))
		}
		if diff.Sign() != 0 {
			errs = append(errs, fmt.Sprintf("in %s, opening + deposited + converted_in exceeds recognised + converted_out + expired + refunded + deferred by %s", side.unit, diff))
		}
	}
	if len(errs) > 0 {
		return Errorf(CodeInternal, "revenue of %s %s does not reconcile: %s", l.Currency, l.Fiat, strings.Join(errs, "; "))
	}
	return nil
}

// Validate checks a balance query's ids and time. Errors:
// invalid_argument.
func (q BalanceQuery) Validate() error {
	if q.Namespace <= 0 || q.PlayerID <= 0 {
		return Errorf(CodeInvalid, "namespace and player_id must be > 0")
	}
	return checkOptTime("at", q.At)
}

// Validate checks a finlog query's ids, times, reason and limit (0 means
// the default). A period given whole must not be empty: from before to,
// as in a revenue report; a client that swapped them would read an empty
// finlog as a player with no history. Errors: invalid_argument.
func (q FinlogQuery) Validate() error {
	switch {
	case q.Namespace <= 0 || q.PlayerID <= 0:
		return Errorf(CodeInvalid, "namespace and player_id must be > 0")
	case q.Limit < 0 || q.Limit > FinlogLimitMax:
		return Errorf(CodeInvalid, "limit must be 1–%d, or 0 for the default", FinlogLimitMax)
	case !utf8.ValidString(q.Reason) || strings.IndexByte(q.Reason, 0) >= 0:
		return Errorf(CodeInvalid, "reason: must be UTF-8 without NUL")
	case q.Kind != "" && !slices.Contains(TrxKinds, q.Kind):
		return Errorf(CodeInvalid, "kind: must be change, hold, exchange, expire or refund")
	case q.Status != "" && !slices.Contains(TrxStatuses, q.Status):
		return Errorf(CodeInvalid, "status: must be committed, pending, rolled_back or expired")
	case utf8.RuneCountInString(q.IdempotencyKey) > IdempotencyKeyLenMax || !utf8.ValidString(q.IdempotencyKey) || strings.IndexByte(q.IdempotencyKey, 0) >= 0:
		return Errorf(CodeInvalid, "idempotency_key: must be at most %d characters of UTF-8, without NUL", IdempotencyKeyLenMax)
	case q.From != nil && q.To != nil && !q.From.Before(*q.To):
		return Errorf(CodeInvalid, "from must be before to")
	}
	if err := checkOptTime("from", q.From); err != nil {
		return err
	}
	return checkOptTime("to", q.To)
}

// The orders of a finlog: oldest first (the default) or newest first.
const (
	FinlogAsc  = "asc"
	FinlogDesc = "desc"
)

// FinlogOrder reads a finlog's order, as both transports carry it: asc
// (oldest first, also the default, "") or desc. Errors:
// invalid_argument.
func FinlogOrder(order string) (desc bool, err error) {
	switch order {
	case "", FinlogAsc:
		return false, nil
	case FinlogDesc:
		return true, nil
	}
	return false, Errorf(CodeInvalid, "order: must be asc or desc")
}

// NewRevenueQuery is the revenue query of namespace ns over [from, to),
// as both transports carry it: either time may be missing from a
// request, and a report needs both. Errors: invalid_argument.
func NewRevenueQuery(ns Namespace, from, to *time.Time, currency string) (RevenueQuery, error) {
	if from == nil || to == nil {
		return RevenueQuery{}, Errorf(CodeInvalid, "from and to are required")
	}
	return RevenueQuery{Namespace: ns, From: *from, To: *to, Currency: currency}, nil
}

// Validate checks a revenue query's namespace and period. Errors:
// invalid_argument.
func (q RevenueQuery) Validate() error {
	if q.Namespace <= 0 || !q.From.Before(q.To) {
		return Errorf(CodeInvalid, "namespace must be > 0 and from before to")
	}
	if err := CheckTime("from", q.From); err != nil {
		return err
	}
	return CheckTime("to", q.To)
}

// checkOptTime checks a time a query may leave out.
func checkOptTime(field string, t *time.Time) error {
	if t == nil {
		return nil
	}
	return CheckTime(field, *t)
}

// Ledger is the money service. Implementations are safe for concurrent use.
// Every method's ctx bounds all its database work. Writes are idempotent per
// Scope: replay reports whether the answer is the original result of an
// earlier request with the same key and payload.
type Ledger interface {
	// Balances reads a player's balances. Errors: invalid_argument,
	// shard_unavailable, internal.
	Balances(ctx context.Context, q BalanceQuery) (Balances, error)
	// Change applies ops atomically, or with Hold begins a hold. A paid
	// grant's order is credited at most once, whoever presents it
	// (PurchaseKey.Credit). Errors: invalid_argument (also a balance past
	// BalanceMax), insufficient_funds, too_many_lots,
	// idempotency_conflict, purchase_already_credited,
	// shard_unavailable, internal.
	Change(ctx context.Context, req ChangeRequest) (trx Trx, replay bool, err error)
	// BatchChange applies each change as Change would, atomically per
	// change and never across changes, and answers each in request
	// order. It behaves as if the changes were sent one after the other:
	// one player's changes run in request order, so the second of
	// two changes with one key is a replay or idempotency_conflict of the
	// first. A change that fails does not stop the others. The error is
	// the whole batch's, returned before any change runs:
	// invalid_argument (no changes, or more than BatchChangesMax). Each
	// result's Err has one of Change's codes.
	BatchChange(ctx context.Context, reqs []ChangeRequest) ([]ChangeResult, error)
	// Commit applies a pending hold's grants, and records the client that
	// committed it (Trx.FinishedBy). Committing a committed hold is a
	// replay. Errors: not_found, hold_not_pending (rolled back, or not a
	// hold), hold_expired, invalid_argument and too_many_lots (a grant
	// past a bound: the hold stays pending), shard_unavailable, internal.
	Commit(ctx context.Context, req FinishRequest) (trx Trx, replay bool, err error)
	// Rollback returns a pending hold's reservations to their lots, and
	// records the client that rolled it back; no bound can refuse it.
	// Rolling back a rolled-back or expired hold is a replay. Errors:
	// invalid_argument, not_found, hold_not_pending (committed, or not a
	// hold), shard_unavailable, internal.
	Rollback(ctx context.Context, req FinishRequest) (trx Trx, replay bool, err error)
	// Trx reads one trx by its scope. Errors: not_found, shard_unavailable,
	// internal.
	Trx(ctx context.Context, s Scope) (Trx, error)
	// Exchange consumes one currency and grants another at the configured
	// rate. Errors: invalid_argument, insufficient_funds, too_many_lots,
	// idempotency_conflict, shard_unavailable, internal.
	Exchange(ctx context.Context, req ExchangeRequest) (trx Trx, replay bool, err error)
	// Refund takes a store order credited to the player back, a refund or
	// a chargeback (Player.Refund), at most once per order. Errors:
	// invalid_argument, not_found (the order was not credited to the
	// player), already_refunded, idempotency_conflict,
	// shard_unavailable, internal.
	Refund(ctx context.Context, req RefundRequest) (trx Trx, replay bool, err error)
	// Finlog reads a page of a player's trx with their ops. Errors:
	// invalid_argument, shard_unavailable, internal.
	Finlog(ctx context.Context, q FinlogQuery) (FinlogPage, error)
	// Revenue reports paid currency movements of a namespace over every
	// shard, per currency and fiat. Errors: invalid_argument,
	// shard_unavailable, internal.
	Revenue(ctx context.Context, q RevenueQuery) ([]RevenueLine, error)
	// Order reads the claim of a store order: which player and request
	// presented it first. One lookup, on the shard the order's key
	// hashes to. Errors: invalid_argument, not_found (never presented),
	// shard_unavailable, internal.
	Order(ctx context.Context, k PurchaseKey) (OrderClaim, error)
}

// SpendLot is what the spend order needs to know of a lot.
type SpendLot struct {
	ID        int64
	Paid      bool
	ExpiresAt *time.Time
	Priority  int32
	CreatedAt time.Time
}

// SortForSpend orders lots in which a consume takes them, by the currency's
// spend order; ties go to the oldest lot.
func SortForSpend(lots []SpendLot, order []SpendKey) {
	sort.SliceStable(lots, func(i, j int) bool { return compareForSpend(order, lots[i], lots[j]) < 0 })
}

// compareForSpend orders two lots as a consume takes them, by the spend
// order; ties go to the oldest lot. Two lots are never equal: their ids
// differ.
func compareForSpend(order []SpendKey, a, b SpendLot) int {
	for _, k := range order {
		if c := compareSpend(k, a, b); c != 0 {
			return c
		}
	}
	return older(a, b)
}

// older orders lots by age: by the time of the write that created them
// (a player's writes have strictly increasing times), then by id. Ids
// alone do not tell age: they come from a sequence each session caches
// in blocks, so a lot created later may have the smaller id.
func older(a, b SpendLot) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
}

func compareSpend(k SpendKey, a, b SpendLot) int {
	switch k {
	case SpendPriority:
		return cmp.Compare(b.Priority, a.Priority)
	case SpendExpiring:
		switch {
		case a.ExpiresAt == nil && b.ExpiresAt == nil:
			return 0
		case a.ExpiresAt == nil:
			return 1
		case b.ExpiresAt == nil:
			return -1
		}
		return a.ExpiresAt.Compare(*b.ExpiresAt)
	case SpendFree:
		return cmpBool(a.Paid, b.Paid)
	case SpendPaid:
		return cmpBool(b.Paid, a.Paid)
	case SpendOldest:
		return older(a, b)
	case SpendNewest:
		return older(b, a)
	}
	return 0
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
