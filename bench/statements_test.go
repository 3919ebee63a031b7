package bench

import "testing"

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
