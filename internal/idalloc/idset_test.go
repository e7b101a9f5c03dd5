package idalloc

import "testing"

func TestIDSet(t *testing.T) {
	var s idSet
	ids := []uint64{1, 63, 64, 4095, 4096, 4097, 1 << 31, 1<<32 - 1}
	for _, id := range ids {
		s.add(id)
		s.add(id) // twice: counted once
	}
	if s.len() != len(ids) {
		t.Fatalf("len %d, want %d", s.len(), len(ids))
	}
	for _, id := range ids {
		if !s.has(id) {
			t.Fatalf("%d missing", id)
		}
	}
	for _, id := range []uint64{0, 2, 65, 4094, 8192, 1<<32 - 2} {
		if s.has(id) {
			t.Fatalf("%d present", id)
		}
	}
	for _, id := range ids {
		s.remove(id)
		s.remove(id)
		if s.has(id) {
			t.Fatalf("%d still present", id)
		}
	}
	if s.len() != 0 || len(s.pages) != 0 {
		t.Fatalf("not empty: len %d, %d pages", s.len(), len(s.pages))
	}
	// The spare page comes back empty.
	s.add(5000)
	if !s.has(5000) || s.has(1) || s.has(4097) || s.len() != 1 {
		t.Fatal("reused page not empty")
	}
}
