package coffer

import (
	"strings"
	"testing"
)

func TestValidateBatchSize(t *testing.T) {
	for n, ok := range map[int]bool{0: false, 1: true, BatchChangesMax: true, BatchChangesMax + 1: false} {
		if err := ValidateBatchSize(n); (err == nil) != ok || (err != nil && ErrorCode(err) != CodeInvalid) {
			t.Errorf("%d changes: %v", n, err)
		}
	}
}

func TestBatchFailures(t *testing.T) {
	results := []ChangeResult{{}, {Err: Errorf(CodeInsufficientFunds, "")}, {Err: Errorf(CodeUnavailable, "")},
		{Err: Errorf(CodeInvalid, "")}, {Err: Errorf(CodeInternal, "")}}
	if n, first := BatchFailures(results); n != 2 || first != 2 {
		t.Errorf("BatchFailures = %d, %d; want 2, 2", n, first)
	}
	if n, first := BatchFailures(results[:2]); n != 0 || first != -1 {
		t.Errorf("no server-side failure: %d, %d", n, first)
	}
}

// TestServerFailure: internal and shard_unavailable are the service's
// failures, logged as errors by both transports and counted in a batch's
// log line; every other code, overloaded included, is a refusal.
func TestServerFailure(t *testing.T) {
	for _, c := range Codes {
		if want := c == CodeInternal || c == CodeUnavailable; c.ServerFailure() != want {
			t.Errorf("%s.ServerFailure() = %v", c, !want)
		}
	}
}

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
