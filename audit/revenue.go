package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
)

// The revenue report reconciles (coffer.RevenueLine.Reconciles), checked
// from the rows: per namespace, currency and fiat, what the paid ops say
// came in (deposited, converted in) less what they say went out
// (recognised, converted out, expired, refunded) is what the paid lots
// hold, with what pending holds reserve from them, in coins and in value.
// The ops are classed as the report classes them, but the deferred side is
// read from the lots, not from the ops: an op the report would not count,
// or count twice, breaks the identity.

// reconciliation reads, per ns, currency and fiat, the all-time figures of
// a revenue line from the ops (Opening is 0) and Deferred from the lots,
// as text (sums in numeric: a damaged ledger may pass int64). A pending
// hold's consume is not recognised yet: its coins are still the lot's
// (reserved).
var reconciliation = func() string {
	sum := func(filter string) string { return "COALESCE(sum(%[1]s) FILTER (WHERE " + filter + "), 0)" }
	flows := []struct{ name, expr string }{
		{"deposited", sum("o.kind = 'grant' AND o.cause = 'change'")},
		{"recognised", "-" + sum("o.kind = 'consume' AND o.cause = 'change' AND t.trx_id IS NULL") +
			" - " + sum("o.kind = 'grant' AND o.cause = 'release'")},
		{"converted_in", sum("o.kind = 'grant' AND o.cause = 'exchange'")},
		{"converted_out", "-" + sum("o.kind = 'consume' AND o.cause = 'exchange'")},
		{"expired", "-" + sum("o.kind = 'expire'")},
		{"refunded", "-" + sum("o.kind = 'consume' AND o.cause IN ('refund', 'refund_held')")},
	}
	var cols, out []string
	for _, unit := range []struct{ col, sfx string }{{"o.amount", ""}, {"COALESCE(o.value, 0)", "_value"}} {
		for _, f := range flows {
			cols = append(cols, fmt.Sprintf(f.expr, unit.col)+" AS "+f.name+unit.sfx)
			out = append(out, "COALESCE(f."+f.name+unit.sfx+", 0)::text")
		}
		out = append(out, "COALESCE(l.deferred"+unit.sfx+", 0)::text")
	}
	return `SELECT COALESCE(f.ns, l.ns), COALESCE(f.currency, l.currency), COALESCE(f.fiat, l.fiat), ` + strings.Join(out, ", ") + `
	FROM (SELECT o.ns, o.currency, COALESCE(o.fiat, '') AS fiat, ` + strings.Join(cols, ", ") + `
		FROM op_N o LEFT JOIN trx_N t ON t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id AND t.status = 'pending'
		WHERE o.paid GROUP BY 1, 2, 3) f
	FULL JOIN (SELECT ns, currency, COALESCE(fiat, '') AS fiat, sum(amount + reserved) AS deferred,
			sum(value + value_reserved) AS deferred_value
		FROM lot_N WHERE paid GROUP BY 1, 2, 3) l
	ON l.ns = f.ns AND l.currency = f.currency AND l.fiat = f.fiat`
}()

// checkRevenue checks that the revenue of every namespace, currency and
// fiat on shard id reconciles.
func (c *Checker) checkRevenue(ctx context.Context, id coffer.ShardID, r *Report) {
	const name = "revenue does not reconcile"
	rows, err := c.query(ctx, id, shard.Tables(reconciliation, id))
	if err != nil {
		r.Failures = append(r.Failures, Failure{Shard: id, Check: name, Error: err.Error()})
		return
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		var ns, cur int64
		var l coffer.RevenueLine
		// The figures read, in the order of reconciliation's columns.
		figures := []*coffer.Amount{&l.Deposited, &l.Recognised, &l.ConvertedIn, &l.ConvertedOut, &l.Expired, &l.Refunded, &l.Deferred,
			&l.DepositedValue, &l.RecognisedValue, &l.ConvertedInValue, &l.ConvertedOutValue, &l.ExpiredValue, &l.RefundedValue, &l.DeferredValue}
		texts := make([]string, len(figures))
		dest := []any{&ns, &cur, &l.Fiat}
		for i := range texts {
			dest = append(dest, &texts[i])
		}
		if err := rows.Scan(dest...); err != nil {
			r.Failures = append(r.Failures, Failure{Shard: id, Check: name, Error: err.Error()})
			return
		}
		l.Currency = strconv.FormatInt(cur, 10)
		var err error
		for i, f := range figures {
			v, perr := strconv.ParseInt(texts[i], 10, 64)
			if perr != nil {
				err = fmt.Errorf("a figure passes int64: %s", strings.Join(texts, " "))
				break
			}
			*f = coffer.Amount(v)
		}
		if err == nil {
			err = l.Reconciles()
		}
		if err == nil {
			continue
		}
		if found++; found <= violationsMax {
			r.Violations = append(r.Violations, Violation{Shard: id, Check: name, Detail: fmt.Sprintf("namespace %d currency %d fiat %q: %v", ns, cur, l.Fiat, err)})
		}
	}
	if err := rows.Err(); err != nil {
		r.Failures = append(r.Failures, Failure{Shard: id, Check: name, Error: err.Error()})
	}
}
