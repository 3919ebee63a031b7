package wallet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
	"github.com/cofferhq/coffer/api"
)

// TestBadTextLooksAtWhatIsSent: a string that is not UTF-8 is found in an
// exported field, however deep; a field JSON does not send, and the
// inside of a value that encodes itself (a time and its location), are
// not read.
func TestBadTextLooksAtWhatIsSent(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	at := time.Now().In(paris)
	type unsent struct {
		Sent   string
		hidden string
	}
	for _, c := range []struct {
		name string
		body any
		bad  bool
	}{
		{"a bad key", api.ChangeBody{IdempotencyKey: "k\xff"}, true},
		{"a bad currency in an op", &api.ChangeBody{Ops: []coffer.OpRequest{{Currency: "g\xfe", Amount: 1}}}, true},
		{"an op with an expiry in a zone", &api.ChangeBody{IdempotencyKey: "k", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &at}}}, false},
		{"an unexported field", unsent{Sent: "ok", hidden: "\xff"}, false},
		{"a value that encodes itself", selfEncoded{Text: "\xff"}, false},
	} {
		if got := badText(reflect.ValueOf(c.body)); got != c.bad {
			t.Errorf("%s: badText = %v, want %v", c.name, got, c.bad)
		}
	}
}

// selfEncoded sends what its MarshalJSON says, not its fields.
type selfEncoded struct{ Text string }

func (selfEncoded) MarshalJSON() ([]byte, error) { return []byte(`"fixed"`), nil }

// TestEmptyKeyIsRefusedUnsent: a trx call with an empty key, which has no
// path of its own, is refused invalid_argument before anything is sent
// (sent, it routed to another path and came back not_found).
func TestEmptyKeyIsRefusedUnsent(t *testing.T) {
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent.Add(1) }))
	defer srv.Close()
	c, ctx := New(srv.URL, "k", nil), context.Background()
	_, _, err := c.Commit(ctx, 1, 1, "")
	if coffer.ErrorCode(err) != coffer.CodeInvalid {
		t.Fatalf("commit: %v", err)
	}
	if _, _, err = c.Rollback(ctx, 1, 1, ""); coffer.ErrorCode(err) != coffer.CodeInvalid {
		t.Fatalf("rollback: %v", err)
	}
	if _, err = c.Trx(ctx, 1, 1, ""); coffer.ErrorCode(err) != coffer.CodeInvalid {
		t.Fatalf("trx: %v", err)
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// TestAnswerOverTheBoundIsAnError: an answer larger than AnswerBytesMax is
// an error that says so, not a cut answer read as malformed JSON; a
// write's says it may have been applied.
func TestAnswerOverTheBoundIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id": 1, "reason": "`))
		_, _ = w.Write([]byte(strings.Repeat("r", AnswerBytesMax)))
		_, _ = w.Write([]byte(`"}`))
	}))
	defer srv.Close()
	_, err := New(srv.URL, "k", nil).Trx(context.Background(), 1, 1, "k")
	if err == nil || !strings.Contains(err.Error(), "larger than") || strings.Contains(err.Error(), "applied") {
		t.Fatalf("a read's answer over the bound: %v", err)
	}
	_, err = New(srv.URL, "k", nil).BatchChange(context.Background(), 1, []BatchChange{{PlayerID: 1, IdempotencyKey: "k"}})
	if err == nil || !strings.Contains(err.Error(), "may have been applied") {
		t.Fatalf("a write's answer over the bound: %v", err)
	}
}
