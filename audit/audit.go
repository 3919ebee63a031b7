// Package audit checks the ledger's invariants on every shard, from the
// rows alone: it is the second, independent check of what the store
// enforces before commit. The CLI, the tests and the fault suite use it.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/shard"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Violation is one broken invariant.
type Violation struct {
	Shard  coffer.ShardID `json:"shard"`
	Check  string         `json:"check"`
	Detail string         `json:"detail"`
}

// Failure is a check that could not run on a shard (the database is down,
// say); the checks after it ran all the same.
type Failure struct {
	Shard coffer.ShardID `json:"shard"`
	Check string         `json:"check"`
	Error string         `json:"error"`
}

// Report is the result of a check of all shards.
type Report struct {
	Shards     int         `json:"shards"`
	Violations []Violation `json:"violations"`
	Failures   []Failure   `json:"failures"`
	// Totals is the sum of all lots per namespace and currency id
	// ("ns/currency"), across shards and players: it may pass int64.
	Totals map[string]*big.Int `json:"totals"`
	// Reserved is the amount held by pending holds, per "ns/currency".
	Reserved map[string]*big.Int `json:"reserved"`
}

// Clean tells whether no invariant is broken and every check ran.
func (r Report) Clean() bool { return len(r.Violations) == 0 && len(r.Failures) == 0 }

// Checker checks the shards of a router.
type Checker struct {
	Router *shard.Router
	// HoldGrace is how long past its TTL a pending hold may stay before it
	// is a violation (the sweeper's interval and then some).
	HoldGrace time.Duration
	// Progress, if set, gets one line per shard.
	Progress io.Writer
}

// check is one invariant: a query per shard whose every row is a violation,
// described by its columns.
type check struct {
	name, sql string
}

