// Package httpstatus is the HTTP status of each error code: the one table,
// which the HTTP transport answers by and the OpenAPI document states
// (internal/apigen). It imports nothing of ours but the domain, so that
// the document's generator can read it before the API's packages build.
package httpstatus

import (
	"net/http"

	"github.com/cofferhq/coffer"
)

var statusOf = map[coffer.Code]int{
	coffer.CodeInvalid:                 http.StatusBadRequest,
	coffer.CodeUnauthenticated:         http.StatusUnauthorized,
	coffer.CodePermissionDenied:        http.StatusForbidden,
	coffer.CodeNotFound:                http.StatusNotFound,
	coffer.CodeMethodNotAllowed:        http.StatusMethodNotAllowed,
	coffer.CodeInsufficientFunds:       http.StatusConflict,
	coffer.CodeTooManyLots:             http.StatusConflict,
	coffer.CodeIdempotencyConflict:     http.StatusConflict,
	coffer.CodeHoldNotPending:          http.StatusConflict,
	coffer.CodeHoldExpired:             http.StatusConflict,
	coffer.CodePurchaseAlreadyCredited: http.StatusConflict,
	coffer.CodeAlreadyRefunded:         http.StatusConflict,
	coffer.CodePayloadTooLarge:         http.StatusRequestEntityTooLarge,
	coffer.CodeUnavailable:             http.StatusServiceUnavailable,
	coffer.CodeOverloaded:              http.StatusServiceUnavailable,
	coffer.CodeInternal:                http.StatusInternalServerError,
}

// Of is the HTTP status of code, and false for a code the table lacks
// (which the transport answers as internal).
func Of(code coffer.Code) (int, bool) {
	s, ok := statusOf[code]
	return s, ok
}
