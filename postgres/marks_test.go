package postgres_test

import (
	"strings"
	"testing"

	"github.com/cofferhq/coffer/postgres"
)

// TestSweepMarksRemovesGoneCommitters: batches leave their committer's
// mark; the sweeper removes the marks not set for a day (processes gone),
// at most limit per database, and keeps those of live committers.
func TestSweepMarksRemovesGoneCommitters(t *testing.T) {
	e := newEnv(t)
	e.mustChange(e.playersOn(0, 1, 1)[0], "live", free("gold", 1))
	marks := func() (all, stale int) {
		must(t, e.router.Database(0).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE marked_at < now() - interval '1 day') FROM batch_mark`).Scan(&all, &stale))
		return all, stale
	}
	if all, _ := marks(); all != 1 {
		t.Fatalf("%d marks after one batch, want its committer's", all)
	}
	_, err := e.router.Database(0).Exec(ctx, `INSERT INTO batch_mark (committer, token, marked_at)
		SELECT -g, 1, now() - interval '25 hours' FROM generate_series(1, 3) g`)
	must(t, err)
	n, err := e.store.SweepMarks(ctx, 2)
	must(t, err)
	if all, stale := marks(); n != 2 || all != 2 || stale != 1 {
		t.Fatalf("first pass removed %d: %d marks left, %d stale; want 2 removed, the live one and a stale one left", n, all, stale)
	}
	// A database down fails its part of the pass, not the others'.
	e.router.MarkDown(1)
	defer e.router.MarkUp(1)
	n, err = e.store.SweepMarks(ctx, 2)
	if err == nil || !strings.Contains(err.Error(), "database 1") {
		t.Fatalf("a pass with database 1 down: %v, want its error", err)
	}
	if all, stale := marks(); n != 1 || all != 1 || stale != 0 {
		t.Fatalf("second pass removed %d: %d marks left, %d stale; want the live one only", n, all, stale)
	}
}

// TestMarkSweptOnlyIfStillStale: a stale mark that its committer sets
// again while the sweeper waits to delete it is kept: the sweeper checks
// the row it deletes, not the row it listed.
func TestMarkSweptOnlyIfStillStale(t *testing.T) {
	e := newEnv(t)
	db := e.router.Database(0)
	_, err := db.Exec(ctx, `INSERT INTO batch_mark (committer, token, marked_at) VALUES (42, 7, now() - interval '25 hours')`)
	must(t, err)
	tx := begin(t, db)
	_, err = tx.Exec(ctx, postgres.SetMark, int64(42), int64(8))
	must(t, err)
	swept := make(chan int, 1)
	go func() {
		n, err := e.store.SweepMarks(ctx, 10)
		if err != nil {
			t.Error(err)
		}
		swept <- n
	}()
	e.waitForBackend(0, "%DELETE FROM batch_mark%")
	must(t, tx.Commit(ctx))
	n := <-swept
	var token int64
	if err := db.QueryRow(ctx, `SELECT token FROM batch_mark WHERE committer = 42`).Scan(&token); err != nil || n != 0 || token != 8 {
		t.Fatalf("a mark set while the sweeper waited: swept %d, token %d (%v); want kept with token 8", n, token, err)
	}
}

// TestMarkOnlyGrows: a committer's transaction that commits after a later
// one of its committer (given up on, its outcome unread) leaves the later
// token: a lower one does not replace it.
func TestMarkOnlyGrows(t *testing.T) {
	e := newEnv(t)
	db := e.router.Database(0)
	for _, token := range []int64{7, 5} {
		_, err := db.Exec(ctx, postgres.SetMark, int64(42), token)
		must(t, err)
	}
	var token int64
	must(t, db.QueryRow(ctx, `SELECT token FROM batch_mark WHERE committer = 42`).Scan(&token))
	if token != 7 {
		t.Fatalf("mark %d after tokens 7 then 5, want 7", token)
	}
}
