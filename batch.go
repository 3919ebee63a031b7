package coffer

import (
	"context"
	"encoding/json"
	"log/slog"
)

// BatchChangesMax bounds the changes of one batch: what a season reward or
// a tournament payout sends at once, small enough that one call's answer
// stays a few megabytes.
const BatchChangesMax = 1000

// ChangeResult is the answer to one change of a batch: what Change would
// have returned for it alone. Err is nil, or carries one of Change's codes.
type ChangeResult struct {
	Trx    Trx
	Replay bool
	Err    error
}

// BatchBody is the JSON body of a batch over HTTP: the changes, each with
// its player. The server decodes each change on its own, so that a
// malformed one fails alone; the Go client sends it whole.
type BatchBody struct {
	Changes []BatchChangeBody `json:"changes"`
}

// BatchChangeBody is one change of a batch: a ChangeBody and its player.
// Its fields are ChangeBody's, not an embedded ChangeBody, whose name
// the JSON decoder would put in the messages of type errors.
type BatchChangeBody struct {
	PlayerID       PlayerID        `json:"player_id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Ops            []OpRequest     `json:"ops"`
	Reason         string          `json:"reason,omitempty"`
	Meta           json.RawMessage `json:"meta,omitempty"`
	Hold           bool            `json:"hold,omitempty"`
	HoldTTLSeconds int64           `json:"hold_ttl_seconds,omitempty"`
}

// ValidateBatchSize checks the number of changes of a batch, before any is
// decoded or applied. Errors are invalid_argument.
func ValidateBatchSize(n int) error {
	if n < 1 || n > BatchChangesMax {
		return Errorf(CodeInvalid, "changes: 1–%d changes required, got %d", BatchChangesMax, n)
	}
	return nil
}

// ValidateChangeSize checks the size of one change of a batch, as its
// transport encodes it (n bytes), against bytesMax, the most a single
// call's body may have: a change that would be payload_too_large alone
// is so in a batch, alone. Errors are payload_too_large.
func ValidateChangeSize(n, bytesMax int) error {
	if n > bytesMax {
		return Errorf(CodePayloadTooLarge, "the change is larger than %d bytes, the most a single call's body may have", bytesMax)
	}
	return nil
}

// Request is the ChangeRequest of a change body in scope sc (whose key is
// replaced by the body's). Errors (invalid_argument) are those of the
// fields read here; Catalog.ValidateChange checks the rest.
func (b ChangeBody) Request(sc Scope) (ChangeRequest, error) {
	ttl, err := HoldTTL(b.HoldTTLSeconds)
	if err != nil {
		return ChangeRequest{}, err
	}
	sc.IdempotencyKey = b.IdempotencyKey
	return ChangeRequest{Scope: sc, Ops: b.Ops, Reason: b.Reason, Meta: b.Meta, Hold: b.Hold, HoldTTL: ttl}, nil
}

// Request is the ChangeRequest of one change of a batch in namespace ns,
// for the client of emitter.
func (b BatchChangeBody) Request(ns Namespace, emitter Emitter) (ChangeRequest, error) {
	c := ChangeBody{IdempotencyKey: b.IdempotencyKey, Ops: b.Ops, Reason: b.Reason, Meta: b.Meta, Hold: b.Hold, HoldTTLSeconds: b.HoldTTLSeconds}
	return c.Request(Scope{Namespace: ns, PlayerID: b.PlayerID, Emitter: emitter})
}

// BatchDecoded applies the changes of a batch that a transport could
// decode, through l.BatchChange, and answers the others with the error
// that stopped them: reqs and errs have one element per change, and
// errs[i] != nil leaves reqs[i] out. Results come in request order.
// Errors are BatchChange's.
func BatchDecoded(ctx context.Context, l Ledger, reqs []ChangeRequest, errs []error) ([]ChangeResult, error) {
	if err := ValidateBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	out := make([]ChangeResult, len(reqs))
	var valid []ChangeRequest
	var at []int // the index in the batch of each of valid
	for i, err := range errs {
		if err != nil {
			out[i].Err = err
			continue
		}
		valid = append(valid, reqs[i])
		at = append(at, i)
	}
	if len(valid) == 0 {
		return out, nil
	}
	done, err := l.BatchChange(ctx, valid)
	if err != nil {
		return nil, err
	}
	for j, r := range done {
		out[at[j]] = r
	}
	return out, nil
}

// BatchFailures describes, for the log, the changes of a batch that
// failed on the server's side (Code.ServerFailure): how many, the first
// of them (its index), and its code and error. It is nil when none did.
// The call itself succeeded, so its own log line does not say.
func BatchFailures(results []ChangeResult) []slog.Attr {
	n, first := 0, -1
	for i, r := range results {
		if ErrorCode(r.Err).ServerFailure() {
			if n == 0 {
				first = i
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	err := results[first].Err
	return []slog.Attr{slog.Int("failed", n), slog.Int("first", first),
		slog.String("code", string(ErrorCode(err))), slog.String("error", err.Error())}
}
