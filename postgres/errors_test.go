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

// TestStatementText: statements of different shards read the same, and
// so do a function's statements whether their constants were kept or
// numbered.
func TestStatementText(t *testing.T) {
	for _, c := range []struct {
		in     string
		nested bool
		want   string
	}{
		{"INSERT INTO trx_12 (ns)\n\t\tVALUES ($1)", false, "INSERT INTO trx_N (ns) VALUES ($1)"},
		{"SELECT nextval('id_seq_3') FROM bench_trx_0 JOIN op_7 o ON", false, "SELECT nextval('id_seq_N') FROM bench_trx_N JOIN op_N o ON"},
		{"SELECT generate_series(1, $3)", false, "SELECT generate_series(1, $3)"},
		{"INSERT INTO balance_3 VALUES (p_ns, 1, 'change', 'it''s', interval '1 microsecond')", true,
			"INSERT INTO balance_N VALUES (p_ns, ?, ?, ?, interval ?)"},
		{"INSERT INTO balance_11 VALUES (p_ns, $3, $18, $19, interval $20)", true,
			"INSERT INTO balance_N VALUES (p_ns, ?, ?, ?, interval ?)"},
	} {
		if got := statementText(c.in, c.nested); got != c.want {
			t.Errorf("statementText(%q, %v) = %q, want %q", c.in, c.nested, got, c.want)
		}
	}
}
