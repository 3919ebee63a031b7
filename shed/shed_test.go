package shed

import (
	"testing"

	"github.com/cofferhq/coffer"
)

// TestGateRefusesBeyondItsBound: the bound is admitted, the next call is
// refused at once with overloaded, and a slot given back admits again.
func TestGateRefusesBeyondItsBound(t *testing.T) {
	g := NewGate("reports", 2)
	for i := 0; i < 2; i++ {
		if err := g.Enter(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := g.Enter(); coffer.ErrorCode(err) != coffer.CodeOverloaded {
		t.Fatalf("third call: %v", err)
	}
	g.Leave()
	if err := g.Enter(); err != nil {
		t.Fatalf("after a slot was given back: %v", err)
	}
}