var checks = []check{
	{"negative lot", `SELECT ns, player_id, lot_id, amount, reserved, value, value_reserved FROM lot_N
		WHERE amount < 0 OR reserved < 0 OR value < 0 OR value_reserved < 0`},
	{"lot reservation differs from pending holds", `SELECT COALESCE(l.ns, h.ns), COALESCE(l.player_id, h.player_id), COALESCE(l.lot_id, h.lot_id),
			l.reserved, h.reserved
		FROM (SELECT ns, player_id, lot_id, reserved FROM lot_N WHERE reserved <> 0) l
		FULL JOIN (SELECT o.ns, o.player_id, o.lot_id, -sum(o.amount) AS reserved FROM op_N o
				JOIN trx_N t ON t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id
				WHERE t.status = 'pending' AND o.kind = 'consume' GROUP BY 1, 2, 3) h
			ON h.ns = l.ns AND h.player_id = l.player_id AND h.lot_id = l.lot_id
		WHERE l.reserved IS DISTINCT FROM h.reserved`},
	// What a lot owes a refund is part of its reservation (coffer.BookLot.Owed).
	{"lot owes a refund more than it reserves", `SELECT ns, player_id, lot_id, owed, reserved FROM lot_N
		WHERE owed < 0 OR owed > reserved`},
	{"lot value reservation differs from pending holds", `SELECT COALESCE(l.ns, h.ns), COALESCE(l.player_id, h.player_id), COALESCE(l.lot_id, h.lot_id),
			l.value_reserved, h.value_reserved
		FROM (SELECT ns, player_id, lot_id, value_reserved FROM lot_N WHERE value_reserved <> 0) l
		FULL JOIN (SELECT o.ns, o.player_id, o.lot_id, -sum(o.value) AS value_reserved FROM op_N o
				JOIN trx_N t ON t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id
				WHERE t.status = 'pending' AND o.kind = 'consume' AND o.value <> 0 GROUP BY 1, 2, 3) h
			ON h.ns = l.ns AND h.player_id = l.player_id AND h.lot_id = l.lot_id
		WHERE l.value_reserved IS DISTINCT FROM h.value_reserved`},
	// The value of a lot is what its coins cost (coffer.Worth): only
	// paid lots have one, in their fiat, and the last coin out of a lot
	// takes what is left of it (coffer.ValueShare).
	{"lot value without its coins", `SELECT ns, player_id, lot_id, paid, fiat, amount, value, reserved, value_reserved FROM lot_N
		WHERE (amount = 0 AND value <> 0) OR (reserved = 0 AND value_reserved <> 0)
			OR (fiat IS NULL AND (value <> 0 OR value_reserved <> 0)) OR (NOT paid AND (fiat IS NOT NULL OR store IS NOT NULL))`},
	{"op value differs from its lot's fiat", `SELECT o.ns, o.player_id, o.trx_id, o.seq, o.fiat, l.fiat FROM op_N o
		JOIN lot_N l ON l.ns = o.ns AND l.player_id = o.player_id AND l.lot_id = o.lot_id
		WHERE o.fiat IS DISTINCT FROM l.fiat OR (o.fiat IS NULL) <> (o.value IS NULL)`},
	{"purchase value differs from its price", `SELECT ns, player_id, trx_id, seq, value, fiat, purchase FROM op_N
		WHERE kind = 'grant' AND purchase IS NOT NULL AND fiat IS NOT NULL
			AND (value <> (purchase->>'price')::numeric OR fiat <> purchase->>'fiat')`},
	// An exchange moves value from the lots it consumes into the lots it
	// makes, or makes it revenue (cause change): it creates none.
	{"exchange makes value", `SELECT ns, player_id, trx_id, fiat, sum(value) FROM op_N
		WHERE cause = 'exchange' AND value IS NOT NULL GROUP BY 1, 2, 3, 4 HAVING sum(value) <> 0`},
	// A lot records whether an exchange made it (coffer.BookLot.Exchanged):
	// a paid lot its trx's grant of cause exchange created. What
	// it owes a refund follows the mark (ADR 0015).
	{"lot's exchange mark differs from its grant", `SELECT l.ns, l.player_id, l.lot_id, l.trx_id, l.paid, l.exchanged FROM lot_N l
		WHERE l.exchanged <> (l.paid AND EXISTS (SELECT 1 FROM op_N g WHERE g.trx_id = l.trx_id AND g.ns = l.ns AND g.player_id = l.player_id
			AND g.lot_id = l.lot_id AND g.kind = 'grant' AND g.cause = 'exchange'))`},
	// The bounds of coffer.BalanceMax and coffer.LotsMax, per player and
	// currency; sums in numeric, which never overflows.
	{"balance above its bound", `SELECT ns, player_id, currency, sum(amount), sum(reserved) FROM lot_N
		GROUP BY 1, 2, 3 HAVING sum(amount) + sum(reserved) > ` + strconv.FormatInt(int64(coffer.BalanceMax), 10)},
	{"too many lots", `SELECT ns, player_id, currency, count(*) FROM lot_N WHERE amount > 0 OR reserved > 0
		GROUP BY 1, 2, 3 HAVING count(*) > ` + strconv.Itoa(coffer.LotsMax)},
	{"lot differs from its ops", `SELECT COALESCE(l.ns, o.ns), COALESCE(l.player_id, o.player_id), COALESCE(l.lot_id, o.lot_id),
			l.amount, o.total, l.value, o.value
		FROM lot_N l FULL JOIN (SELECT ns, player_id, lot_id, sum(amount) AS total, COALESCE(sum(value), 0) AS value FROM op_N GROUP BY 1, 2, 3) o
			ON o.ns = l.ns AND o.player_id = l.player_id AND o.lot_id = l.lot_id
		WHERE l.amount IS DISTINCT FROM o.total OR l.value IS DISTINCT FROM o.value`},
	{"balance differs from its ops", `SELECT COALESCE(l.ns, o.ns), COALESCE(l.player_id, o.player_id), COALESCE(l.currency, o.currency), l.total, o.total
		FROM (SELECT ns, player_id, currency, sum(amount) AS total FROM lot_N GROUP BY 1, 2, 3) l
		FULL JOIN (SELECT ns, player_id, currency, sum(amount) AS total FROM op_N GROUP BY 1, 2, 3) o
			ON o.ns = l.ns AND o.player_id = l.player_id AND o.currency = l.currency
		WHERE l.total IS DISTINCT FROM o.total`},
	// In numeric: the damage the chain check looks for includes sums that
	// wrapped, and a bigint sum of them would stop the check.
	{"balance_after chain broken", `SELECT ns, player_id, currency, trx_id, seq, prev, amount, balance_after FROM (
			SELECT ns, player_id, currency, trx_id, seq, amount::numeric, paid, balance_after, paid_after,
				(lag(balance_after, 1, 0::bigint) OVER w)::numeric AS prev, (lag(paid_after, 1, 0::bigint) OVER w)::numeric AS prev_paid
			FROM op_N WINDOW w AS (PARTITION BY ns, player_id, currency ORDER BY pos)) x
		WHERE balance_after <> prev + amount OR paid_after <> prev_paid + CASE WHEN paid THEN amount ELSE 0 END
			OR balance_after < 0 OR paid_after < 0 OR paid_after > balance_after`},
	// A player's trx and ops are in one order, by position: each has its
	// own, none beyond the last the player's row handed out, and times
	// never go back as positions grow (reads by time rely on it).
	{"player order broken", `SELECT ns, player_id, pos, created_at, prev_at, last FROM (
			SELECT e.ns, e.player_id, e.pos, e.created_at, b.pos AS last,
				lag(e.pos) OVER w AS prev, lag(e.created_at) OVER w AS prev_at
			FROM (SELECT ns, player_id, pos, created_at FROM trx_N UNION ALL SELECT ns, player_id, pos, created_at FROM op_N) e
			LEFT JOIN balance_N b ON b.ns = e.ns AND b.player_id = e.player_id
			WINDOW w AS (PARTITION BY e.ns, e.player_id ORDER BY e.pos)) x
		WHERE pos = prev OR created_at < prev_at OR pos < 1 OR last IS NULL OR pos > last`},
	// A finished hold's row keeps its begin's version, below its finish's,
	// and no other row has one: balances at a past time and a replay of
	// the begin answer it.
	{"version went back", `SELECT t.ns, t.player_id, t.trx_id, t.version, b.version, t.begin_version FROM trx_N t
		LEFT JOIN balance_N b ON b.ns = t.ns AND b.player_id = t.player_id
		WHERE b.version IS NULL OR t.version > b.version OR t.version < 1 OR t.begin_version >= t.version OR t.begin_version < 1
			OR (t.finished_at IS NULL) <> (t.begin_version IS NULL)`},
	// Who finished a hold (docs/console.md) is recorded with the finish:
	// a client, or coffer's sweeper (0); never on a trx not finished.
	{"finisher of no finish", `SELECT ns, player_id, trx_id, finished_by FROM trx_N
		WHERE finished_by IS NOT NULL AND (finished_at IS NULL OR finished_by < 0)`},
	{"op of no trx", `SELECT o.trx_id, o.seq FROM op_N o
		WHERE NOT EXISTS (SELECT 1 FROM trx_N t WHERE t.trx_id = o.trx_id AND t.ns = o.ns AND t.player_id = o.player_id)`},
	// Refunds (ADR 0014): each refunds an order credited to its player
	// before it, no order is refunded twice on a shard (with the claims'
	// check, which keeps an order's credit on one player, nowhere), and
	// each took, in every currency, what the order credited less its
	// recorded shortfall: coins taken back from the order's own lots and
	// clawed back, plus what the coins taken back from lots the order's
	// exchanges made count for there (recorded as exchanged; the
	// conversion is the domain's, coffer.Player.Refund).
	{"refund of an order not credited", `SELECT t.ns, t.player_id, t.trx_id, t.refund->>'store', t.refund->>'order_id' FROM trx_N t
		WHERE t.refund IS NOT NULL AND NOT EXISTS (SELECT 1 FROM op_N o WHERE o.ns = t.ns AND o.player_id = t.player_id
			AND o.purchase IS NOT NULL AND o.purchase->>'store' = t.refund->>'store' AND o.purchase->>'order_id' = t.refund->>'order_id'
			AND o.kind = 'grant' AND o.pos < t.pos)`},
	{"order refunded twice", `SELECT ns, refund->>'store', refund->>'order_id', array_agg(trx_id) FROM trx_N
		WHERE refund IS NOT NULL GROUP BY 1, 2, 3 HAVING count(*) > 1`},
	{"refund differs from its order", `WITH r AS (SELECT ns, player_id, trx_id, refund FROM trx_N WHERE refund IS NOT NULL),
		owed AS (SELECT r.trx_id, o.currency, sum(o.amount) AS amount FROM r JOIN op_N o ON o.ns = r.ns AND o.player_id = r.player_id
				AND o.purchase IS NOT NULL AND o.purchase->>'store' = r.refund->>'store' AND o.purchase->>'order_id' = r.refund->>'order_id'
				AND o.kind = 'grant'
			GROUP BY 1, 2),
		took AS (SELECT r.trx_id, o.currency, -sum(o.amount) AS amount FROM r
			JOIN op_N o ON o.trx_id = r.trx_id AND o.ns = r.ns AND o.player_id = r.player_id AND o.cause = 'refund'
			WHERE NOT EXISTS (SELECT 1 FROM lot_N l JOIN op_N g ON g.trx_id = l.trx_id AND g.lot_id = l.lot_id AND g.kind = 'grant' AND g.cause = 'exchange'
				WHERE l.ns = o.ns AND l.player_id = o.player_id AND l.currency = o.currency AND l.lot_id = o.lot_id
					AND l.store = r.refund->>'store' AND l.order_id = r.refund->>'order_id')
			GROUP BY 1, 2),
		short AS (SELECT r.trx_id, (s->>'currency')::int AS currency, sum((s->>'amount')::numeric) AS amount
			FROM r, jsonb_array_elements(COALESCE(r.refund->'shortfall', '[]') || COALESCE(r.refund->'exchanged', '[]')) s GROUP BY 1, 2),
		took_short AS (SELECT COALESCE(t.trx_id, s.trx_id) AS trx_id, COALESCE(t.currency, s.currency) AS currency,
				COALESCE(t.amount, 0) AS took, COALESCE(s.amount, 0) AS short
			FROM took t FULL JOIN short s ON s.trx_id = t.trx_id AND s.currency = t.currency)
		SELECT COALESCE(w.trx_id, x.trx_id), COALESCE(w.currency, x.currency), w.amount, x.took, x.short
		FROM owed w FULL JOIN took_short x ON x.trx_id = w.trx_id AND x.currency = w.currency
		WHERE COALESCE(w.amount, 0) <> COALESCE(x.took, 0) + COALESCE(x.short, 0)`},
}

