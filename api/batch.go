package api

import (
	"context"
	"log/slog"

	"github.com/cofferhq/coffer"
)

// ValidateChangeSize checks the size of one change of a batch, as its
// transport encodes it (n bytes), against bytesMax, the most a single
// call's body may have: a change that would be payload_too_large alone
// is so in a batch, alone. Errors are payload_too_large.
func ValidateChangeSize(n, bytesMax int) error {
	if n > bytesMax {
		return coffer.Errorf(coffer.CodePayloadTooLarge, "the change is larger than %d bytes, the most a single call's body may have", bytesMax)
	}
	return nil
}

// BatchDecoded applies the changes of a batch that a transport could
// decode, through l.BatchChange, and answers the others with the error
// that stopped them: reqs and errs have one element per change, and
// errs[i] != nil leaves reqs[i] out. Results come in request order.
// Errors are BatchChange's.
func BatchDecoded(ctx context.Context, l coffer.Ledger, reqs []coffer.ChangeRequest, errs []error) ([]coffer.ChangeResult, error) {
	if err := coffer.ValidateBatchSize(len(reqs)); err != nil {
		return nil, err
	}
	out := make([]coffer.ChangeResult, len(reqs))
	var valid []coffer.ChangeRequest
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
func BatchFailures(results []coffer.ChangeResult) []slog.Attr {
	n, first := 0, -1
	for i, r := range results {
		if coffer.ErrorCode(r.Err).ServerFailure() {
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
		slog.String("code", string(coffer.ErrorCode(err))), slog.String("error", err.Error())}
}
