package idalloc

import "fmt"

// Space hands out IDs in [1, max] that no key owns: its owner keeps what
// each ID is for (the engine's backend index keeps each backend's ID and
// its references), and the Space keeps only which IDs are in use, about
// one bit each (a paged bitmap). An ID is in use from Take (or Claim)
// until Free; Take hands out only IDs not in use, in cursor order as
// Allocator.Acquire does.
//
// A Space is not safe for concurrent use: it has exactly one owner.
type Space[I ID] struct {
	used   idSet
	max    I
	cursor I // next candidate for Take, in [1, max]
}

// NewSpace returns an empty space of IDs in [1, max], max inclusive.
// With max 0 every Take fails with ErrIDSpaceExhausted.
func NewSpace[I ID](max I) *Space[I] {
	return &Space[I]{max: max, cursor: 1}
}

// Take returns n IDs not in use, now in use: the next free ones at or
// after the cursor, rolling over from max to 1. All or nothing: without n
// free IDs it takes none and returns ErrIDSpaceExhausted.
func (s *Space[I]) Take(n int) ([]I, error) {
	if n == 0 {
		return nil, nil
	}
	return s.TakeAppend(make([]I, 0, n), n)
}

// TakeAppend is Take appending the IDs to dst (one array for the IDs of
// several takes); on error dst is returned unchanged.
func (s *Space[I]) TakeAppend(dst []I, n int) ([]I, error) {
	if free := uint64(s.max) - uint64(s.used.len()); uint64(n) > free {
		return dst, fmt.Errorf("%w: %d ids wanted, %d of %d free", ErrIDSpaceExhausted, n, free, s.max)
	}
	want := len(dst) + n
	id := s.cursor
	for len(dst) < want { // ends: at least n IDs are free
		if !s.used.has(uint64(id)) {
			s.used.add(uint64(id))
			dst = append(dst, id)
		}
		id = s.next(id)
	}
	s.cursor = id
	return dst, nil
}

// Claim marks id in use (a restore: the owner says which IDs it has).
// Errors: id 0 or > max: ErrIDOutOfRange; id in use already: ErrIDInUse.
func (s *Space[I]) Claim(id I) error {
	if id == 0 || id > s.max {
		return fmt.Errorf("%w: %d not in [1, %d]", ErrIDOutOfRange, id, s.max)
	}
	if s.used.has(uint64(id)) {
		return fmt.Errorf("%w: %d claimed twice", ErrIDInUse, id)
	}
	s.used.add(uint64(id))
	return nil
}

// Free makes id reusable. An ID not in use is an error (ErrNotFound):
// the owner gave back what it did not have.
func (s *Space[I]) Free(id I) error {
	if !s.used.has(uint64(id)) {
		return fmt.Errorf("%w: id %d is not in use", ErrNotFound, id)
	}
	s.used.remove(uint64(id))
	return nil
}

// InUse reports whether id is in use.
func (s *Space[I]) InUse(id I) bool { return s.used.has(uint64(id)) }

// Len returns the number of IDs in use.
func (s *Space[I]) Len() int { return s.used.len() }

// Max returns the largest ID the space hands out.
func (s *Space[I]) Max() I { return s.max }

func (s *Space[I]) next(id I) I {
	if id >= s.max {
		return 1
	}
	return id + 1
}
