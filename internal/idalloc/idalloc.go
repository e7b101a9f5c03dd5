package idalloc

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/pagedindex"
)

// ID is any unsigned ID type (service IDs are uint16-based, backend IDs
// uint32-based).
type ID interface{ ~uint16 | ~uint32 | ~uint64 }

// Binding is one key and the ID it owns. Refs is 0 for a restored
// reservation that has not been claimed yet.
type Binding[K comparable, I ID] struct {
	Key  K
	ID   I
	Refs uint32
}

// entry is stored by value in the key map: for uint16 and uint32 IDs it is 8
// bytes, so a binding costs one key-map slot (key + 8 bytes) and one ID-map
// slot (ID + key), with no per-binding pointer or heap object.
type entry[I ID] struct {
	id   I
	refs uint32 // 0: reserved by Restore, not claimed yet
}

// Allocator hands out IDs in [1, max] for keys of type K. Zero is never
// handed out. See the package documentation for the states of an ID.
//
// An Allocator is not safe for concurrent use: it has exactly one owner.
type Allocator[K comparable, I ID] struct {
	keys   keyMap[K, entry[I]] // bound and reserved keys
	used   idSet               // the IDs of keys (their owner: see owner)
	held   idSet               // free but not reusable
	max    I
	cursor I // next candidate for Acquire, in [1, max]
}

// keyMap is where an Allocator keeps its keys: a packedmap.Map, or a
// pagedindex.Packed for keys that come in runs (NewRuns).
type keyMap[K comparable, V any] interface {
	Get(K) (V, bool)
	Set(K, V)
	Delete(K)
	Len() int
	All(yield func(K, V) bool)
	Reserve(n int)
}

// runKeys is a pagedindex.Packed as a keyMap: Reserve makes room for keys
// in runs.
type runKeys[K comparable, V any] struct {
	*pagedindex.Packed[K, V]
}

func (r runKeys[K, V]) Reserve(n int) { r.Packed.Reserve(n, 0) }

// New returns an empty allocator for IDs in [1, max], max inclusive (65535
// for service IDs, 2^32-1 for backend IDs). With max 0 every Acquire fails
// with ErrIDSpaceExhausted.
func New[K comparable, I ID](max I) *Allocator[K, I] {
	return NewSized[K, I](max, 0)
}

// NewSized is New with room for n keys (a restore knows how many come).
func NewSized[K comparable, I ID](max I, n int) *Allocator[K, I] {
	m := packedmap.New[K, entry[I]](n, nil)
	return &Allocator[K, I]{keys: &m, max: max, cursor: 1}
}

// NewCompact is NewSized for keys of which many pack into 8 bytes (an IPv4
// backend address among IPv6 ones): those are kept packed, in less than
// half the memory. It behaves exactly as NewSized otherwise.
func NewCompact[K comparable, I ID](max I, n int, pk packedmap.Packer[K]) *Allocator[K, I] {
	m := packedmap.New[K, entry[I]](n, pk)
	return &Allocator[K, I]{keys: &m, max: max, cursor: 1}
}

// NewRuns is NewCompact for keys of which many come in runs, as r says
// (IPv4 frontends a cluster hands out in order, addrkey.FrontendRun):
// those share the pages of a pagedindex.Packed, where each key of a Go map
// cost a probe of a table of a megabyte or more (a cache miss) at every
// Acquire. The others are kept as NewCompact keeps them. It behaves
// exactly as NewSized otherwise.
func NewRuns[K comparable, I ID](max I, n int, r pagedindex.Runs[K], pk packedmap.Packer[K]) *Allocator[K, I] {
	return &Allocator[K, I]{keys: runKeys[K, entry[I]]{pagedindex.NewPacked[K, entry[I]](n, r, pk)}, max: max, cursor: 1}
}

// Reserve makes room for n keys if the allocator holds none (see
// packedmap.Map.Reserve).
func (a *Allocator[K, I]) Reserve(n int) { a.keys.Reserve(n) }

// Max returns the largest ID the allocator hands out.
func (a *Allocator[K, I]) Max() I { return a.max }

