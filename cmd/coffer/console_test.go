package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/cofferhq/coffer"
	cofferv1 "github.com/cofferhq/coffer/api/coffer/v1"
	"github.com/cofferhq/coffer/wallet"
	"google.golang.org/grpc/codes"
)

// The support console's test clients: the dev stack's support client
// (support and support_write, devSupportKey) and a viewer with support
// only. readerKey (read only) is the key without the console's
// permission.
const viewerKey = "test-viewer-key"

// browser is a headless Chromium (Debian's chromium, which make test
// installs) with a fresh profile, its window 1280×800, closed at the
// test's end. Every step of the test runs within its bound.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is needed to test the console; make test installs it (scripts/apt-install.sh chromium)")
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true)}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Closed, not killed: a killed browser's helper processes may
		// still write into the profile while t.TempDir removes it.
		closing, cancelClosing := context.WithTimeout(bctx, time.Minute)
		defer cancelClosing()
		if err := chromedp.Cancel(closing); err != nil {
			t.Errorf("closing chromium: %v", err)
		}
		cancelBrowser()
		cancelAlloc()
	})
	// The browser lives as long as the context its first run is given
	// (its process is bound to it): bctx, so that the steps' bound below
	// ends the steps, not the browser, which the cleanup closes.
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	tctx, cancelTime := context.WithTimeout(bctx, 4*time.Minute)
	t.Cleanup(cancelTime)
	return tctx
}

// screenshot writes the window as NAME.png into $COFFER_SCREENSHOTS
// (docs/console holds the ones docs/console.md shows), or the test's
// temporary directory.
func screenshot(t *testing.T, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		dir := os.Getenv("COFFER_SCREENSHOTS")
		if dir == "" {
			dir = t.TempDir()
		}
		var png []byte
		if err := chromedp.CaptureScreenshot(&png).Do(ctx); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	})
}

// steps runs the browser steps, failing the test at the first that fails.
func steps(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitText waits until the element sel contains want.
func waitText(sel, want string) chromedp.Action {
	return chromedp.Poll(fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want), nil,
		chromedp.WithPollingTimeout(time.Minute))
}

// apiCallsJS lists the API calls the page made since it was opened, as
// the browser's resource timing entries.
const apiCallsJS = `performance.getEntriesByType("resource").filter(e => new URL(e.name).pathname.startsWith("/v1/"))`

// errorOf is the selector of the error shown beside field name of form.
func errorOf(form, name string) string {
	return fmt.Sprintf(`%s .field:has([name=%s]) .error`, form, name)
}

