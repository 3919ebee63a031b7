package feed_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/feed"
)

// hook is a webhook receiver that keeps what it is sent, each body
// checked against its signature.
type hook struct {
	t      *testing.T
	secret []byte
	fail   bool

	mu     sync.Mutex
	events []feed.Event
	posts  int
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts++
	if h.fail {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	if err := feed.Verify(h.secret, body, r.Header.Get(feed.SignatureHeader), 5*time.Minute, time.Now()); err != nil {
		h.t.Errorf("a webhook's signature: %v", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var b feed.WebhookBody
	if err := json.Unmarshal(body, &b); err != nil {
		h.t.Errorf("a webhook's body: %v", err)
	}
	h.events = append(h.events, b.Events...)
}

// tried is how many POSTs the hook was sent.
func (h *hook) tried() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.posts
}

func (h *hook) got() []feed.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]feed.Event(nil), h.events...)
}

func (h *hook) receiver(name string, kinds ...feed.Kind) *feed.Receiver {
	s := httptest.NewServer(h)
	h.t.Cleanup(s.Close)
	return &feed.Receiver{Name: name, URL: s.URL, Secret: h.secret, Kinds: kinds, BatchMax: 4, BacklogMax: 3,
		Timeout: 5 * time.Second, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond}
}

// TestWebhooks: each receiver gets the events it filters for, signed, in
// order, at least once; one that keeps failing is dropped past its
// backlog bound and holds back neither the others nor the slot.
func TestWebhooks(t *testing.T) {
	e := newEnv(t)
	all, holds, down := &hook{t: t, secret: []byte("s1")}, &hook{t: t, secret: []byte("s2")}, &hook{t: t, fail: true}
	hooks := &feed.Webhooks{Client: http.DefaultClient, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: e.obs}
	rAll, rHolds := all.receiver("all"), holds.receiver("holds", feed.KindHoldBegin)
	rAll.BacklogMax, rHolds.BacklogMax = 1000, 1000
	hooks.Receivers = []*feed.Receiver{rAll, rHolds, down.receiver("down")}
	e.startRelayOf(e.relay(hooks))
	// The failing receiver is tried before the writes pass its backlog
	// bound: a burst of them may pass it before its first POST.
	e.change(100, "first", free("gold", 1))
	for deadline := time.Now().Add(60 * time.Second); down.tried() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the failing receiver was never tried")
		}
	}
	const players, writes = 4, 10
	e.writeAll(players, writes)()
	hold, _, err := e.store.Change(ctx, coffer.ChangeRequest{Scope: scope(1, "h"), Ops: []coffer.OpRequest{free("gold", -1)}, Hold: true})
	must(t, err)
	want := int(e.committedTrx())
	for deadline := time.Now().Add(60 * time.Second); len(all.got()) < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	evs := all.got()
	if len(evs) != want {
		t.Fatalf("receiver all got %d events, want %d", len(evs), want)
	}
	checkOrder(t, evs)
	if h := holds.got(); len(h) != 1 || h[0].Trx.ID != hold.ID || h[0].Kind != feed.KindHoldBegin {
		t.Fatalf("receiver holds got %v", h)
	}
	// The slot does not wait for the receiver dropped.
	e.waitConfirmedPastNow()
}

// TestSignature: a signature verifies with its secret and body only, and
// not long after it was made.
func TestSignature(t *testing.T) {
	secret, body, now := []byte("secret"), []byte(`{"events":[]}`), time.Unix(1_700_000_000, 0)
	sig := feed.Sign(secret, body, now)
	if err := feed.Verify(secret, body, sig, time.Minute, now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"another secret": feed.Verify([]byte("other"), body, sig, time.Minute, now),
		"another body":   feed.Verify(secret, []byte(`{"events":[{}]}`), sig, time.Minute, now),
		"too late":       feed.Verify(secret, body, sig, time.Minute, now.Add(2*time.Minute)),
		"no header":      feed.Verify(secret, body, "", time.Minute, now),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}
