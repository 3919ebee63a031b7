package coffer

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

// ValidateBatchSize checks the number of changes of a batch, before any is
// decoded or applied. Errors are invalid_argument.
func ValidateBatchSize(n int) error {
	if n < 1 || n > BatchChangesMax {
		return Errorf(CodeInvalid, "changes: 1–%d changes required, got %d", BatchChangesMax, n)
	}
	return nil
}