const staleHolds = `SELECT ns, player_id, idempotency_key, hold_expires_at FROM trx_N
	WHERE status = 'pending' AND hold_expires_at < now() - make_interval(secs => $1)`

// Sums in numeric, read as text: they may pass int64.
const totals = `SELECT ns, currency, sum(amount)::text FROM lot_N GROUP BY 1, 2`

const reserved = `SELECT o.ns, o.currency, (-sum(o.amount))::text FROM op_N o JOIN trx_N t ON t.trx_id = o.trx_id
	WHERE t.status = 'pending' AND o.kind = 'consume' GROUP BY 1, 2`

// violationsMax bounds the rows reported per check and shard.
const violationsMax = 100

// Check runs every check on every shard. A check that cannot run is a
// Failure in the report, and the rest run all the same; the error joins
// the failures. Violations are in the report.
func (c *Checker) Check(ctx context.Context) (Report, error) {
	r := Report{Shards: c.Router.Map().ShardCount(), Violations: []Violation{}, Failures: []Failure{},
		Totals: map[string]*big.Int{}, Reserved: map[string]*big.Int{}}
	for sh := 0; sh < r.Shards; sh++ {
		id := coffer.ShardID(sh)
		violations, failures := len(r.Violations), len(r.Failures)
		c.checkShard(ctx, id, &r)
		if c.Progress != nil {
			fmt.Fprintf(c.Progress, "shard %d: %d violations", id, len(r.Violations)-violations)
			if n := len(r.Failures) - failures; n > 0 {
				fmt.Fprintf(c.Progress, ", %d checks could not run", n)
			}
			fmt.Fprintln(c.Progress)
		}
	}
	var errs []error
	for _, f := range r.Failures {
		errs = append(errs, fmt.Errorf("shard %d: %s: %s", f.Shard, f.Check, f.Error))
	}
	return r, errors.Join(errs...)
}

