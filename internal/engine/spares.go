package engine

import (
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// A map owner keeps none of a write request's slices once it has answered
// it (messages.MapApply), so an answered request's entries are the
// core's again. The hot steps (an upsert's backend and service writes, a
// delete's service deletes) take their slices from spares and lend them
// to the request (lendServices, lendBackendWrites, lendRevNATWrites); the
// reply gives them back (Core.onReply),
// and the next step fills them again instead of allocating. A request
// sent twice (after a child failed) is never given back: a second copy
// may still be in a mailbox.

// Bounds of what a spares keeps. While ops are in flight: enough slices
// for the ops of eight bulk calls in flight at once (100 services of ten
// backends each: some 1,100 service entries an op). Once none is
// (Core.complete), what is kept is trimmed to what single calls use, so
// that an engine at rest keeps at most some 40 KB of spares.
const (
	sparesKept    = 16        // slices kept, at most
	sparesEntries = 16 * 1024 // entries' room kept over all of them, at most, while busy
	sparesIdle    = 256       // the same, at rest
)

// spares holds empty slices of E given back, for take.
type spares[E any] struct {
	free [][]E
	room int // the capacities of free, summed
}

// take returns an empty slice with room for n entries: the smallest kept
// that has the room, else a new one.
func (s *spares[E]) take(n int) []E {
	if n <= 0 {
		return nil
	}
	best := -1
	for i, xs := range s.free {
		if cap(xs) >= n && (best < 0 || cap(xs) < cap(s.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]E, 0, n)
	}
	xs := s.free[best]
	last := len(s.free) - 1
	s.free[best], s.free[last] = s.free[last], nil
	s.free = s.free[:last]
	s.room -= cap(xs)
	return xs[:0]
}

// give keeps xs (no one else may use it any more) if the bounds allow.
// Its old entries are not cleared: the next take's appends overwrite them,
// and an entry holds no more than an address (an interned zone at most).
func (s *spares[E]) give(xs []E) {
	if cap(xs) == 0 || len(s.free) >= sparesKept || s.room+cap(xs) > sparesEntries {
		return
	}
	s.free = append(s.free, xs)
	s.room += cap(xs)
}

// trim drops slices until the room kept is at most max, the largest
// first: a slice larger than max never stays.
func (s *spares[E]) trim(max int) {
	for s.room > max {
		big := 0
		for i, xs := range s.free {
			if cap(xs) > cap(s.free[big]) {
				big = i
			}
		}
		s.room -= cap(s.free[big])
		last := len(s.free) - 1
		s.free[big], s.free[last] = s.free[last], nil
		s.free = s.free[:last]
	}
}

// mapSpares are the core's spares, one per kind of slice it lends.
type mapSpares struct {
	svcWrites  spares[maps.ServiceEntry]
	svcDeletes spares[maps.ServiceKey]
	beWrites   spares[maps.BackendEntry]
	revWrites  spares[maps.RevNATEntry]
}

// giveBack keeps the slices of msg, a request its child has answered,
// which the core lent it.
func (s *mapSpares) giveBack(msg any) {
	switch m := msg.(type) {
	case *messages.ServiceApply:
		s.svcWrites.give(m.Writes)
		s.svcDeletes.give(m.Deletes)
		m.Writes, m.Deletes = nil, nil
	case *messages.BackendApply:
		s.beWrites.give(m.Writes)
		m.Writes = nil
	case *messages.RevNATApply:
		s.revWrites.give(m.Writes)
		m.Writes = nil
	}
}

// trim trims each spares to what an engine at rest keeps.
func (s *mapSpares) trim() {
	s.svcWrites.trim(sparesIdle)
	s.svcDeletes.trim(sparesIdle)
	s.beWrites.trim(sparesIdle)
	s.revWrites.trim(sparesIdle)
}
