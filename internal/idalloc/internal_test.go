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

// TestUnholdReleasesMap checks that the held set is dropped once empty.
func TestUnholdReleasesMap(t *testing.T) {
	a := New[string, uint32](10)
	if err := a.Hold(3); err != nil {
		t.Fatal(err)
	}
	a.Unhold(3)
	if a.held != nil {
		t.Fatal("held map kept after the last Unhold")
	}
}
