package coffer

import "testing"

func TestValidateBatchSize(t *testing.T) {
	for n, ok := range map[int]bool{0: false, 1: true, BatchChangesMax: true, BatchChangesMax + 1: false} {
		if err := ValidateBatchSize(n); (err == nil) != ok || (err != nil && ErrorCode(err) != CodeInvalid) {
			t.Errorf("%d changes: %v", n, err)
		}
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
