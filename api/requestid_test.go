package api

import (
	"strings"
	"testing"
)

// TestRequestID: a caller's request id is kept when a log line and a
// header carry it as it is (1–RequestIDLenMax bytes of printable ASCII);
// any other is replaced by a new one, never echoed.
func TestRequestID(t *testing.T) {
	for given, kept := range map[string]bool{
		"b60d4f40b3752871": true, "order-7731/retry:2": true, strings.Repeat("x", RequestIDLenMax): true,
		"": false, strings.Repeat("x", RequestIDLenMax+1): false, "a b": false, "a\tb": false, "a\x7fb": false,
		"a\nlevel=ERROR": false, "café": false, "a\x00": false,
	} {
		got := RequestID(given)
		if (got == given) != kept || got == "" || len(got) > RequestIDLenMax {
			t.Errorf("RequestID(%q) = %q; kept: want %v", given, got, kept)
		}
	}
	if a, b := RequestID(""), RequestID(""); a == b {
		t.Errorf("two new request ids are the same: %q", a)
	}
}
