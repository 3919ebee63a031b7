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

func TestMapError(t *testing.T) {
	cases := []struct {
		err  error
		want coffer.Code
	}{
		{coffer.Errorf(coffer.CodeInsufficientFunds, "x"), coffer.CodeInsufficientFunds},
		{&pgconn.PgError{Code: "57P01"}, coffer.CodeUnavailable},
		{&pgconn.PgError{Code: "08006"}, coffer.CodeUnavailable},
		{&pgconn.PgError{Code: "22003"}, coffer.CodeInvalid},
		{&pgconn.PgError{Code: "23514"}, coffer.CodeInternal},
		{fmt.Errorf("scan: %w", context.DeadlineExceeded), coffer.CodeUnavailable},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), coffer.CodeUnavailable},
		{json.Unmarshal([]byte("{"), new(map[string]int)), coffer.CodeInternal},
	}
	for _, c := range cases {
		if got := coffer.ErrorCode(mapError(3, c.err)); got != c.want {
			t.Errorf("mapError(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
