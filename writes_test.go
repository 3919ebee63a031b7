package coffer

import (
	"slices"
	"testing"
)

// TestNeedsOwnKeys: a batch may leave a write's own key unread, but not
// a key another write of the player names: a hold's begin sent again
// beside the hold's commit, in either order, names the hold's key (read
// always) as well as owning it.
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
		if !slices.Equal(n.Keys, []TrxKey{h}) || len(n.Own) != 2 || !slices.Contains(n.Own, h) || !slices.Contains(n.Own, other) {
			t.Errorf("%s: keys %v, own %v; want the hold's key named, both begins' keys own", name, n.Keys, n.Own)
		}
	}
}