// TestConsole drives the support console in a real browser against a
// running coffer: sign-in (a wrong key, a key without the permission),
// finding a player by id and by store order, the balances and finlog as
// the API reads them, a correction through each form with its preview,
// a double submit applied once, bad input answered beside its field with
// nothing written, a viewer refused a write, the revenue and health
// pages, keyboard use and a tablet-width window. The cleanup audits the
// ledger.
func TestConsole(t *testing.T) {
	s := startService(t, twoServers(t), func(cfg *Config) {
		cfg.Listen.Console = "127.0.0.1:0"
		cfg.Clients = append(cfg.Clients, ClientConfig{Name: "viewer", Emitter: 7, KeySHA256: []string{keyHash(viewerKey)},
			Namespaces: []int32{1}, Permissions: []string{"support"}})
	})
	const player = coffer.PlayerID(4242)
	purchase := &coffer.Purchase{Store: "steam", OrderID: "order-77", Price: 499, Fiat: "USD"}
	_, _, err := s.dev.Change(ctx, 1, player, wallet.Change{IdempotencyKey: "buy-77", Reason: "purchase",
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: 500, Kind: "paid", Purchase: purchase}, {Currency: "silver", Amount: 40}}})
	must(t, err)
	_, _, err = s.dev.Change(ctx, 1, player, wallet.Change{IdempotencyKey: "match-9", Hold: true, Reason: "match entry",
		Ops: []coffer.OpRequest{{Currency: "gold", Amount: -50}}})
	must(t, err)
	base := "http://" + s.main.ConsoleAddr
	b := browser(t)

	// A deep link asks for a key first, then opens; wrong keys are told
	// plainly, beside the field.
	signIn := func(key string) chromedp.Action {
		return chromedp.Tasks{chromedp.WaitVisible(`form [name=key]`), chromedp.SetValue(`form [name=key]`, key), chromedp.Click(`form button[type=submit]`)}
	}
	steps(t, b, "a wrong key", chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), signIn("no-such-key"),
		waitText(errorOf("form", "key"), "coffer knows no client with this key"), screenshot(t, "signin"))
	var navShown bool
	steps(t, b, "a key without support", signIn(readerKey), waitText(errorOf("form", "key"), "lacks the support permission"),
		chromedp.Evaluate(`document.getElementById("nav").getClientRects().length > 0`, &navShown))
	if navShown {
		t.Error("the pages' links are shown before sign-in")
	}
	steps(t, b, "the support key", signIn(devSupportKey(devKey)), waitText("h1", fmt.Sprintf("Player %d in namespace 1", player)))

	// The player page: balances, reserved, pending hold and finlog, as
	// the API reads them.
	bal, err := s.dev.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: player})
	must(t, err)
	var rows [][]string
	steps(t, b, "the balances", chromedp.Evaluate(`[...document.querySelectorAll("#balances > .scroll tbody tr")].map(r => [...r.cells].map(c => c.textContent))`, &rows))
	var want [][]string
	for _, x := range bal.Balances {
		reserved := "0"
		if x.Currency == "gold" {
			reserved = "50"
		}
		want = append(want, []string{x.Currency, fmt.Sprint(x.Total), fmt.Sprint(x.Paid), fmt.Sprint(x.Free), reserved})
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("balances on the page %v, the API's %v", rows, want)
	}
	// The player page makes three API calls at most: opened afresh, the
	// calls the browser made for it.
	var calls []string
	steps(t, b, "the player page's calls", chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), waitText("#finlog", "buy-77"),
		chromedp.Evaluate(apiCallsJS+`.map(e => e.name)`, &calls))
	if len(calls) == 0 || len(calls) > 3 {
		t.Fatalf("the player page made %d API calls, want 1–3: %q", len(calls), calls)
	}
	var finlog []string
	steps(t, b, "the finlog", chromedp.Evaluate(`[...document.querySelectorAll("#finlog details.trx summary")].map(s => s.textContent)`, &finlog),
		waitText("#holds", "match-9"), screenshot(t, "player"))
	if len(finlog) != 2 || !strings.Contains(finlog[0], "match-9") || !strings.Contains(finlog[1], "buy-77") || !strings.Contains(finlog[1], "dev") {
		t.Fatalf("finlog on the page: %q", finlog)
	}

	// Find by store order, from the keyboard.
	steps(t, b, "find by order", chromedp.Click(`a[href="/console/"][data-nav]:not(.brand)`), chromedp.WaitVisible(`#find-order`),
		chromedp.SendKeys(`#find-order [name=store]`, "steam"), chromedp.SendKeys(`#find-order [name=order_id]`, "order-77"+kb.Enter),
		waitText("h1", fmt.Sprintf("Player %d", player)), waitText("#status", "order-77 was presented"), waitText("#finlog", "buy-77"))
	steps(t, b, "an order never presented", chromedp.Click(`a[href="/console/"][data-nav]:not(.brand)`), chromedp.WaitVisible(`#find-order`),
		chromedp.SendKeys(`#find-order [name=store]`, "steam"), chromedp.SendKeys(`#find-order [name=order_id]`, "nope"+kb.Enter),
		waitText(errorOf("#find-order", "order_id"), "never presented"), screenshot(t, "find"))
	steps(t, b, "find by id", chromedp.SendKeys(`#find-player [name=player_id]`, fmt.Sprint(player)+kb.Enter), waitText("h1", fmt.Sprintf("Player %d", player)))

	versionOf := func() int64 {
		bal, err := s.dev.Balances(ctx, coffer.BalanceQuery{Namespace: 1, PlayerID: player})
		must(t, err)
		return bal.Version
	}
	version := versionOf()

	// Bad input: the API's error beside the field, nothing written.
	fill := func(form string, values map[string]string) chromedp.Action {
		var ts chromedp.Tasks
		for name, v := range values {
			ts = append(ts, chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
				e.dispatchEvent(new Event("input", {bubbles: true})); })()`, form+" [name="+name+"]", v), nil))
		}
		return ts
	}
	review, apply := func(form string) chromedp.Action { return chromedp.Click(form + ` > button[type=submit]`) },
		func(form string) chromedp.Action { return chromedp.Click(form + ` button.apply`) }
	steps(t, b, "an amount of 0", fill("#adjust", map[string]string{"currency": "gold", "amount": "0", "reason": "ticket 7"}), review("#adjust"), apply("#adjust"),
		waitText(errorOf("#adjust", "amount"), "ops[0].amount: must be non-zero"))
	steps(t, b, "no reason", fill("#adjust", map[string]string{"amount": "-30", "reason": ""}), review("#adjust"), apply("#adjust"),
		waitText(errorOf("#adjust", "reason"), "reason: required for a support write"))
	steps(t, b, "a consume past the balance", fill("#adjust", map[string]string{"amount": "-100000", "reason": "ticket 7"}), review("#adjust"),
		waitText("#adjust .preview", "would go below zero"), apply("#adjust"), waitText(errorOf("#adjust", "amount"), "insufficient_funds"))
	steps(t, b, "an unknown order", fill("#refund", map[string]string{"store": "Steam", "order_id": "order-77", "reason": "x"}), review("#refund"), apply("#refund"),
		waitText(errorOf("#refund", "store"), "store: must be"))
	if v := versionOf(); v != version {
		t.Fatalf("bad input wrote: version %d, was %d", v, version)
	}

	// A consume through the form: the preview, then a double submit and
	// a retry of the same form, applied once.
	steps(t, b, "review a consume", fill("#adjust", map[string]string{"amount": "-30", "reason": "ticket 7: duplicate reward"}), review("#adjust"),
		waitText("#adjust .preview", "Preview"), waitText("#adjust .preview", "420"), screenshot(t, "correction"))
	steps(t, b, "apply it twice at once", chromedp.Evaluate(`(() => { const b = document.querySelector("#adjust button.apply"); b.click(); b.click(); })()`, nil),
		waitText("#adjust .confirm", "Applied: trx"))
	steps(t, b, "and again, as a retry", chromedp.Evaluate(`(() => { const f = document.querySelector("#adjust");
		f.querySelector(".confirm").replaceChildren(Object.assign(document.createElement("button"), {type: "submit", className: "apply", textContent: "Apply"})); })()`, nil),
		apply("#adjust"), waitText("#adjust .confirm", "Already applied (a replay)"))
	page, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: player, Reason: "ticket 7: duplicate reward"})
	must(t, err)
	if len(page.Items) != 1 || page.Items[0].Ops[0].Amount != -30 || page.Items[0].Emitter != 9 || string(page.Items[0].Meta) != `{"console":true,"support":{"client":"dev-support"}}` {
		t.Fatalf("the console's consume in the finlog: %+v", page.Items)
	}

	// A chargeback of the order, and the game's hold rolled back, through
	// their forms.
	steps(t, b, "a chargeback", chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), chromedp.WaitVisible(`#refund`),
		fill("#refund", map[string]string{"store": "steam", "order_id": "order-77", "kind": "chargeback", "reason": "bank dispute 55"}),
		review("#refund"), apply("#refund"), waitText("#refund .confirm", "Applied: trx"))
	steps(t, b, "roll the hold back", chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), chromedp.WaitVisible(`#holds form`),
		fill("#holds form", map[string]string{"finish": "rollback"}), review("#holds form"), waitText("#holds .preview", "Preview"),
		apply("#holds form"), waitText("#holds .confirm", "Applied: trx"))
	refunds, err := s.dev.Finlog(ctx, coffer.FinlogQuery{Namespace: 1, PlayerID: player, Kind: coffer.TrxRefund})
	must(t, err)
	hold, err := s.dev.Trx(ctx, 1, player, "match-9")
	must(t, err)
	if len(refunds.Items) != 1 || refunds.Items[0].Refund.Kind != "chargeback" || refunds.Items[0].Emitter != 9 ||
		hold.Status != coffer.StatusRolledBack || hold.FinishedBy != 9 {
		t.Fatalf("refunds %+v; hold %s by %d", refunds.Items, hold.Status, hold.FinishedBy)
	}
	// Each correction shows as the agent's, from the console: the consume
	// and the chargeback it wrote, and the game's hold it rolled back.
	var who map[string]string
	steps(t, b, "the finlog names the agent", chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), waitText("#finlog", "bank dispute 55"),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll("#finlog details.trx summary")].map(s => [s.children[3].textContent, s.querySelector(".who").textContent]))`, &who))
	const agent = "console: dev-support"
	if who["match-9"] != "devfinished by "+agent || who[refunds.Items[0].IdempotencyKey] != agent || who[page.Items[0].IdempotencyKey] != agent {
		t.Fatalf("who wrote and finished the trx, on the page: %q", who)
	}
	steps(t, b, "the finlog's picture", chromedp.ScrollIntoView(`#finlog`), screenshot(t, "finlog"))

	// The revenue report and the status.
	steps(t, b, "revenue", chromedp.Click(`nav a[href="/console/revenue"]`), waitText("#revenue", "gold"), chromedp.WaitVisible(`#csv`),
		chromedp.WaitVisible(`#revenue svg`), screenshot(t, "revenue"))
	steps(t, b, "health", chromedp.Click(`nav a[href="/console/health"]`), waitText("#shards", "8 of 8 shards available"), screenshot(t, "health"))

	// A tablet-width window: nothing wider than the window.
	var overflow bool
	steps(t, b, "tablet width", chromedp.EmulateViewport(768, 1024), chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)),
		waitText("h1", "Player"), chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth`, &overflow), screenshot(t, "player-tablet"))
	if overflow {
		t.Error("the player page is wider than a tablet's window")
	}

	// A viewer (support only) sees no form to put things right, and the
	// API refuses it the write it may try by hand.
	var status string
	steps(t, b, "a viewer", chromedp.Click(`#signout`), signIn(viewerKey), waitText("h1", "Find a player"),
		chromedp.Navigate(base+fmt.Sprintf("/console/ns/1/players/%d", player)), waitText("h1", "Player"),
		chromedp.Evaluate(`document.querySelector("#adjust") === null ? "no form" : "a form"`, &status))
	if status != "no form" {
		t.Fatalf("a viewer sees %s to put things right", status)
	}
	steps(t, b, "a viewer's write by hand", chromedp.Evaluate(fmt.Sprintf(`fetch("/v1/namespaces/1/players/%d/transactions", {method: "POST",
		headers: {Authorization: "Bearer " + sessionStorage.getItem("coffer.key"), "Content-Type": "application/json"},
		body: JSON.stringify({idempotency_key: "x", ops: [{currency: "gold", amount: 1}], reason: "x"})}).then(r => r.json()).then(p => p.code)`, player),
		&status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if status != "permission_denied" {
		t.Fatalf("a viewer's write: %s", status)
	}
}

// TestGRPCSupportCalls: the support calls over gRPC, as the console makes
// them over HTTP: who am I, an order's claim, the finlog's filters, a
// game's hold rolled back by an agent, a support write's reason and
// stamp, another client's trx refused to a game, and a negative emitter
// refused to anyone.
func TestGRPCSupportCalls(t *testing.T) {
	s := startService(t, twoServers(t), nil)
	w, dev, agent := s.grpc, grpcCtx(devKey), grpcCtx(devSupportKey(devKey))
	const p = 77
	_, err := w.Change(dev, &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "buy", Ops: []*cofferv1.OpRequest{{Currency: "gold",
		Amount: 100, Kind: "paid", Purchase: &cofferv1.Purchase{Store: "apple", OrderId: "r-1", Price: 99, Fiat: "EUR"}}}})
	must(t, err)
	_, err = w.Change(dev, &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h", Hold: true, Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: -10}}})
	must(t, err)

	me, err := w.GetClient(agent, &cofferv1.ClientRequest{})
	must(t, err)
	if me.Name != "dev-support" || me.Emitter != 9 || len(me.Clients) != 6 || me.Clients[0].Name != "dev" || !me.Clients[1].Support || me.Clients[2].Support {
		t.Fatalf("GetClient: %v", me)
	}
	if game, err := w.GetClient(dev, &cofferv1.ClientRequest{}); err != nil || game.Clients != nil {
		t.Fatalf("a game's GetClient: %v %v", game, err)
	}
	o, err := w.GetOrder(agent, &cofferv1.OrderRequest{Namespace: 1, Store: "apple", OrderId: "r-1"})
	must(t, err)
	if o.PlayerId != p || o.Emitter != 1 || o.IdempotencyKey != "buy" {
		t.Fatalf("GetOrder: %v", o)
	}
	_, err = w.GetOrder(agent, &cofferv1.OrderRequest{Namespace: 1, Store: "apple", OrderId: "r-2"})
	wantGRPC(t, err, codes.NotFound, coffer.CodeNotFound)
	_, err = w.GetOrder(agent, &cofferv1.OrderRequest{Namespace: 1, Store: "Apple", OrderId: "r-1"})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)

	pending, err := w.Finlog(agent, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: p, Status: "pending"})
	must(t, err)
	byKey, err := w.Finlog(agent, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "buy", Kind: "change"})
	must(t, err)
	if len(pending.Items) != 1 || pending.Items[0].IdempotencyKey != "h" || pending.Items[0].Emitter != 1 || len(byKey.Items) != 1 {
		t.Fatalf("finlog pending %v, by key %v", pending.Items, byKey.Items)
	}
	_, err = w.Finlog(agent, &cofferv1.FinlogRequest{Namespace: 1, PlayerId: p, Status: "done"})
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)

	_, err = w.GetTrx(dev, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h", Emitter: 9})
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
	for _, ctx := range []context.Context{dev, agent} { // no client's: refused as HTTP refuses it
		_, err = w.GetTrx(ctx, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h", Emitter: -1})
		wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	}
	_, err = w.Rollback(agent, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h"})
	wantGRPC(t, err, codes.NotFound, coffer.CodeNotFound) // its own key: none
	back, err := w.Rollback(agent, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h", Emitter: 1})
	must(t, err)
	if back.Status != "rolled_back" || back.Emitter != 1 || back.FinishedBy != 9 {
		t.Fatalf("the agent's rollback: %v", back)
	}
	if read, err := w.GetTrx(dev, &cofferv1.TrxRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "h"}); err != nil || read.FinishedBy != 9 {
		t.Fatalf("the game reads its hold the agent rolled back: %v %v", read, err)
	}

	fix := &cofferv1.ChangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "fix", Ops: []*cofferv1.OpRequest{{Currency: "gold", Amount: 5}}}
	_, err = w.Change(agent, fix)
	wantGRPC(t, err, codes.InvalidArgument, coffer.CodeInvalid)
	fix.Reason = "ticket 3"
	trx, err := w.Change(agent, fix)
	must(t, err)
	if trx.Emitter != 9 || trx.Meta.Fields["support"].GetStructValue().Fields["client"].GetStringValue() != "dev-support" {
		t.Fatalf("a support write: %v", trx)
	}
	_, err = w.Exchange(agent, &cofferv1.ExchangeRequest{Namespace: 1, PlayerId: p, IdempotencyKey: "x", From: "gold", To: "silver", Amount: 1})
	wantGRPC(t, err, codes.PermissionDenied, coffer.CodePermissionDenied)
}
