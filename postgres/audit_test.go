package postgres_test

import (
	"testing"

	"github.com/cofferhq/coffer"
)

// TestAuditFindsDamage corrupts rows behind the store's back; the audit must
// report each kind of damage.
func TestAuditFindsDamage(t *testing.T) {
	cases := map[string]string{
		"lot differs from its ops":                   "UPDATE lot_%d SET amount = amount + 1",
		"balance_after chain broken":                 "DELETE FROM op_%d WHERE seq = 0 AND kind = 'grant' AND amount = 5",
		"balance differs from its ops":               "INSERT INTO op_%[1]d SELECT trx_id, seq + 10, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, purchase, pos + 10 FROM op_%[1]d WHERE amount = 7",
		"player order broken":                        "UPDATE op_%d SET pos = pos - 1 WHERE amount = 7",
		"lot reservation differs from pending holds": "UPDATE lot_%d SET reserved = 3",
		"balance above its bound":                    "UPDATE lot_%d SET reserved = 1000000000000000000",
		"finisher of no finish":                      "UPDATE trx_%d SET finished_by = 7",
		"too many lots": "INSERT INTO lot_%[1]d SELECT ns, player_id, lot_id + i, currency, paid, 1, expires_at, priority, created_at, trx_id, 0 " +
			"FROM lot_%[1]d, generate_series(1, 1000) AS i",
	}
	for check, damage := range cases {
		t.Run(check, func(t *testing.T) {
			e := newEnv(t)
			e.mustChange(31, "a", free("gold", 5))
			e.mustChange(31, "b", free("gold", 7))
			e.auditFinds(31, check, damage)
		})
	}
}

// TestAuditFindsAHoldBegunAtItsFinishVersion: a finished hold's begin
// version must be below its finish's (balances at a past time answer it).
func TestAuditFindsAHoldBegunAtItsFinishVersion(t *testing.T) {
	e := newEnv(t)
	e.mustChange(31, "a", free("gold", 5))
	_, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(31, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -2)}})
	must(t, err)
	_, _, err = e.store.Commit(ctx, byItsClient(31, "h"))
	must(t, err)
	e.auditFinds(31, "version went back", "UPDATE trx_%d SET begin_version = version WHERE kind = 'hold'")
}

// TestAHoldFinishedWithoutItsBeginVersion: a finished hold's row that
// lost its begin's version cannot give its first answer again: the audit
// finds it, and a replay of its begin is internal, not the hold as now.
func TestAHoldFinishedWithoutItsBeginVersion(t *testing.T) {
	e := newEnv(t)
	e.mustChange(32, "a", free("gold", 5))
	req := coffer.ChangeRequest{Scope: scope(32, "h"), Hold: true, Ops: []coffer.OpRequest{free("gold", -2)}}
	_, _, err := e.store.Change(ctx, req)
	must(t, err)
	_, _, err = e.store.Rollback(ctx, byItsClient(32, "h"))
	must(t, err)
	e.auditFinds(32, "version went back", "UPDATE trx_%d SET begin_version = NULL WHERE kind = 'hold'")
	_, _, err = e.store.Change(ctx, req)
	wantCode(t, err, coffer.CodeInternal)
}
