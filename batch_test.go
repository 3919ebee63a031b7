package coffer

import (
	"reflect"
	"testing"
)

func TestBatchPlayers(t *testing.T) {
	req := func(ns Namespace, p PlayerID) ChangeRequest {
		return ChangeRequest{Scope: Scope{Namespace: ns, PlayerID: p}}
	}
	cases := []struct {
		name string
		reqs []ChangeRequest
		want [][]int
	}{
		{"one", []ChangeRequest{req(1, 5)}, [][]int{{0}}},
		{"each player in request order", []ChangeRequest{req(1, 5), req(1, 6), req(1, 5), req(1, 7), req(1, 6), req(1, 5)},
			[][]int{{0, 2, 5}, {1, 4}, {3}}},
		{"a namespace is another balance", []ChangeRequest{req(1, 5), req(2, 5), req(1, 5)}, [][]int{{0, 2}, {1}}},
	}
	for _, c := range cases {
		if got := BatchPlayers(c.reqs); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

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
