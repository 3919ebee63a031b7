package coffer

import (
	"fmt"
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
	results := []ChangeResult{{}, {Err: Errorf(CodeInsufficientFunds, "")}, {Err: Errorf(CodeUnavailable, "down")},
		{Err: Errorf(CodeInvalid, "")}, {Err: Errorf(CodeInternal, "")}}
	got := fmt.Sprint(BatchFailures(results))
	if want := "[failed=2 first=2 code=shard_unavailable error=shard_unavailable: down]"; got != want {
		t.Errorf("BatchFailures = %s; want %s", got, want)
	}
	if attrs := BatchFailures(results[:2]); attrs != nil {
		t.Errorf("no server-side failure: %v", attrs)
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
