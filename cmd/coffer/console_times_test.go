package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/wallet"
)

// readyJS runs in each page before its own script: it notes the time
// (ms since the navigation began) when the page first shows its content,
// the element each page builds last, once its API calls have answered.
const readyJS = `new MutationObserver((_, o) => {
  if (document.querySelector("#finlog, #revenue, #shards, #find-key, form [name=key]")) { window.cofferReady = performance.now(); o.disconnect(); }
}).observe(document, {subtree: true, childList: true});`

// pageTimesJS is what the browser measured of the page it shows: its
// navigation timing, when it was ready (readyJS), and its API calls.
const pageTimesJS = `(() => {
  const n = performance.getEntriesByType("navigation")[0];
  const calls = ` + apiCallsJS + `;
  return {response: n.responseEnd, dom: n.domContentLoadedEventEnd, load: n.loadEventEnd, ready: window.cofferReady,
    calls: calls.length, slowest: Math.max(0, ...calls.map(c => c.duration))};
})()`

// pageTimes are one load of a page, in ms from the navigation's start.
type pageTimes struct {
	Response, DOM, Load, Ready float64
	Calls                      int
	Slowest                    float64
}

// TestConsolePageTimes measures the console's pages on a running
// `coffer dev` seeded with many players. It is a measurement, not a
// check of the figures (they depend on the machine): it runs only when
// COFFER_CONSOLE_TIMES names the console, and prints per page the
// browser's figures over several loads (docs/console.md, "Cost"):
//
//	coffer dev --api-key KEY                       # elsewhere; KEY-support is its support key
//	COFFER_CONSOLE_TIMES=http://127.0.0.1:8083 COFFER_API_KEY=KEY \
//	  go test -count=1 -run TestConsolePageTimes -v ./cmd/coffer
//
// It first gives COFFER_CONSOLE_PLAYERS players (100 000 unless set) of
// namespace 1 a purchase each, and player 1 a history of 300 trx and a
// pending hold; a second run finds them and seeds only the hold.
func TestConsolePageTimes(t *testing.T) {
	base := os.Getenv("COFFER_CONSOLE_TIMES")
	if base == "" {
		t.Skip("a measurement: set COFFER_CONSOLE_TIMES to a coffer dev's console URL and COFFER_API_KEY to its key")
	}
	key := os.Getenv("COFFER_API_KEY")
	players := 100_000
	if v := os.Getenv("COFFER_CONSOLE_PLAYERS"); v != "" {
		var err error
		if players, err = strconv.Atoi(v); err != nil || players < 1 {
			t.Fatalf("COFFER_CONSOLE_PLAYERS=%q: want a number of players > 0", v)
		}
	}
	seedPlayers(t, wallet.New(base, key, &http.Client{Timeout: 5 * time.Minute}), players)

	b := browser(t)
	steps(t, b, "sign in", chromedp.Navigate(base+"/console/signin"), chromedp.WaitVisible(`form [name=key]`),
		chromedp.SetValue(`form [name=key]`, devSupportKey(key)), chromedp.Click(`form button[type=submit]`), waitText("h1", "Find a player"),
		chromedp.ActionFunc(func(ctx context.Context) error {
			_, err := page.AddScriptToEvaluateOnNewDocument(readyJS).Do(ctx)
			return err
		}))
	const loads = 7
	t.Logf("%d players; each page loaded %d times, median (slowest) in ms from the navigation's start", players, loads)
	t.Logf("%-24s %13s %13s %13s %13s %6s %13s", "page", "response", "DOM ready", "load", "usable", "calls", "slowest call")
	for _, p := range []struct{ name, path string }{
		{"sign in", "/console/signin"},
		{"find a player", "/console/"},
		{"player (300 trx)", "/console/ns/1/players/1"},
		{"player (1 trx)", fmt.Sprintf("/console/ns/1/players/%d", players)},
		{"revenue (this month)", "/console/revenue"},
		{"health", "/console/health"},
	} {
		var runs []pageTimes
		for range loads {
			var m pageTimes
			steps(t, b, p.name, chromedp.Navigate(base+p.path),
				chromedp.Poll(`window.cofferReady !== undefined`, nil, chromedp.WithPollingTimeout(time.Minute)),
				chromedp.Evaluate(pageTimesJS, &m))
			runs = append(runs, m)
		}
		fig := func(f func(pageTimes) float64) string {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return fmt.Sprintf("%5.0f (%5.0f)", v[len(v)/2], v[len(v)-1])
		}
		t.Logf("%-24s %13s %13s %13s %13s %6d %13s", p.name, fig(func(r pageTimes) float64 { return r.Response }),
			fig(func(r pageTimes) float64 { return r.DOM }), fig(func(r pageTimes) float64 { return r.Load }),
			fig(func(r pageTimes) float64 { return r.Ready }), runs[0].Calls, fig(func(r pageTimes) float64 { return r.Slowest }))
	}
}

