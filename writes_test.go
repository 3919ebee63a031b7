package coffer

import (
	"slices"
	"testing"
)

// TestNeedsOwnKeys: a batch may leave a write's own key unread, but not
// a key another write of the player names: a hold's begin sent again
// beside the hold's commit, in either order, reads the hold.
func TestNeedsOwnKeys(t *testing.T) {
	h, other := TrxKey{Emitter: 1, IdempotencyKey: "h"}, TrxKey{Emitter: 1, IdempotencyKey: "g"}
	begin := ValidChange{ChangeRequest: ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 7, Emitter: 1, IdempotencyKey: "h"}, Hold: true}}
	grant := ValidChange{ChangeRequest: ChangeRequest{Scope: Scope{Namespace: 1, PlayerID: 7, Emitter: 1, IdempotencyKey: "g"}}}
	commit := Finish{Key: h, Step: FinishCommit}
	for name, writes := range map[string][]Write{
		"begin, commit": {begin, grant, commit},
		"commit, begin": {commit, grant, begin},
	} {
		var n Needs
		for _, w := range writes {
			n.Add(w.Needs())
		}
		if !slices.Contains(n.Keys, h) || slices.Contains(n.Own, h) || !slices.Equal(n.Own, []TrxKey{other}) {
			t.Errorf("%s: keys %v, own %v; want the hold's key read, the grant's own", name, n.Keys, n.Own)
		}
	}
}
