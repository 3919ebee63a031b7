package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cofferhq/coffer/internal/pgserver"
	"github.com/cofferhq/coffer/shard"
	"github.com/cofferhq/coffer/torture"
	"github.com/jackc/pgx/v5"
)

// TestTortureShort is the short fault run of make test: every fault kind
// but shard-move (TestTortureShardMove), the failovers to a standby and
// back included, at least once under load, then every check must pass.
func TestTortureShort(t *testing.T) {
	kinds := slices.DeleteFunc(slices.Clone(torture.StandbyFaultKinds), func(k string) bool { return k == torture.ShardMove })
	report := passes(t, &tortureRun{duration: 75 * time.Second, seed: 1, clients: 6, standbys: true, kinds: kinds, finlogPage: 25})
	// The workload reached what it is there for: lots that expire, holds
	// that outlive their lots, collectors at the lot bound, store orders
	// presented twice, refunds and second refunds.
	for _, re := range []string{`; [1-9][0-9]* ended after a lot they took from expired`,
		`grants acknowledged with lots that expire: [1-9]`, `[1-9][0-9]* too_many_lots`,
		`[1-9][0-9]* refused purchase_already_credited`, `[1-9][0-9]* refunds acknowledged, [1-9][0-9]* refused already_refunded`} {
		if !regexp.MustCompile(re).MatchString(report) {
			t.Errorf("the report does not match %q", re)
		}
	}
}

// TestTortureShardMove is the short run of shard moves under load: two
// shards moved away from their databases, one meeting its source killed
// mid-copy, one its mover killed; then every check must pass, the audit
// among them on each shard's new home, and the shard map the databases
// and instances agree on.
func TestTortureShardMove(t *testing.T) {
	report := passes(t, &tortureRun{duration: 40 * time.Second, seed: 1, clients: 4,
		kinds: []string{torture.ShardMove, torture.PGKill, torture.CofferKill}, finlogPage: 25})
	for _, re := range []string{`shard moves: [2-9][0-9]* moved and cleaned up`, `met pg-kill on the (source|target) after [a-z]+\n`,
		`met mover-kill on the mover after [a-z]+\n`, `audited every shard where the databases place it: [1-9][0-9]* away from the database the config places them on`} {
		if !regexp.MustCompile(re).MatchString(report) {
			t.Errorf("the report does not match %q", re)
		}
	}
}

// TestTorturePatroni is the short Patroni run of make test: a leader's
// agent killed and a patronictl switchover under load, then every check
// must pass. Without Patroni it is skipped, and make test says so.
func TestTorturePatroni(t *testing.T) {
	if err := pgserver.PatroniBinaries(); err != nil {
		t.Skip(err)
	}
	report := passes(t, &tortureRun{duration: 25 * time.Second, seed: 1, clients: 4, patroni: true, feed: true,
		kinds: []string{torture.PatroniKill, torture.PGSwitchover}, finlogPage: 25})
	feedStoredAll(t, report)
}

// TestTortureFeed is the short fault run of the change feed: the relay
// and the broker killed under load, and a shard moved, its relays killed
// right after its new home opened (seed 2), then the stream must hold
// every committed trx change once, in each player's order, the moved
// players' too, with the ledger's balances. (TestTorturePatroni runs the
// feed across failovers.)
func TestTortureFeed(t *testing.T) {
	report := passes(t, &tortureRun{duration: 25 * time.Second, seed: 2, clients: 4, feed: true,
		kinds: []string{torture.FeedKill, torture.NATSKill, torture.ShardMove}, finlogPage: 25})
	feedStoredAll(t, report)
	if !regexp.MustCompile(`met feed-kill on the (source|target) after done\n`).MatchString(report) {
		t.Errorf("the report does not tell of the move that met feed-kill after its cut-over:\n%s", report)
	}
}

// feedStoredAll checks the report's feed line: events stored, as many as
// the ledger committed, none missing, twice or made up.
func feedStoredAll(t *testing.T, report string) {
	t.Helper()
	m := regexp.MustCompile(`feed: ([0-9]+) events stored, ([0-9]+) trx changes committed: 0 missing, 0 duplicates, 0 phantom`).FindStringSubmatch(report)
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("the report's feed line is not that of a complete feed:\n%s", report)
	}
}

