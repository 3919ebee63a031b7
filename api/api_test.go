package api

import (
	"fmt"
	"testing"

	"github.com/cofferhq/coffer"
)

// TestAPIKey: the scheme is Bearer in any case, and required.
func TestAPIKey(t *testing.T) {
	for _, c := range []struct {
		header []string
		key    string
	}{
		{[]string{"Bearer k1"}, "k1"},
		{[]string{"bearer k1"}, "k1"},
		{[]string{"BEARER   k1 "}, "k1"},
		{[]string{"k1"}, ""},
		{[]string{"Basic k1"}, ""},
		{[]string{"Bearerk1"}, ""},
		{[]string{"Bearer "}, ""},
		{[]string{"Bearer"}, ""},
		{[]string{""}, ""},
		{nil, ""},
		{[]string{"Bearer k1", "Bearer k2"}, ""},
	} {
		key, err := APIKey(c.header)
		if key != c.key || (c.key == "") != (coffer.ErrorCode(err) == coffer.CodeUnauthenticated) {
			t.Errorf("%q: %q %v", c.header, key, err)
		}
	}
}

func TestBatchFailures(t *testing.T) {
	results := []coffer.ChangeResult{{}, {Err: coffer.Errorf(coffer.CodeInsufficientFunds, "")}, {Err: coffer.Errorf(coffer.CodeUnavailable, "down")},
		{Err: coffer.Errorf(coffer.CodeInvalid, "")}, {Err: coffer.Errorf(coffer.CodeInternal, "")}}
	got := fmt.Sprint(BatchFailures(results))
	if want := "[failed=2 first=2 code=shard_unavailable error=shard_unavailable: down]"; got != want {
		t.Errorf("BatchFailures = %s; want %s", got, want)
	}
	if attrs := BatchFailures(results[:2]); attrs != nil {
		t.Errorf("no server-side failure: %v", attrs)
	}
}
