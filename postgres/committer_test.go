package postgres

import (
	"context"
	"testing"

	"github.com/cofferhq/coffer"
)

// TestPanicKeepsTheAnswersGiven: a batch split in parts answers each part
// as it ends; a panic in a later part answers internal only the writes not
// answered yet, not one an earlier part committed or refused.
func TestPanicKeepsTheAnswersGiven(t *testing.T) {
	committed, refused, pending := &request{}, &request{}, &request{}
	c := &committer[*request]{kind: "writes", fail: failWrites}
	c.runSafely(context.Background(), func(context.Context, int, []*request) {
		committed.plan = &coffer.Plan{Trx: coffer.Trx{ID: 7}}
		refused.err = coffer.Errorf(coffer.CodeInsufficientFunds, "not enough gold")
		panic("a bug in the batch's second part")
	}, []*request{committed, refused, pending})
	if trx, _, err := committed.answer(); err != nil || trx.ID != 7 {
		t.Errorf("the committed write: trx %d, %v", trx.ID, err)
	}
	if _, _, err := refused.answer(); coffer.ErrorCode(err) != coffer.CodeInsufficientFunds {
		t.Errorf("the refused write: %v", err)
	}
	if _, _, err := pending.answer(); coffer.ErrorCode(err) != coffer.CodeInternal {
		t.Errorf("the write not answered: %v", err)
	}
}