// Acquire returns the ID bound to key and increments its reference count.
// If key has no ID, it binds the next free ID at or after the cursor
// (rolling over from max to 1, skipping IDs that are bound, reserved or
// held) with reference count 1 and reports created=true.
//
// If key has a restored reservation, Acquire claims it: the ID stays the
// same, the reference count becomes 1 and created is false, because the
// binding existed before the call (its map entries may already be present).
//
// A full space returns ErrIDSpaceExhausted at once; otherwise the search
// visits at most max IDs and, in the common case, only one.
func (a *Allocator[K, I]) Acquire(key K) (id I, created bool, err error) {
	if e, ok := a.keys.Get(key); ok {
		if err := a.ref(key, e); err != nil {
			return 0, false, err
		}
		return e.id, false, nil
	}
	if a.unavailable() >= uint64(a.max) {
		return 0, false, a.exhausted()
	}
	id = a.cursor
	for range uint64(a.max) {
		if !a.taken(id) {
			a.bind(key, id, 1)
			a.cursor = a.next(id)
			return id, true, nil
		}
		id = a.next(id)
	}
	return 0, false, a.exhausted() // unreachable while the counts are right
}

// AcquireID binds key to id with reference count 1 if id is free
// (created=true). If key already owns id, it increments the reference count
// (claiming a restored reservation like Acquire does) and reports
// created=false. The cursor of Acquire does not move.
//
// Errors: id 0 or > max: ErrIDOutOfRange; id bound or reserved for another
// key: *ConflictError; key owns another id: *KeyBoundError; id held:
// ErrIDHeld.
func (a *Allocator[K, I]) AcquireID(key K, id I) (created bool, err error) {
	if err := a.checkRange(id); err != nil {
		return false, err
	}
	e, bound := a.keys.Get(key)
	if bound && e.id == id {
		return false, a.ref(key, e) // key's own: no scan for the owner
	}
	if err := a.checkClaimable(key, id, e, bound); err != nil {
		return false, err
	}
	a.bind(key, id, 1)
	return true, nil
}

// Lease holds up to n free IDs, found from the cursor as Acquire finds
// them, and returns them in that order: a lease the owner hands to a
// client, which binds them itself and tells the owner with Claim. A
// leased ID is held (see Hold) until it is claimed or unheld; fewer than
// n come back when fewer are free (none: the space is full). The cursor
// moves past the last one.
func (a *Allocator[K, I]) Lease(n int) []I {
	var out []I
	id := a.cursor
	for len(out) < n && a.unavailable() < uint64(a.max) {
		for a.taken(id) { // ends: some ID is free
			id = a.next(id)
		}
		a.hold(id)
		out = append(out, id)
		id = a.next(id)
	}
	a.cursor = id
	return out
}

// Claim binds key to id, an ID of a lease (held), with reference count 1.
// Claiming an ID key owns already, claimed, changes nothing: a claim sent
// again, or one that a restored binding made before it.
//
// Errors: id neither held nor key's: ErrNotLeased; key owns another id:
// *KeyBoundError; id 0 or > max: ErrIDOutOfRange.
func (a *Allocator[K, I]) Claim(key K, id I) error {
	if err := a.checkRange(id); err != nil {
		return err
	}
	if e, ok := a.keys.Get(key); ok {
		if e.id == id && e.refs > 0 {
			return nil
		}
		return &KeyBoundError{Key: key, ID: uint64(e.id), Reserved: e.refs == 0}
	}
	if !a.Held(id) {
		return fmt.Errorf("%w: id %d for %v", ErrNotLeased, id, key)
	}
	a.Unhold(id)
	a.bind(key, id, 1)
	return nil
}

