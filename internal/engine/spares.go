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

// Bounds of what a spares keeps: enough slices for the ops of eight bulk
// calls in flight at once (100 services of ten backends each: some 1,100
// service entries an op).
//
// When no op is left in flight (Core.complete) the slices that sat unused
// since the last such time are dropped (rest): what the ops just run had
// given back stays, for the next ones. Bulk calls come in waves whose ops
// all complete before their callers' next calls arrive, so the engine is
// at rest between waves for a moment each time; dropping everything but
// what single calls use then (sessions 35 and 36) made each wave allocate
// its slices again, some 450 bytes of the 3.6 KB a batched service
// allocated. A single call after a bulk leaves at rest with the slice it
// used: the bulk's others go then. An engine at rest keeps what its last
// ops used, within these bounds (some 2.6 MB at the most, four kinds of
// 16k entries of 32-48 bytes; a single call's few dozen entries).
const (
	sparesKept    = 16        // slices kept, at most
	sparesEntries = 16 * 1024 // entries' room kept over all of them, at most
)

// spares holds empty slices of E given back, for take.
type spares[E any] struct {
	free [][]E
	// used[i]: free[i] was given back since the last rest (else it sat
	// unused since, and the next rest drops it).
	used []bool
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
	s.drop(best)
	return xs[:0]
}

// drop removes free[i] (the last one takes its place).
func (s *spares[E]) drop(i int) {
	s.room -= cap(s.free[i])
	last := len(s.free) - 1
	s.free[i], s.free[last] = s.free[last], nil
	s.used[i] = s.used[last]
	s.free, s.used = s.free[:last], s.used[:last]
}

// give keeps xs (no one else may use it any more) if the bounds allow.
// Its old entries are not cleared: the next take's appends overwrite them,
// and an entry holds no more than an address (an interned zone at most).
func (s *spares[E]) give(xs []E) {
	if cap(xs) == 0 || len(s.free) >= sparesKept || s.room+cap(xs) > sparesEntries {
		return
	}
	s.free, s.used = append(s.free, xs), append(s.used, true)
	s.room += cap(xs)
}

// rest drops the slices not given back since the last rest and starts
// the next period.
func (s *spares[E]) rest() {
	for i := len(s.free) - 1; i >= 0; i-- {
		if !s.used[i] {
			s.drop(i)
		}
	}
	clear(s.used)
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

// rest drops, in each spares, the slices no op used since the last rest
// (Core.complete, when the last op in flight completes).
func (s *mapSpares) rest() {
	s.svcWrites.rest()
	s.svcDeletes.rest()
	s.beWrites.rest()
	s.revWrites.rest()
}
