package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestClassify: the code of each driver error, and whether it marks the
// database down (only failures of the connection or server do).
func TestClassify(t *testing.T) {
	cases := []struct {
		err        error
		want       coffer.Code
		connFailed bool
	}{
		{coffer.Errorf(coffer.CodeInsufficientFunds, "x"), coffer.CodeInsufficientFunds, false},
		{&pgconn.PgError{Code: "57P01"}, coffer.CodeUnavailable, true},
		{&pgconn.PgError{Code: "08006"}, coffer.CodeUnavailable, true},
		{&pgconn.PgError{Code: "53300"}, coffer.CodeUnavailable, false},
		{&pgconn.PgError{Code: "40P01"}, coffer.CodeUnavailable, false},
		{&pgconn.PgError{Code: "40001"}, coffer.CodeUnavailable, false},
		{&pgconn.PgError{Code: "23505", ConstraintName: "trx_3_idempotency"}, coffer.CodeUnavailable, false},
		{&pgconn.PgError{Code: "22003"}, coffer.CodeInvalid, false},
		{&pgconn.PgError{Code: "23514"}, coffer.CodeInternal, false},
		{fmt.Errorf("scan: %w", context.DeadlineExceeded), coffer.CodeUnavailable, false},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), coffer.CodeUnavailable, true},
		{json.Unmarshal([]byte("{"), new(map[string]int)), coffer.CodeInternal, false},
	}
	for _, c := range cases {
		mapped, connFailed := classify(3, c.err)
		if got := coffer.ErrorCode(mapped); got != c.want || connFailed != c.connFailed {
			t.Errorf("classify(%v) = %s, %v; want %s, %v", c.err, got, connFailed, c.want, c.connFailed)
		}
	}
}
