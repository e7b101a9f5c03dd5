package engine

import (
	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/pagedindex"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// backendIndex is the index from backend to the services using it
// (users), from key to an 8-byte entry ([2]uint32: 4-byte aligned, so
// that a key kept whole, 20 bytes, takes no padding). An entry is either
// the users themselves (inline, packed by packUsers) or, for a backend
// restored from the maps, {slot, 0}: a slot in an array by restored ID
// (restored) that holds them.
//
// The key part (keys) is a pagedindex.Packed: the IPv4 backends in pages
// by their key in run order (addrkey.BackendRun: the address's last bits
// lowest): pods get their addresses from a node's range in order, so a
// service's backends, and the services created together, mostly share
// pages of 64 entries, where a Go map had each one probe (and miss, for a
// new backend) a table of megabytes at a random place: a cache miss each,
// twice per new backend (its check, then its binding). The others (IPv6)
// are kept in a map, packed where the packer can.
//
// The slots are for restore (fill): the users fill an array by ID, where
// filling a map of 100k keys took a sixth of a warm restart, and each
// backend's key part holds its slot (its pages readied first, so that the
// IPv4 ones go straight to them). A backend bound later is kept inline;
// the array goes once its last restored backend does.
type backendIndex struct {
	keys *pagedindex.Packed[addrkey.Backend, [2]uint32]
	// restored holds the users of restored backends by slot (their
	// restored ID), packed; zero: a slot whose backend is forgotten.
	restored [][2]uint32
	live     int // slots of restored in use
	packer   *addrkey.BackendPacker
}

// inlineBit is set in the second word of every packed users, which is 0
// in a slot's entry.
const inlineBit = 1 << 23

// packUsers packs u (not u.slot) into 8 bytes: id, then one (bits 0-15),
// state (16-22), inlineBit and flags (24-31).
func packUsers(u users) [2]uint32 {
	return [2]uint32{uint32(u.id), uint32(u.one) | uint32(u.state)<<16 | inlineBit | uint32(u.flags)<<24}
}

// unpackUsers is the inverse of packUsers.
func unpackUsers(v [2]uint32) users {
	return users{id: lb.BackendID(v[0]), one: lb.ServiceID(v[1]), state: lb.BackendState(v[1]>>16) & 0x7f, flags: uint8(v[1] >> 24)}
}

// isSlot reports whether entry v is a restored backend's slot.
func isSlot(v [2]uint32) bool { return v[1] == 0 }

// newBackendIndex returns an empty index (Reserve, or fill, sizes it).
func newBackendIndex() backendIndex {
	pk := addrkey.NewBackendPacker()
	return backendIndex{packer: pk, keys: newBackendKeys(pk)}
}

// newBackendKeys returns an empty key part of packer pk.
func newBackendKeys(pk *addrkey.BackendPacker) *pagedindex.Packed[addrkey.Backend, [2]uint32] {
	return pagedindex.NewPacked[addrkey.Backend, [2]uint32](0, backendRuns, pk)
}

// backendRuns is which backends come in runs (addrkey.BackendRun).
var backendRuns = pagedindex.Runs[addrkey.Backend]{Of: addrkey.BackendRun, Back: addrkey.BackendFromRun}

// Get returns the users of k (their slot set if k is restored) and
// whether k is bound.
func (x *backendIndex) Get(k addrkey.Backend) (users, bool) {
	v, ok := x.keys.Get(k)
	if !ok {
		return users{}, false
	}
	if isSlot(v) {
		u := unpackUsers(x.restored[v[0]])
		u.slot = v[0]
		return u, true
	}
	return unpackUsers(v), true
}

// Set sets the users of k: u as Get returned it and changed, or, for a k
// that is not bound, new users (slot 0).
func (x *backendIndex) Set(k addrkey.Backend, u users) {
	if u.slot != 0 {
		x.restored[u.slot] = packUsers(u)
		return
	}
	x.keys.Set(k, packUsers(u))
}

// Delete forgets k, whose users u are as Get returned them.
func (x *backendIndex) Delete(k addrkey.Backend, u users) {
	x.keys.Delete(k)
	if u.slot != 0 {
		x.restored[u.slot] = [2]uint32{}
		if x.live--; x.live == 0 {
			x.restored = nil
		}
	}
}

// Len returns the number of bound backends.
func (x *backendIndex) Len() int { return x.keys.Len() }

// All yields every bound backend and its users, in no order.
func (x *backendIndex) All(yield func(addrkey.Backend, users) bool) {
	for k, v := range x.keys.All {
		if !yield(k, x.usersOf(v)) {
			return
		}
	}
}

// usersOf returns the users entry v holds, or points to (a slot).
func (x *backendIndex) usersOf(v [2]uint32) users {
	if isSlot(v) {
		u := unpackUsers(x.restored[v[0]])
		u.slot = v[0]
		return u
	}
	return unpackUsers(v)
}

// Reserve makes room for n6 backends other than IPv4 ones if the index is
// empty (the IPv4 ones need none: their pages come as they fill).
func (x *backendIndex) Reserve(n6 int) { x.keys.Reserve(0, n6) }

// learn has the packer learn the IPv6 prefixes of svcs' backends, in the
// order put would (so that it packs the same keys, and refuses the same
// ones once full). After it, packing a key of svcs only reads the packer,
// so the table's goroutine at install may share it.
func (x *backendIndex) learn(svcs []*table.Service) {
	for _, svc := range svcs {
		for _, b := range svc.Spec.Backends {
			if !b.Addr.Is4() {
				x.packer.Learn(addrkey.BackendOf(table.BackendKey(b)))
			}
		}
	}
}

// The array of restored slots fill makes is at most maxSlotsPerRef slots
// per backend reference of the services, plus minIDSlots: restored IDs
// beyond that (sparse IDs) are indexed inline, one by one.
const (
	maxSlotsPerRef = 2
	minIDSlots     = 1 << 16
)

// fill indexes the backends of svcs in the empty index x (learn first), as
// put would one service after the other, and returns the users beyond the
// first of the shared backends (nil if none). The services must not
// change until fill returns; the result is the serial one
// (TestFillEqualsPut).
//
// Where the services' backend IDs are dense enough, each ID is its
// backend's slot (an ID names one backend: the backend maps are keyed by
// ID, and a shared backend has one ID in every service that uses it):
// the users fill an array by ID, and each backend's key part is {ID, 0}:
// its slot. If the key part then has another number of keys than the
// services have IDs (a backend with two IDs: not the table's way, whose
// rule 4 keeps one), the index is filled again put's way (fillInline).
func (x *backendIndex) fill(svcs []*table.Service) map[addrkey.Backend][]lb.ServiceID {
	refs, refs6, maxID := 0, 0, lb.BackendID(0)
	for _, svc := range svcs {
		refs += len(svc.BackendIDs)
		for _, id := range svc.BackendIDs {
			maxID = max(maxID, id)
		}
		for _, b := range svc.Spec.Backends {
			if !b.Addr.Is4() {
				refs6++
			}
		}
	}
	if uint64(maxID) >= uint64(maxSlotsPerRef*refs+minIDSlots) {
		return x.fillInline(svcs, refs6)
	}
	x.keys.Reserve(0, refs6)
	x.restored = make([][2]uint32, maxID+1)
	var shared map[addrkey.Backend][]lb.ServiceID
	bound := 0
	// Each backend's first reference sets its key part, in the services'
	// order: their backends come in runs of addresses, whose pages SetSeq
	// readies before it sets them.
	x.keys.SetSeq(func(yield func(addrkey.Backend, [2]uint32) bool) {
		for _, svc := range svcs {
			for i, b := range svc.Spec.Backends {
				id := svc.BackendIDs[i]
				p := &x.restored[id]
				if *p == ([2]uint32{}) {
					*p = packUsers(users{id: id, one: svc.ID(), state: b.State})
					bound++
					if !yield(addrkey.BackendOf(table.BackendKey(b)), [2]uint32{uint32(id), 0}) {
						return
					}
					continue
				}
				shared = addShared(shared, addrkey.BackendOf(table.BackendKey(b)), svc.ID(), p, b.State)
			}
		}
	})
	if bound != x.Len() {
		x.keys, x.restored = newBackendKeys(x.packer), nil
		return x.fillInline(svcs, refs6)
	}
	x.live = bound
	if bound == 0 {
		x.restored = nil
	}
	return shared
}

// addShared records, for fill, that service sid uses backend k too (k's
// users at slot p, now in state st), in shared, which it returns.
func addShared(shared map[addrkey.Backend][]lb.ServiceID, k addrkey.Backend, sid lb.ServiceID, p *[2]uint32, st lb.BackendState) map[addrkey.Backend][]lb.ServiceID {
	if shared == nil {
		shared = map[addrkey.Backend][]lb.ServiceID{}
	}
	shared[k] = append(shared[k], sid)
	u := unpackUsers(*p)
	u.flags |= usersShared
	u.state = st
	*p = packUsers(u)
	return shared
}

// fillInline is fill for sparse IDs: put's way, one backend after the
// other, every entry inline (refs6: the services' references to backends
// other than IPv4 ones).
func (x *backendIndex) fillInline(svcs []*table.Service, refs6 int) map[addrkey.Backend][]lb.ServiceID {
	x.Reserve(refs6)
	var shared map[addrkey.Backend][]lb.ServiceID
	for _, svc := range svcs {
		for i, b := range svc.Spec.Backends {
			addUser(x, &shared, addrkey.BackendOf(table.BackendKey(b)), svc.ID(), b.State, svc.BackendIDs[i], false)
		}
	}
	return shared
}

// addUser records in x (and shared, for a second user or more) that
// service sid uses backend k, in state st with id, and reports whether
// another service uses it too. held: the reference an op held on k is the
// service's now.
func addUser(x *backendIndex, shared *map[addrkey.Backend][]lb.ServiceID, k addrkey.Backend, sid lb.ServiceID, st lb.BackendState, id lb.BackendID, held bool) (isShared bool) {
	u, _ := x.Get(k)
	isShared = u.one != 0
	if u.one == 0 {
		u.one = sid
	} else {
		if *shared == nil {
			*shared = map[addrkey.Backend][]lb.ServiceID{}
		}
		(*shared)[k] = append((*shared)[k], sid)
		u.flags |= usersShared
	}
	u.state, u.id = st, id
	if held && u.held() > 0 {
		u.flags -= heldUnit
	}
	x.Set(k, u)
	return isShared
}
