package client

import (
	"reflect"
	"testing"
	"time"

	"github.com/cofferhq/coffer"
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
		{"a bad key", coffer.ChangeBody{IdempotencyKey: "k\xff"}, true},
		{"a bad currency in an op", &coffer.ChangeBody{Ops: []coffer.OpRequest{{Currency: "g\xfe", Amount: 1}}}, true},
		{"an op with an expiry in a zone", &coffer.ChangeBody{IdempotencyKey: "k", Ops: []coffer.OpRequest{{Currency: "gold", Amount: 1, ExpiresAt: &at}}}, false},
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