// passes runs a torture run, which must pass with every kind of its
// faults injected, and returns its report.
func passes(t *testing.T, run *tortureRun) string {
	t.Helper()
	var out bytes.Buffer
	run.out = &out
	violations, err := run.run(context.Background())
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(violations) > 0 {
		t.Fatalf("%d violations:\n%s", len(violations), strings.Join(violations, "\n"))
	}
	for _, k := range run.kinds {
		if !strings.Contains(out.String(), "  "+k+" ") {
			t.Errorf("fault %s was not injected", k)
		}
	}
	return out.String()
}

// TestTortureCatchesDamage damages the ledger behind coffer's back before
// the checks, four ways, and leaves a move's replication slot behind;
// each must make the run fail, with the violation named when one check
// alone can see it.
func TestTortureCatchesDamage(t *testing.T) {
	for name, c := range map[string]struct{ sql, want string }{
		"corrupt a lot":     {sql: `UPDATE lot_%d SET amount = amount + 7 WHERE lot_id = (SELECT min(lot_id) FROM lot_%d)`},
		"delete an op":      {sql: `DELETE FROM op_%d WHERE (trx_id, seq) = (SELECT trx_id, seq FROM op_%d ORDER BY trx_id LIMIT 1)`},
		"duplicate a grant": {sql: `INSERT INTO op_%d SELECT trx_id, seq + 100, ns, player_id, currency, lot_id, kind, cause, amount, paid, balance_after, paid_after, created_at, purchase, pos FROM op_%d WHERE kind = 'grant' LIMIT 1`},
		// A trx without ops moves no currency: only the finlog count,
		// read over pages of 2, sees it.
		// It takes the player's next position, as a write would.
		"add a trx": {sql: `WITH b AS (UPDATE balance_%[1]d SET pos = pos + 1
				WHERE (ns, player_id) = (SELECT ns, player_id FROM trx_%[1]d WHERE emitter <> 0 LIMIT 1) RETURNING ns, player_id, pos)
			INSERT INTO trx_%[1]d (ns, player_id, created_at, trx_id, emitter, idempotency_key, request_hash, kind, status, reason, version, pos)
			SELECT t.ns, t.player_id, clock_timestamp(), t.trx_id + 1000000000, t.emitter, t.idempotency_key || '-copy', t.request_hash,
				t.kind, t.status, t.reason, t.version, b.pos
			FROM trx_%[1]d t JOIN b USING (ns, player_id) WHERE t.emitter <> 0 LIMIT 1`, want: "finlog has"},
		"leave a move's slot": {sql: `SELECT pg_create_logical_replication_slot('coffer_move_%d', 'pgoutput') /* %d */`,
			want: "left behind by a move: replication slot coffer_move_"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			run := &tortureRun{duration: 10 * time.Second, seed: 2, clients: 4, out: &out, finlogPage: 2,
				damage: func(ctx context.Context, m *shard.Map) error { return damageShard(ctx, m, c.sql) }}
			violations, err := run.run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(violations) == 0 || !strings.Contains(strings.Join(violations, "\n"), c.want) {
				t.Fatalf("the damage went unnoticed (want a violation with %q):\n%s\n%s", c.want, strings.Join(violations, "\n"), out.String())
			}
		})
	}
}

// damageShard runs sql (with the shard number twice) on the first shard of
// player 1, which the workload always writes to.
func damageShard(ctx context.Context, m *shard.Map, sql string) error {
	s := m.ShardOf(1)
	conn, err := pgx.Connect(ctx, m.DatabaseOf(s).Config.ConnString(5))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, fmt.Sprintf(sql, s, s))
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("damage touched %d rows", tag.RowsAffected())
	}
	return err
}

// An interrupted torture run says that it checked nothing (the checks'
// own errors would read like findings) and removes its servers.
func TestTortureInterrupted(t *testing.T) {
	tmp := t.TempDir()
	cmd, _, finish := startUntil(t, tmp, "faults planned", "torture", "--duration", "10m")
	time.Sleep(2 * time.Second) // into the workload
	must(t, cmd.Process.Signal(syscall.SIGINT))
	if code, out, errOut := finish(); code != 1 || strings.TrimSpace(errOut) != "coffer torture: interrupted; nothing was checked" {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	stackGone(t, tmp)
}
