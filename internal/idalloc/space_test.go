package idalloc

import (
	"errors"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
)

// Take hands out IDs in cursor order, skipping those in use, rolling
// over; all or nothing when the space is short.
func TestSpaceTakesFreeIDsInCursorOrderAllOrNothing(t *testing.T) {
	s := NewSpace[uint16](6)
	if err := s.Claim(2); err != nil {
		t.Fatal(err)
	}
	ids, err := s.Take(3)
	if err != nil || len(ids) != 3 || ids[0] != 1 || ids[1] != 3 || ids[2] != 4 {
		t.Fatalf("Take(3) = %v, %v; want [1 3 4]", ids, err)
	}
	if err := s.Free(1); err != nil {
		t.Fatal(err)
	}
	ids, err = s.Take(2) // 5, 6 then rolls over to 1
	if err != nil || len(ids) != 2 || ids[0] != 5 || ids[1] != 6 {
		t.Fatalf("Take(2) = %v, %v; want [5 6]", ids, err)
	}
	if _, err := s.Take(2); !errors.Is(err, ErrIDSpaceExhausted) {
		t.Fatalf("Take(2) with one free: %v, want ErrIDSpaceExhausted", err)
	}
	if s.Len() != 5 {
		t.Fatalf("a refused Take took IDs: %d in use, want 5", s.Len())
	}
	ids, err = s.Take(1)
	if err != nil || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("Take(1) = %v, %v; want [1] (rolled over)", ids, err)
	}
}

// TakeAppend appends after what dst holds, and a refused take leaves dst
// as it was and takes nothing.
func TestSpaceTakeAppendAppendsAndLeavesDstOnRefusal(t *testing.T) {
	s := NewSpace[uint32](4)
	ids, err := s.TakeAppend([]uint32{9}, 2)
	if err != nil || len(ids) != 3 || ids[0] != 9 || ids[1] != 1 || ids[2] != 2 {
		t.Fatalf("TakeAppend([9], 2) = %v, %v; want [9 1 2]", ids, err)
	}
	got, err := s.TakeAppend(ids, 3)
	if !errors.Is(err, ErrIDSpaceExhausted) || len(got) != 3 {
		t.Fatalf("TakeAppend(3) with two free = %v, %v; want the 3 given back and ErrIDSpaceExhausted", got, err)
	}
	if s.Len() != 2 {
		t.Fatalf("a refused TakeAppend took IDs: %d in use, want 2", s.Len())
	}
	if got, err = s.TakeAppend(got, 0); err != nil || len(got) != 3 {
		t.Fatalf("TakeAppend(0) = %v, %v; want dst unchanged", got, err)
	}
}

func TestSpaceRefusesBadClaimsAndFrees(t *testing.T) {
	s := NewSpace[uint32](10)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"claim 0", s.Claim(0), ErrIDOutOfRange},
		{"claim past max", s.Claim(11), ErrIDOutOfRange},
		{"free unused", s.Free(3), ErrNotFound},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := s.Claim(4); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(4); !errors.Is(err, ErrIDInUse) {
		t.Fatalf("claim twice: %v, want ErrIDInUse", err)
	}
	if s.Len() != 1 || !s.InUse(4) {
		t.Fatalf("after the refusals: %d in use (4: %v), want only 4", s.Len(), s.InUse(4))
	}
}

// Against a model (a set), random takes, claims and frees never hand out
// an ID in use and keep the same set.
func TestSpaceNeverHandsOutAnIDInUse(t *testing.T) {
	r := testutil.Rand(t)
	const max = 300
	s := NewSpace[uint32](max)
	model := map[uint32]bool{}
	for range 5000 {
		switch r.IntN(3) {
		case 0:
			n := r.IntN(8)
			ids, err := s.Take(n)
			if free := max - len(model); n > free {
				if !errors.Is(err, ErrIDSpaceExhausted) {
					t.Fatalf("Take(%d) with %d free: %v", n, free, err)
				}
				continue
			}
			if err != nil || len(ids) != n {
				t.Fatalf("Take(%d) = %v, %v", n, ids, err)
			}
			for _, id := range ids {
				if id == 0 || id > max || model[id] {
					t.Fatalf("Take handed out %d (in use: %v)", id, model[id])
				}
				model[id] = true
			}
		case 1:
			id := uint32(1 + r.IntN(max))
			err := s.Claim(id)
			if model[id] != (err != nil) {
				t.Fatalf("Claim(%d) in use %v: %v", id, model[id], err)
			}
			model[id] = true
		default:
			id := uint32(1 + r.IntN(max))
			err := s.Free(id)
			if model[id] != (err == nil) {
				t.Fatalf("Free(%d) in use %v: %v", id, model[id], err)
			}
			delete(model, id)
		}
		if s.Len() != len(model) {
			t.Fatalf("%d in use, model %d", s.Len(), len(model))
		}
	}
	for id := uint32(1); id <= max; id++ {
		if s.InUse(id) != model[id] {
			t.Fatalf("id %d: in use %v, model %v", id, s.InUse(id), model[id])
		}
	}
}
