package idalloc

import (
	"errors"
	"math"
	"testing"
)

// TestRefCountOverflow sets a reference count to its maximum directly: 2^32
// real Acquire calls would take too long.
func TestRefCountOverflow(t *testing.T) {
	a := New[string, uint16](10)
	if _, _, err := a.Acquire("a"); err != nil {
		t.Fatal(err)
	}
	a.keys.Set("a", entry[uint16]{id: 1, refs: math.MaxUint32})

	if _, _, err := a.Acquire("a"); !errors.Is(err, ErrRefCountOverflow) {
		t.Fatalf("Acquire: got %v, want ErrRefCountOverflow", err)
	}
	if _, err := a.AcquireID("a", 1); !errors.Is(err, ErrRefCountOverflow) {
		t.Fatalf("AcquireID: got %v, want ErrRefCountOverflow", err)
	}
	if _, refs, _ := a.Lookup("a"); refs != math.MaxUint32 {
		t.Fatalf("refs changed to %d", refs)
	}
	if id, freed, err := a.Release("a"); err != nil || freed || id != 1 {
		t.Fatalf("Release: %d %v %v", id, freed, err)
	}
}

// TestUnholdDropsTheHeldPage checks that the held set keeps no page once
// its last ID is unheld (the page is kept as the set's spare only).
func TestUnholdDropsTheHeldPage(t *testing.T) {
	a := New[string, uint32](10)
	if err := a.Hold(3); err != nil {
		t.Fatal(err)
	}
	if a.held.len() != 1 || len(a.held.pages) != 1 {
		t.Fatalf("held: %d IDs in %d pages, want 1 in 1", a.held.len(), len(a.held.pages))
	}
	a.Unhold(3)
	if a.held.len() != 0 || len(a.held.pages) != 0 {
		t.Fatalf("held after the last Unhold: %d IDs in %d pages, want none", a.held.len(), len(a.held.pages))
	}
}
