package bench

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cofferhq/coffer/shard"
)

// TestBaselineStatementsAreOneText: the SQL baseline sends the statements
// the pgbench script holds, with $n parameters in place of :name ones.
func TestBaselineStatementsAreOneText(t *testing.T) {
	p := positional(grantSteps[0])
	if !strings.Contains(p.sql, "VALUES ($1, $2, $3, $4, $5, $5)") || !reflect.DeepEqual(p.names, []string{"trx_id", "ns", "player_id", "currency", "amount"}) {
		t.Fatalf("positional: %q %v", p.sql, p.names)
	}
	script := pgbenchTransaction(7, "k'1-")
	for _, st := range grantSteps {
		if !strings.Contains(script, shard.Tables(st, 7)+";") {
			t.Errorf("the pgbench transaction lacks %q:\n%s", st, script)
		}
	}
	for _, want := range []string{"BEGIN;\n", "FROM bench_player_7 WHERE i = :i", `RETURNING trx_id, player_id \gset`, "'k''1-' || :client_id", "\nEND;\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("the pgbench transaction lacks %q:\n%s", want, script)
		}
	}
}