// seedBatchSize is the players of one call that seeds them: a smaller
// batch than the API allows, for a busy machine's request timeout.
const seedBatchSize = 250

// seedPlayers gives players 1…n of namespace 1 a purchase each, in calls
// of the batch API (4 at a time, seedBatch), unless player n has its purchase
// already; and player 1 a history of 300 trx and a new pending hold.
func seedPlayers(t *testing.T, w *wallet.Conn, n int) {
	t.Helper()
	ctx := context.Background()
	last, err := w.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: coffer.PlayerID(n)})
	must(t, err)
	if last.Version == 0 {
		start := time.Now()
		firsts := make(chan int)
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				var failed error
				for first := range firsts {
					if failed == nil {
						failed = seedBatch(ctx, w, first, min(first+seedBatchSize-1, n))
					}
				}
				errs <- failed
			}()
		}
		for first := 1; first <= n; first += seedBatchSize {
			firsts <- first
		}
		close(firsts)
		for range 4 {
			must(t, <-errs)
		}
		history := make([]wallet.BatchChange, 300)
		for i := range history {
			history[i] = wallet.BatchChange{PlayerID: 1, IdempotencyKey: fmt.Sprint("history-", i), Reason: "match reward",
				Ops: []coffer.OpRequest{{Currency: "silver", Amount: coffer.Amount(1 + i%7)}}}
			if i%3 == 0 {
				history[i].Reason, history[i].Ops = "shop", []coffer.OpRequest{{Currency: "gold", Amount: -1}}
			}
		}
		_, err := w.BatchChange(ctx, 1, history)
		must(t, err)
		t.Logf("seeded %d players in %s", n, time.Since(start).Round(time.Second))
	}
	_, _, err = w.Change(ctx, 1, 1, wallet.Change{IdempotencyKey: fmt.Sprint("entry-", time.Now().UnixNano()), Hold: true, Reason: "match entry",
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: -5}}})
	must(t, err)
}

// seedBatch gives players first…last a purchase each, in one call, sent
// again (the same keys: what was applied replays) while coffer answers
// that it is busy, up to 10 times.
func seedBatch(ctx context.Context, w *wallet.Conn, first, last int) error {
	var changes []wallet.BatchChange
	for p := first; p <= last; p++ {
		changes = append(changes, wallet.BatchChange{PlayerID: coffer.PlayerID(p), IdempotencyKey: "seed", Reason: "purchase",
			Ops: []coffer.OpRequest{{Currency: "gold", Amount: 500, Kind: "paid",
				Purchase: &coffer.Purchase{Store: "seed", OrderID: strconv.Itoa(p), Price: 499, Fiat: "USD"}}, {Currency: "silver", Amount: 40}}})
	}
	var err error
	for range 10 {
		var results []coffer.ChangeResult
		if results, err = w.BatchChange(ctx, 1, changes); err == nil {
			for i, r := range results {
				if err == nil && r.Err != nil {
					err = fmt.Errorf("player %d: %w", first+i, r.Err)
				}
			}
		}
		if code := coffer.ErrorCode(err); code != coffer.CodeUnavailable && code != coffer.CodeOverloaded {
			return err
		}
		time.Sleep(time.Second)
	}
	return err
}
