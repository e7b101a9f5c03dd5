package engine

import (
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// A map owner keeps none of a write request's slices once it has answered
// it (messages.MapApply), nor the allocator an AllocAcquire's items, so an
// answered request's entries are the core's again. The hot steps (an
// upsert's backend and service writes, a delete's service deletes, an
// upsert's ask for IDs) take their slices from spares and lend them
// to the request (lendServices, lendBackendWrites, lendRevNATWrites,
// upsertPlan.ask); the reply gives them back (Core.onReply),
// and the next step fills them again instead of allocating. A request
// sent twice (after a child failed) is never given back: a second copy
// may still be in a mailbox.

// Bounds of what a spares keeps: enough slices for the ops of eight bulk
// calls in flight at once (100 services of ten backends each: some 1,100
// service entries an op).
//
// When no op is left in flight (Core.complete) the spares rest: the
// slices that sat unused since the last rest are dropped, the largest
// first, until the room kept is at most sparesIdle; what the ops just run
// gave back stays, for the next ones. Bulk calls come in waves whose ops
// all complete before their callers' next calls arrive, so the engine is
// at rest between waves for a moment each time; trimming everything to
// sparesIdle then (sessions 35 and 36) made each wave allocate its slices
// again, some 250 bytes of the 3.5 KB a batched service allocated. Once
// the core has been at rest for a while with more than that kept (Quiet:
// a second with no op in flight, see actors.Supervisor) the spares are
// trimmed to sparesIdle, the largest first, used or not, and the
// allocator's answers kept are dropped: an engine at rest keeps some
// 80 KB at most (40 KB of map writes' entries, 18 KB of items to ask for
// IDs, and answers of up to 256 items and 2,560 backend IDs).
const (
	sparesKept    = 16        // slices kept, at most
	sparesEntries = 16 * 1024 // entries' room kept over all of them, at most
	sparesIdle    = 256       // entries' room a rest or a trim leaves, at most, of the slices it may drop
)

// spares holds empty slices of E given back, for take.
type spares[E any] struct {
	free [][]E
	// used[i]: free[i] was given back since the last rest (else it sat
	// unused since, and the next rest may drop it).
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

// rest drops the slices not given back since the last rest, the largest
// first, until the room kept is at most sparesIdle (what was given back
// stays), and starts the next period.
func (s *spares[E]) rest() {
	s.dropWhile(func(i int) bool { return !s.used[i] })
	clear(s.used)
}

// trim drops slices, the largest first, until the room kept is at most
// sparesIdle.
func (s *spares[E]) trim() {
	s.dropWhile(func(int) bool { return true })
}

// dropWhile drops, the largest first, the slices i for which may(i) until
// the room kept is at most sparesIdle.
func (s *spares[E]) dropWhile(may func(i int) bool) {
	for s.room > sparesIdle {
		big := -1
		for i, xs := range s.free {
			if may(i) && (big < 0 || cap(xs) > cap(s.free[big])) {
				big = i
			}
		}
		if big < 0 {
			return
		}
		s.drop(big)
	}
}

// large reports whether more than sparesIdle entries' room is kept.
func (s *spares[E]) large() bool { return s.room > sparesIdle }

// Resting reports whether no op is in flight while the core keeps more
// for reuse than an engine at rest does (spares past sparesIdle, or run
// arrays: what Quiet trims): its actor then tells it Quiet once it has
// had no input for a while.
func (c *Core) Resting() bool {
	return c.inflight == 0 && (c.spares.large() || c.ops.keepsRunArrays())
}

// mapSpares are the core's spares, one per kind of slice it lends.
type mapSpares struct {
	svcWrites  spares[maps.ServiceEntry]
	svcDeletes spares[maps.ServiceKey]
	beWrites   spares[maps.BackendEntry]
	revWrites  spares[maps.RevNATEntry]
	acquires   spares[messages.AcquireItem] // an AllocAcquire's items (upsertPlan.ask)
	// answers are the allocator's answers to AllocAcquire once folded,
	// for the next ask to hand back (AllocAcquire.Reuse): up to
	// answersKept, none with more than answerItemsMax items or
	// answerIDsMax backend IDs, none once trimmed (their items' room
	// past sparesIdle, or their IDs' past answerIDsIdle, makes the spares
	// large, so that Quiet comes).
	answers []*messages.AllocAcquired
}

const (
	answersKept    = 4
	answerItemsMax = 1 << 12 // 48 bytes each
	answerIDsMax   = 1 << 15 // 4 bytes each
)

// keepAnswer keeps r, an answer the core has folded and keeps nothing
// of, for takeAnswer, if the bounds allow.
func (s *mapSpares) keepAnswer(r *messages.AllocAcquired) {
	if len(s.answers) < answersKept && cap(r.Items) <= answerItemsMax && cap(r.IDs) <= answerIDsMax {
		s.answers = append(s.answers, r)
	}
}

// takeAnswer returns a kept answer (nil: none), no longer kept.
func (s *mapSpares) takeAnswer() *messages.AllocAcquired {
	n := len(s.answers)
	if n == 0 {
		return nil
	}
	r := s.answers[n-1]
	s.answers[n-1] = nil
	s.answers = s.answers[:n-1]
	return r
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
	case *messages.AllocAcquire:
		clear(m.Items) // an item refers to its service's backends: kept, they would be too
		s.acquires.give(m.Items)
		m.Items = nil
	}
}

// rest rests each spares (Core.complete, when the last op in flight
// completes).
func (s *mapSpares) rest() {
	s.svcWrites.rest()
	s.svcDeletes.rest()
	s.beWrites.rest()
	s.revWrites.rest()
	s.acquires.rest()
}

// trim trims each spares to what an engine at rest keeps (Quiet).
func (s *mapSpares) trim() {
	s.svcWrites.trim()
	s.svcDeletes.trim()
	s.beWrites.trim()
	s.revWrites.trim()
	s.acquires.trim()
	clear(s.answers)
	s.answers = s.answers[:0]
}

// room is the entries' room kept, over every kind.
func (s *mapSpares) room() int {
	items, _ := s.answersRoom()
	return s.svcWrites.room + s.svcDeletes.room + s.beWrites.room + s.revWrites.room + s.acquires.room + items
}

// large reports whether any spares keeps more than an engine at rest.
func (s *mapSpares) large() bool {
	items, ids := s.answersRoom()
	return s.svcWrites.large() || s.svcDeletes.large() || s.beWrites.large() || s.revWrites.large() || s.acquires.large() ||
		items > sparesIdle || ids > answerIDsIdle
}

// answerIDsIdle is the most backend IDs' room the kept answers may have
// in an engine at rest (10 KB).
const answerIDsIdle = 10 * sparesIdle

// answersRoom is the items' and the backend IDs' room of the kept
// answers.
func (s *mapSpares) answersRoom() (items, ids int) {
	for _, r := range s.answers {
		items, ids = items+cap(r.Items), ids+cap(r.IDs)
	}
	return items, ids
}