func (c *Checker) checkShard(ctx context.Context, id coffer.ShardID, r *Report) {
	fail := func(check string, err error) {
		if err != nil {
			r.Failures = append(r.Failures, Failure{Shard: id, Check: check, Error: err.Error()})
		}
	}
	for _, ch := range checks {
		fail(ch.name, c.collect(ctx, id, ch.name, shard.Tables(ch.sql, id), r))
	}
	name := "pending hold past its TTL"
	fail(name, c.collect(ctx, id, name, shard.Tables(staleHolds, id), r, c.HoldGrace.Seconds()))
	c.checkClaims(ctx, id, r)
	c.checkRevenue(ctx, id, r)
	fail("totals", c.sum(ctx, id, shard.Tables(totals, id), r.Totals))
	fail("reserved", c.sum(ctx, id, shard.Tables(reserved, id), r.Reserved))
}

// query runs sql on shard id's database.
func (c *Checker) query(ctx context.Context, id coffer.ShardID, sql string, args ...any) (pgx.Rows, error) {
	pool, err := c.Router.Pool(id)
	if err != nil {
		return nil, err
	}
	return pool.Query(ctx, sql, args...)
}

// sum adds the per "ns/currency" sums sql reads, as text, to m.
func (c *Checker) sum(ctx context.Context, id coffer.ShardID, sql string, m map[string]*big.Int) error {
	rows, err := c.query(ctx, id, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var ns, cur int64
		var text string
		if err := rows.Scan(&ns, &cur, &text); err != nil {
			return err
		}
		v, ok := new(big.Int).SetString(text, 10)
		if !ok {
			return fmt.Errorf("sum %q is not an integer", text)
		}
		k := fmt.Sprintf("%d/%d", ns, cur)
		if m[k] == nil {
			m[k] = new(big.Int)
		}
		m[k].Add(m[k], v)
	}
	return rows.Err()
}

func (c *Checker) collect(ctx context.Context, id coffer.ShardID, name, sql string, r *Report, args ...any) error {
	rows, err := c.query(ctx, id, sql+fmt.Sprintf(" LIMIT %d", violationsMax), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = text(v)
		}
		r.Violations = append(r.Violations, Violation{Shard: id, Check: name, Detail: strings.Join(parts, " ")})
	}
	return rows.Err()
}

// text is a column of a violation as people read it: numeric sums as
// their digits.
func text(v any) string {
	if n, ok := v.(pgtype.Numeric); ok {
		if s, err := n.Value(); err == nil && s != nil {
			return fmt.Sprint(s)
		}
	}
	return fmt.Sprint(v)
}
