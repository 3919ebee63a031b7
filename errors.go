package coffer

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error code. Transports map each code
// to one HTTP and gRPC status, in one table.
type Code string

// The error codes of the API contract (docs/api.md, Errors).
const (
	CodeInvalid          Code = "invalid_argument"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeNotFound         Code = "not_found"
	// CodeMethodNotAllowed refuses an HTTP method that the path does not
	// serve (HTTP only: gRPC has no methods of a path).
	CodeMethodNotAllowed    Code = "method_not_allowed"
	CodeInsufficientFunds   Code = "insufficient_funds"
	CodeTooManyLots         Code = "too_many_lots"
	CodeIdempotencyConflict Code = "idempotency_conflict"
	CodeHoldNotPending      Code = "hold_not_pending"
	CodeHoldExpired         Code = "hold_expired"
	// CodePurchaseAlreadyCredited refuses a paid grant whose store order
	// another request presented first (PurchaseKey.Credit).
	CodePurchaseAlreadyCredited Code = "purchase_already_credited"
	// CodeAlreadyRefunded refuses the refund of a store order that was
	// refunded already, under another idempotency key (Player.Refund).
	CodeAlreadyRefunded Code = "already_refunded"
	CodePayloadTooLarge Code = "payload_too_large"
	CodeUnavailable     Code = "shard_unavailable"
	// CodeOverloaded refuses a call at once because the instance is
	// serving as many as it may; nothing was done, retry (with the same
	// key) after Retry-After.
	CodeOverloaded Code = "overloaded"
	CodeInternal   Code = "internal"
)

// ServerFailure tells whether a call that ended with c failed on the
// service's side, which the log reports as an error: internal, or a
// database out of reach (shard_unavailable). The others are refusals,
// business as usual (insufficient funds, a replayed conflict), and so is
// overloaded: load shed on purpose, which the metrics count, where
// a line per refused call would flood the log when it matters least.
func (c Code) ServerFailure() bool { return c == CodeInternal || c == CodeUnavailable }

// Codes lists every code, in the order of the contract.
var Codes = []Code{CodeInvalid, CodeUnauthenticated, CodePermissionDenied, CodeNotFound, CodeMethodNotAllowed,
	CodeInsufficientFunds, CodeTooManyLots, CodeIdempotencyConflict, CodeHoldNotPending, CodeHoldExpired,
	CodePurchaseAlreadyCredited, CodeAlreadyRefunded, CodePayloadTooLarge, CodeUnavailable, CodeOverloaded, CodeInternal}

// Error is the one domain error type: a code, a message for people, and
// optionally the cause.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf makes an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode is the code of err: the code of the first *Error in its chain,
// internal for any other error, "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}
