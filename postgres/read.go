package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Balances reads current balances with the other reads of the database
// gathered with it (runReads: one round trip, a statement per shard, one
// snapshot per player), or with At the balances of that time, in one
// statement of index lookups (balancesAt).
func (s *Store) Balances(ctx context.Context, q coffer.BalanceQuery) (coffer.Balances, error) {
	if err := q.Validate(); err != nil {
		return coffer.Balances{}, err
	}
	only, err := s.catalog.Named(q.Currency)
	if err != nil {
		return coffer.Balances{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	out := coffer.Balances{Namespace: q.Namespace, PlayerID: q.PlayerID, Balances: []coffer.Balance{}}
	id := s.router.Map().ShardOf(q.PlayerID)
	pool, err := s.pool(ctx, id)
	if err != nil {
		return out, err
	}
	if q.At != nil {
		currencies := s.catalog.Currencies()
		if only != nil {
			currencies = []*coffer.Currency{only}
		}
		version, past, err := s.balancesAt(ctx, pool, s.q(id), q, currencies)
		if err != nil {
			return out, s.fail(id, err)
		}
		return s.catalog.BalancesAt(q, version, past)
	}
	r := &readRequest{ctx: ctx, shard: id, ns: q.Namespace, player: q.PlayerID}
	if err := s.read(ctx, r); err != nil {
		return out, err
	}
	return s.catalog.CurrentBalances(q, r.version, r.lots, r.at)
}

// read queues a balance read on the database of its shard and waits for
// its answer, following the shard to its new home, up to hopsMax times,
// when its batch met the shard's fence (errMoved).
func (s *Store) read(ctx context.Context, r *readRequest) error {
	for hop := 0; ; hop++ {
		db, err := s.home(ctx, r.shard, s.router.Available)
		if err != nil {
			return err
		}
		if err := s.readers[db].submit(ctx, []*readRequest{r}); err != nil {
			return err
		}
		if r.err != errMoved || hop == hopsMax {
			return r.err
		}
		r.err = nil
	}
}

// balancesAt loads, for each of currencies, what coffer.PastBalance
// needs to tell its balance at q.At, and what coffer.PastVersion needs
// to tell the player's version then.
func (s *Store) balancesAt(ctx context.Context, pool *pgxpool.Pool, qs *queries, q coffer.BalanceQuery, currencies []*coffer.Currency) (version coffer.PastVersion, past []coffer.PastBalance, err error) {
	ids := make([]int32, len(currencies))
	for i, c := range currencies {
		ids[i] = int32(c.ID)
	}
	rows, err := pool.Query(ctx, qs.balancesAt, q.Namespace, q.PlayerID, q.At.UTC(), ids)
	if err != nil {
		return version, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var p coffer.PastBalance
		var lotAmounts, nextAmounts []coffer.Amount
		var lotPaid, nextPaid []bool
		var lotExpires, nextExpires []*time.Time
		var trxAt, finishAt *time.Time
		var trxVersion, beginVersion, finishVersion *int64
		if err := rows.Scan(&p.Currency, &p.Total, &p.Paid, &lotAmounts, &lotPaid, &lotExpires, &nextAmounts, &nextPaid, &nextExpires,
			&trxAt, &trxVersion, &beginVersion, &finishAt, &finishVersion); err != nil {
			return version, nil, err
		}
		for i := range lotAmounts {
			p.Expired = append(p.Expired, coffer.BookLot{Currency: p.Currency, Amount: lotAmounts[i], Paid: lotPaid[i], ExpiresAt: lotExpires[i]})
		}
		for i := range nextAmounts {
			p.Next = append(p.Next, coffer.PastOp{Amount: nextAmounts[i], Paid: nextPaid[i], LotExpiresAt: nextExpires[i]})
		}
		// Each row repeats the player's trx and finish.
		if trxAt != nil && version.Trx == nil {
			version.Trx = &coffer.PastTrx{CreatedAt: *trxAt, Version: *trxVersion, BeginVersion: beginVersion}
		}
		if finishAt != nil && version.Finish == nil {
			version.Finish = &coffer.PastFinish{At: *finishAt, Version: *finishVersion}
		}
		past = append(past, p)
	}
	return version, past, rows.Err()
}

// Trx reads one trx by its scope.
func (s *Store) Trx(ctx context.Context, sc coffer.Scope) (coffer.Trx, error) {
	if err := sc.Validate(); err != nil {
		return coffer.Trx{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	id := s.router.Map().ShardOf(sc.PlayerID)
	pool, err := s.pool(ctx, id)
	if err != nil {
		return coffer.Trx{}, err
	}
	st, err := s.scanTrx(pool.QueryRow(ctx, s.q(id).trxByKey, sc.Namespace, sc.PlayerID, sc.Emitter, sc.IdempotencyKey))
	if errors.Is(err, pgx.ErrNoRows) {
		return coffer.Trx{}, coffer.Errorf(coffer.CodeNotFound, "no trx with idempotency_key %q", sc.IdempotencyKey)
	}
	if err != nil {
		return coffer.Trx{}, s.fail(id, err)
	}
	return st.Trx, nil
}

// optText is s, or nil (SQL NULL: no filter) for "".
func optText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Finlog reads a page of a player's trx, with their ops, in one statement.
// With a filter (FinlogQuery.Filtered), the page looks at FinlogScanMax trx
// at most (finlogSQL): it may then hold fewer than q.Limit, even none,
// and still have a cursor.
func (s *Store) Finlog(ctx context.Context, q coffer.FinlogQuery) (coffer.FinlogPage, error) {
	if err := q.Validate(); err != nil {
		return coffer.FinlogPage{}, err
	}
	if q.Limit == 0 {
		q.Limit = 100
	}
	reason, kind, status, key := optText(q.Reason), optText(string(q.Kind)), optText(string(q.Status)), optText(q.IdempotencyKey)
	only, err := s.catalog.Named(q.Currency)
	if err != nil {
		return coffer.FinlogPage{}, err
	}
	var currency *int32
	if only != nil {
		c := int32(only.ID)
		currency = &c
	}
	startAt, startPos, endAt, err := finlogRange(q)
	if err != nil {
		return coffer.FinlogPage{}, err
	}
	scan := q.Limit + 1
	if q.Filtered() {
		scan = max(scan, s.opts.FinlogScanMax)
	}
	shardID := s.router.Map().ShardOf(q.PlayerID)
	pool, err := s.pool(ctx, shardID)
	if err != nil {
		return coffer.FinlogPage{}, err
	}
	sql := s.q(shardID).finlogAsc
	if q.Desc {
		sql = s.q(shardID).finlogDesc
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	rows, err := pool.Query(ctx, sql, q.Namespace, q.PlayerID, startAt, startPos, endAt, reason, currency, q.Limit+1, scan,
		kind, status, key)
	if err != nil {
		return coffer.FinlogPage{}, s.fail(shardID, err)
	}
	defer rows.Close()
	page := coffer.FinlogPage{Items: []coffer.Trx{}}
	var lastPos int64
	for rows.Next() {
		var hit, edge bool
		st, err := s.scanTrx(rows, &hit, &edge)
		if err != nil {
			return coffer.FinlogPage{}, s.fail(shardID, err)
		}
		switch {
		case !hit: // looked at, not listed
		case len(page.Items) < q.Limit:
			page.Items, lastPos = append(page.Items, st.Trx), st.pos
		default:
			last := page.Items[q.Limit-1]
			page.NextCursor = encodeCursor(q.Namespace, q.PlayerID, last.CreatedAt, lastPos)
		}
		// The scan ended at its bound: a page not full ends where it did.
		if edge && page.NextCursor == "" {
			page.NextCursor = encodeCursor(q.Namespace, q.PlayerID, st.CreatedAt, st.pos)
		}
	}
	if err := rows.Err(); err != nil {
		return coffer.FinlogPage{}, s.fail(shardID, err)
	}
	return page, nil
}

// finlogRange is where a finlog page's scan starts, past (startAt,
// startPos) in the page's order, and the time it ends at: From and To,
// and the cursor, whichever starts later in that order. Without a
// cursor, the start is past (From, MinInt64) ascending, which is "at or
// after From", or (To, MinInt64) descending, "before To".
func finlogRange(q coffer.FinlogQuery) (startAt time.Time, startPos int64, endAt time.Time, err error) {
	from, to := time.Unix(0, 0).UTC(), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if q.From != nil {
		from = *q.From
	}
	if q.To != nil {
		to = *q.To
	}
	startAt, startPos, endAt = from, math.MinInt64, to
	if q.Desc {
		startAt, endAt = to, from
	}
	if q.Cursor == "" {
		return startAt, startPos, endAt, nil
	}
	at, pos, err := decodeCursor(q.Cursor, q.Namespace, q.PlayerID)
	if err != nil {
		return time.Time{}, 0, time.Time{}, err
	}
	if q.Desc && at.Before(startAt) || !q.Desc && !at.Before(startAt) {
		startAt, startPos = at, pos
	}
	return startAt, startPos, endAt, nil
}

// A cursor is the (created_at, pos) where a page ended (its last trx, or
// the last its scan looked at: finlogSQL), with the namespace and player
// whose finlog it pages: "ns:player:micros:pos". A cursor of another
// player's finlog would read as some position in this one and skip its
// trx before it, silently; it is refused, as are the cursors of earlier
// versions ("micros:pos", and before that "micros.trx_id", which paged
// by trx id), rather than misread.
func encodeCursor(ns coffer.Namespace, player coffer.PlayerID, t time.Time, pos int64) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d:%d:%d:%d", ns, player, t.UnixMicro(), pos))
}

// decodeCursor reads a cursor of the finlog of ns and player: only one
// that encodeCursor wrote for it (one spelling, and a time in the years
// 0001–9999, which the driver encodes exactly: far beyond, it wraps one
// around, and a made-up cursor would answer an empty page, as if the
// finlog ended). Errors are invalid_argument.
func decodeCursor(c string, ns coffer.Namespace, player coffer.PlayerID) (time.Time, int64, error) {
	bad := coffer.Errorf(coffer.CodeInvalid, "cursor: not a cursor from a previous page of this player's finlog")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, 0, bad
	}
	var n, p, micros, pos int64
	if _, err := fmt.Sscanf(string(raw), "%d:%d:%d:%d", &n, &p, &micros, &pos); err != nil {
		return time.Time{}, 0, bad
	}
	t := time.UnixMicro(micros).UTC()
	if n != int64(ns) || p != int64(player) || coffer.CheckTime("cursor", t) != nil || encodeCursor(ns, player, t, pos) != c {
		return time.Time{}, 0, bad
	}
	return t, pos, nil
}

// Revenue sums paid ops of the namespace over every shard, one statement
// per shard, each an index-only scan of the shard's paid ops of the
// namespace (op_N_revenue) and the holds and refunds of the period
// (revenueSQL); coffer.RevenueReport makes the lines of the sums. At most opts.ReportsMax run at once; one more is overloaded.
func (s *Store) Revenue(ctx context.Context, q coffer.RevenueQuery) ([]coffer.RevenueLine, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := s.reports.Enter(); err != nil {
		return nil, err
	}
	defer s.reports.Leave()
	report, err := s.catalog.NewRevenueReport(q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*s.opts.Timeout)
	defer cancel()
	for sh := 0; sh < s.router.Map().ShardCount(); sh++ {
		id := coffer.ShardID(sh)
		pool, err := s.pool(ctx, id)
		if err != nil {
			return nil, err
		}
		rows, err := pool.Query(ctx, s.q(id).revenue, q.Namespace, q.From, q.To)
		if err != nil {
			return nil, s.fail(id, err)
		}
		for rows.Next() {
			var sum coffer.RevenueSum
			if err := rows.Scan(&sum.Currency, &sum.Fiat, &sum.Reserved, &sum.Shortfall, &sum.Kind, &sum.Cause, &sum.Within, &sum.AtFrom, &sum.AtTo,
				&sum.Amount, &sum.Value); err != nil {
				rows.Close()
				return nil, s.fail(id, err)
			}
			if err := report.AddSum(sum); err != nil {
				rows.Close()
				return nil, err
			}
		}
		if err := rows.Err(); err != nil {
			return nil, s.fail(id, fmt.Errorf("revenue: %w", err))
		}
	}
	return report.Lines(), nil
}

// readRequest is one read of current balances waiting for its batch; the
// batch sets the player's version, its lots with coins and the time of
// its snapshot, or err.
type readRequest struct {
	ctx     context.Context
	shard   coffer.ShardID
	ns      coffer.Namespace
	player  coffer.PlayerID
	version int64
	lots    []coffer.BookLot
	at      time.Time
	err     error
}

func failReads(reqs []*readRequest, err error) {
	for _, r := range reqs {
		r.err = err
	}
}

// runReads answers the balance reads of one database in one round trip:
// a statement per shard they touch (batchSQL.balances), each read getting
// its player's version and lots with coins from one snapshot, with the
// snapshot's time: coffer.Catalog.CurrentBalances answers from them.
func (s *Store) runReads(ctx context.Context, db int, reqs []*readRequest) {
	byShard := perShard{}
	for i, r := range reqs {
		r.lots = nil // what a batch that met a fence read
		byShard.add(r.shard, int32(r.ns), int64(r.player), int32(i+1))
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, id := range byShard.shards() {
		s.queue(b, s.q(id).batch.balances, byShard[id]).Query(func(rows pgx.Rows) error { return scanBalances(rows, reqs) })
	}
	err := s.batchPools[db].SendBatch(ctx, b).Close()
	if err == nil {
		return
	}
	if fenced(err) {
		stay := leftBehind(s, db, "reads", reqs, func(r *readRequest) coffer.ShardID { return r.shard },
			func(r *readRequest) { r.err = errMoved })
		if len(stay) < len(reqs) {
			if len(stay) > 0 {
				s.runReads(ctx, db, stay)
			}
			return
		}
	}
	s.failed(db, err)
	for _, r := range reqs {
		r.err, _ = classify(r.shard, err)
	}
}

func scanBalances(rows pgx.Rows, reqs []*readRequest) error {
	defer rows.Close()
	for rows.Next() {
		var i, version int64
		var at time.Time
		var lotID *int64
		var cur *coffer.CurrencyID
		var paid *bool
		var amount *coffer.Amount
		var prio *int32
		var created *time.Time
		var l coffer.BookLot
		if err := rows.Scan(&i, &version, &at, &lotID, &cur, &paid, &amount, &l.ExpiresAt, &prio, &created); err != nil {
			return err
		}
		if i < 1 || int(i) > len(reqs) {
			return fmt.Errorf("balances: read %d of %d", i, len(reqs))
		}
		r := reqs[i-1]
		r.version, r.at = version, at
		if lotID != nil {
			l.ID, l.Currency, l.Paid, l.Amount, l.Priority, l.CreatedAt = *lotID, *cur, *paid, *amount, *prio, *created
			r.lots = append(r.lots, l)
		}
	}
	return rows.Err()
}