// Release decrements key's reference count. At zero the binding is removed
// and the ID becomes free; Release returns the ID and whether it was freed.
// If the ID's map entries are deleted after this call, Hold it until they
// are gone.
//
// Releasing a key without a claimed binding (unknown, or only a restored
// reservation; see DropReservation) returns an error matching ErrNotFound.
func (a *Allocator[K, I]) Release(key K) (id I, freed bool, err error) {
	e, ok := a.keys.Get(key)
	switch {
	case !ok:
		return 0, false, fmt.Errorf("%w: key %v", ErrNotFound, key)
	case e.refs == 0:
		return 0, false, fmt.Errorf("%w: key %v has only the unclaimed reservation of id %d",
			ErrNotFound, key, e.id)
	case e.refs > 1:
		e.refs--
		a.keys.Set(key, e)
		return e.id, false, nil
	}
	a.keys.Delete(key)
	a.used.remove(uint64(e.id))
	return e.id, true, nil
}

// Restore reserves id for key as read back from a pinned map at start: the
// ID is owned by key but not claimed (reference count 0) until Acquire or
// AcquireID for the same key claims it. A fresh Acquire for another key
// never gets it. Restoring a key to the ID it already owns (reserved or
// claimed) is a no-op, so a dump may list the same pair more than once.
// The cursor of Acquire does not move.
//
// Errors: id 0 or > max: ErrIDOutOfRange; id bound or reserved for another
// key: *ConflictError (the caller repairs: one of the two must go); key owns
// another id: *KeyBoundError; id held: ErrIDHeld.
func (a *Allocator[K, I]) Restore(key K, id I) error {
	if err := a.checkRange(id); err != nil {
		return err
	}
	e, bound := a.keys.Get(key)
	if bound && e.id == id {
		return nil // key's own: no scan for the owner
	}
	if err := a.checkClaimable(key, id, e, bound); err != nil {
		return err
	}
	a.bind(key, id, 0)
	return nil
}

// Unclaimed returns the restored reservations that were never claimed
// (reference count 0), sorted by ID. After the first full sync these are
// stale: the caller deletes their map entries and calls DropReservation.
func (a *Allocator[K, I]) Unclaimed() []Binding[K, I] {
	var out []Binding[K, I]
	for k, e := range a.keys.All {
		if e.refs == 0 {
			out = append(out, Binding[K, I]{Key: k, ID: e.id})
		}
	}
	sortByID(out)
	return out
}

// DropReservation frees the unclaimed reservation of key, once the caller
// has deleted its stale map entries (or, if other messages may be handled
// before the deletion is done, call DropReservation and then Hold the ID
// until it is).
//
// Errors: key unknown: ErrNotFound; key claimed (reference count > 0):
// *ConflictError with Key set to key.
func (a *Allocator[K, I]) DropReservation(key K) error {
	e, ok := a.keys.Get(key)
	if !ok {
		return fmt.Errorf("%w: key %v", ErrNotFound, key)
	}
	if e.refs > 0 {
		return &ConflictError{ID: uint64(e.id), Key: key}
	}
	a.keys.Delete(key)
	a.used.remove(uint64(e.id))
	return nil
}

// Hold marks a free ID as not reusable until Unhold: neither Acquire nor
// AcquireID nor Restore hands it out. Use it while the previous owner's map
// entries are being deleted, so an ID is never given to a new key while a
// map still has entries of the old one; any free ID may be held, including
// one that was never bound. Holding a held ID is a no-op.
//
// Errors: id 0 or > max: ErrIDOutOfRange; id bound or reserved:
// *ConflictError.
func (a *Allocator[K, I]) Hold(id I) error {
	if err := a.checkRange(id); err != nil {
		return err
	}
	if a.used.has(uint64(id)) {
		return a.conflict(id, a.owner(id))
	}
	a.hold(id)
	return nil
}

// hold marks the free id held.
func (a *Allocator[K, I]) hold(id I) { a.held.add(uint64(id)) }

// bind binds key, which owns no ID, to the free id with refs references
// (0: a reservation).
func (a *Allocator[K, I]) bind(key K, id I, refs uint32) {
	a.keys.Set(key, entry[I]{id: id, refs: refs})
	a.used.add(uint64(id))
}

// Unhold makes a held ID free again. Unholding an ID that is not held is a
// no-op.
func (a *Allocator[K, I]) Unhold(id I) { a.held.remove(uint64(id)) }

