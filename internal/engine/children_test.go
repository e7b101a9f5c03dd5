package engine

import "testing"

func TestEveryChildHasItsOwnOutboxQueueInReadyOrder(t *testing.T) {
	if len(Children) != numChildren {
		t.Fatalf("len(Children) = %d, numChildren = %d", len(Children), numChildren)
	}
	for i, name := range Children {
		if got := childIndex(name); got != i {
			t.Errorf("childIndex(%q) = %d, want %d (its place in Children)", name, got, i)
		}
	}
}
