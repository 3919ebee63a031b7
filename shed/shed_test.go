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

// TestBudgetRefusesBeyondItsBound: bytes up to the bound are admitted,
// one more is refused at once with overloaded, and bytes given back admit
// again.
func TestBudgetRefusesBeyondItsBound(t *testing.T) {
	b := NewBudget("request bytes", 100)
	if err := b.Take(60); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(40); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(1); coffer.ErrorCode(err) != coffer.CodeOverloaded {
		t.Fatalf("one byte over: %v", err)
	}
	if b.Held() != 100 {
		t.Fatalf("held %d after a refusal", b.Held())
	}
	b.Give(60)
	if err := b.Take(60); err != nil {
		t.Fatalf("after bytes were given back: %v", err)
	}
}