// Held reports whether id is held.
func (a *Allocator[K, I]) Held(id I) bool {
	return a.held.has(uint64(id))
}

// Lookup returns the ID key owns and its reference count (0 for an
// unclaimed reservation). ok is false if key owns no ID.
func (a *Allocator[K, I]) Lookup(key K) (id I, refs uint32, ok bool) {
	e, ok := a.keys.Get(key)
	return e.id, e.refs, ok
}

// LookupID returns the key that owns id, bound or reserved. It scans the
// keys (O(n)): IDs keep no link back to their key, to save memory; only
// error paths need it.
func (a *Allocator[K, I]) LookupID(id I) (key K, ok bool) {
	if !a.used.has(uint64(id)) {
		return key, false
	}
	return a.owner(id), true
}

// owner returns the key whose ID is id (which must be used).
func (a *Allocator[K, I]) owner(id I) K {
	for k, e := range a.keys.All {
		if e.id == id {
			return k
		}
	}
	var zero K
	return zero
}

// Len returns the number of bound and reserved IDs (held IDs not included).
func (a *Allocator[K, I]) Len() int { return a.keys.Len() }

// Bindings returns every bound and reserved ID, sorted by ID.
func (a *Allocator[K, I]) Bindings() []Binding[K, I] {
	out := make([]Binding[K, I], 0, a.keys.Len())
	for k, e := range a.keys.All {
		out = append(out, Binding[K, I]{Key: k, ID: e.id, Refs: e.refs})
	}
	sortByID(out)
	return out
}

// ref increments the reference count of key, whose entry is e.
func (a *Allocator[K, I]) ref(key K, e entry[I]) error {
	if e.refs == math.MaxUint32 {
		return fmt.Errorf("%w: key %v (id %d)", ErrRefCountOverflow, key, e.id)
	}
	e.refs++
	a.keys.Set(key, e)
	return nil
}

// checkClaimable checks that id, which key does not own, may be bound or
// reserved for key; e and bound are key's entry, as the caller got it.
func (a *Allocator[K, I]) checkClaimable(key K, id I, e entry[I], bound bool) error {
	if a.used.has(uint64(id)) {
		return a.conflict(id, a.owner(id))
	}
	if bound {
		return &KeyBoundError{Key: key, ID: uint64(e.id), Reserved: e.refs == 0}
	}
	if a.held.has(uint64(id)) {
		return fmt.Errorf("%w: id %d (its previous owner's map entries are being deleted)", ErrIDHeld, id)
	}
	return nil
}

func (a *Allocator[K, I]) checkRange(id I) error {
	if id == 0 || id > a.max {
		return fmt.Errorf("%w: %d not in [1, %d]", ErrIDOutOfRange, id, a.max)
	}
	return nil
}

func (a *Allocator[K, I]) conflict(id I, owner K) error {
	e, _ := a.keys.Get(owner)
	return &ConflictError{ID: uint64(id), Key: owner, Reserved: e.refs == 0}
}

func (a *Allocator[K, I]) exhausted() error {
	return fmt.Errorf("%w: all %d ids are bound, reserved or held (%d held)",
		ErrIDSpaceExhausted, a.max, a.held.len())
}

// unavailable counts the IDs Acquire may not hand out. Held IDs are never
// bound or reserved, so the two sets are disjoint.
func (a *Allocator[K, I]) unavailable() uint64 {
	return uint64(a.used.len()) + uint64(a.held.len())
}

func (a *Allocator[K, I]) taken(id I) bool {
	return a.used.has(uint64(id)) || a.held.has(uint64(id))
}

// next returns the ID after id, rolling over from max to 1 (without
// overflowing when max is the largest value of I).
func (a *Allocator[K, I]) next(id I) I {
	if id >= a.max {
		return 1
	}
	return id + 1
}

func sortByID[K comparable, I ID](b []Binding[K, I]) {
	slices.SortFunc(b, func(x, y Binding[K, I]) int { return cmp.Compare(x.ID, y.ID) })
}
