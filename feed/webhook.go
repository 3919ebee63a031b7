package feed

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/jackc/pglogrepl"
)

// SignatureHeader carries a webhook's signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>" under the receiver's secret>.
const SignatureHeader = "Coffer-Signature"

// Sign is the SignatureHeader value of body sent at t under secret.
func Sign(secret, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte("."))
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a webhook's SignatureHeader value against its body and
// secret, and that it was signed within tolerance of now (a replayed old
// delivery is refused). Errors say which check failed.
func Verify(secret, body []byte, header string, tolerance time.Duration, now time.Time) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("webhook: malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("webhook: signed too long ago (or in the future)")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(secret, ts, body)) {
		return errors.New("webhook: signature does not match")
	}
	return nil
}

// WebhookBody is the JSON a webhook POSTs: one event or more, each
// player's in order.
type WebhookBody struct {
	Events []Event `json:"events"`
}

// Receiver is one webhook URL and what it receives.
type Receiver struct {
	Name   string
	URL    string
	Secret []byte
	// Namespaces and Kinds filter the events; empty means all.
	Namespaces []coffer.Namespace
	Kinds      []Kind
	// BatchMax bounds the events of one POST.
	BatchMax int
	// BacklogMax bounds the events waiting for the receiver. A receiver
	// whose backlog passes it is dropped: it gets no more events until
	// the relay restarts, and the slot no longer waits for it.
	BacklogMax int
	// Timeout bounds one POST; RetryMin and RetryMax the pause between
	// attempts of a batch that failed, doubling from one to the other.
	Timeout            time.Duration
	RetryMin, RetryMax time.Duration
}

func (r *Receiver) wants(e *Event) bool {
	return (len(r.Namespaces) == 0 || slices.Contains(r.Namespaces, e.Namespace)) &&
		(len(r.Kinds) == 0 || slices.Contains(r.Kinds, e.Kind))
}

// ReceiverState is how a webhook receiver fares.
type ReceiverState int

// Receiver states.
const (
	ReceiverOK      ReceiverState = 0
	ReceiverFailing ReceiverState = 1
	ReceiverDropped ReceiverState = 2
)

// ReceiverObserver is told how webhook receivers fare, for metrics. An
// Observer of a Webhooks sink may implement it.
type ReceiverObserver interface {
	Receiver(database, name string, backlog int, state ReceiverState)
}

// Webhooks delivers a database's events to HTTP receivers, each with a
// queue and a goroutine of its own, so that one that fails holds back no
// other, nor the writes. A receiver gets each player's events in commit
// order, at least once: the slot confirms an event once every receiver
// not dropped has it. Use one Webhooks per relay.
type Webhooks struct {
	Receivers []*Receiver
	Client    *http.Client
	Logger    *slog.Logger
	Observer  Observer

	mu      sync.Mutex
	dropped map[string]bool
}

func (w *Webhooks) name() string { return "webhooks" }

func (w *Webhooks) open(_ context.Context, database string) (delivery, error) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &whDelivery{w: w, database: database, cancel: cancel}
	for _, r := range w.Receivers {
		q := &queue{r: r, w: w, database: database, wake: make(chan struct{}, 1)}
		d.queues = append(d.queues, q)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			q.run(ctx)
		}()
	}
	return d, nil
}

func (w *Webhooks) isDropped(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped[name]
}

func (w *Webhooks) drop(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped == nil {
		w.dropped = map[string]bool{}
	}
	w.dropped[name] = true
}

// whDelivery is one session's deliveries to the receivers.
type whDelivery struct {
	w        *Webhooks
	database string
	queues   []*queue
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	last     pglogrepl.LSN
}

func (d *whDelivery) send(_ context.Context, events []Event, end pglogrepl.LSN) error {
	d.last = end
	for _, q := range d.queues {
		q.add(events, end)
	}
	return nil
}

func (d *whDelivery) delivered() pglogrepl.LSN {
	done := d.last
	for _, q := range d.queues {
		if !d.w.isDropped(q.r.Name) {
			done = min(done, q.progress.delivered())
		}
	}
	return done
}

func (d *whDelivery) err() error { return nil }

func (d *whDelivery) close() {
	d.cancel()
	d.wg.Wait()
}

// queue is one receiver's events waiting, oldest first.
type queue struct {
	r        *Receiver
	w        *Webhooks
	database string
	progress progress
	wake     chan struct{}

	mu      sync.Mutex
	waiting []outgoing
}

// add queues the events the receiver wants, or drops the receiver if
// they pass its backlog bound.
func (q *queue) add(events []Event, end pglogrepl.LSN) {
	if q.w.isDropped(q.r.Name) {
		return
	}
	var mine []*Event
	for i := range events {
		if q.r.wants(&events[i]) {
			mine = append(mine, &events[i])
		}
	}
	t := q.progress.add(len(mine), end)
	q.mu.Lock()
	for _, e := range mine {
		q.waiting = append(q.waiting, outgoing{ev: e, txn: t})
	}
	backlog := len(q.waiting)
	if backlog > q.r.BacklogMax {
		q.waiting = nil
	}
	q.mu.Unlock()
	if backlog > q.r.BacklogMax {
		q.w.drop(q.r.Name)
		q.w.Logger.Error("feed: webhook receiver dropped: its backlog passed its bound; it misses events until the relay restarts",
			"receiver", q.r.Name, "database", q.database, "backlog_max", q.r.BacklogMax, "first_missed", mine[0].ID)
		q.observe(0, ReceiverDropped)
		return
	}
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) observe(backlog int, st ReceiverState) {
	if o, ok := q.w.Observer.(ReceiverObserver); ok {
		o.Receiver(q.database, q.r.Name, backlog, st)
	}
}

// run posts the queue's events, a batch at a time, until ctx ends; a
// batch that fails is posted again after a pause, before any later one.
func (q *queue) run(ctx context.Context) {
	pause := q.r.RetryMin
	for {
		q.mu.Lock()
		batch := q.waiting[:min(len(q.waiting), q.r.BatchMax)]
		backlog := len(q.waiting)
		q.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
				continue
			}
		}
		err := q.post(ctx, batch)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			q.w.Logger.Warn("feed: webhook delivery failed", "receiver", q.r.Name, "err", err, "retry_in", pause)
			q.observe(backlog, ReceiverFailing)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, q.r.RetryMax)
			continue
		}
		pause = q.r.RetryMin
		q.mu.Lock()
		if len(q.waiting) < len(batch) {
			q.waiting = nil // dropped meanwhile
		} else {
			q.waiting = q.waiting[len(batch):]
		}
		backlog = len(q.waiting)
		q.mu.Unlock()
		for _, o := range batch {
			q.progress.one(o.txn)
			if q.w.Observer != nil {
				q.w.Observer.Delivered(q.database, "webhook:"+q.r.Name, false, time.Since(o.ev.CommittedAt))
			}
		}
		q.observe(backlog, ReceiverOK)
	}
}

// post sends batch in one POST; any 2xx answer is a delivery.
func (q *queue) post(ctx context.Context, batch []outgoing) error {
	body := WebhookBody{Events: make([]Event, len(batch))}
	for i, o := range batch {
		body.Events[i] = *o.ev
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, q.r.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.r.URL, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(q.r.Secret, raw, time.Now()))
	resp, err := q.w.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", q.r.URL, resp.Status)
	}
	return nil
}
