package engine

import (
	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// backendIndex is the index from backend to the services using it
// (users), one map from key to an 8-byte entry ([2]uint32: 4-byte
// aligned, so that a key kept whole, 20 bytes, takes no padding). An
// entry is either the users themselves (inline, packed by packUsers) or,
// for a backend restored from the maps, {slot, 0}: a slot in an array by
// restored ID (restored) that holds them.
//
// The slots are for restore (fill): the key part may then be the map the
// table's rule 4 built already (table.Restored.BackendIDs4, its values
// {ID, 0}, taken over as is), and the users fill an array by ID, where filling
// a map of 100k keys took a sixth of a warm restart. A backend bound later
// is kept inline, so that an index that never restored is one map, as
// small as before; the array goes once its last restored backend does.
type backendIndex struct {
	entries packedmap.Map[addrkey.Backend, [2]uint32]
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
	x := backendIndex{packer: addrkey.NewBackendPacker()}
	x.entries = packedmap.New[addrkey.Backend, [2]uint32](0, x.packer)
	return x
}

// Get returns the users of k (their slot set if k is restored) and
// whether k is bound.
func (x *backendIndex) Get(k addrkey.Backend) (users, bool) {
	v, ok := x.entries.Get(k)
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
	x.entries.Set(k, packUsers(u))
}

// Delete forgets k, whose users u are as Get returned them.
func (x *backendIndex) Delete(k addrkey.Backend, u users) {
	x.entries.Delete(k)
	if u.slot != 0 {
		x.restored[u.slot] = [2]uint32{}
		if x.live--; x.live == 0 {
			x.restored = nil
		}
	}
}

// Len returns the number of bound backends.
func (x *backendIndex) Len() int { return x.entries.Len() }

// All yields every bound backend and its users, in no order.
func (x *backendIndex) All(yield func(addrkey.Backend, users) bool) {
	for k, v := range x.entries.All {
		var u users
		if isSlot(v) {
			u = unpackUsers(x.restored[v[0]])
			u.slot = v[0]
		} else {
			u = unpackUsers(v)
		}
		if !yield(k, u) {
			return
		}
	}
}

// Reserve makes room for n backends if the index is empty.
func (x *backendIndex) Reserve(n int) { x.entries.Reserve(n) }

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
// the users fill an array by ID, and ids4, if not nil, is
// taken over as the key part of the IPv4 backends (table.Restored's
// BackendIDs4: each IPv4 backend the services use, packed as the packer
// packs it, to {ID, 0}: its slot). x owns ids4 from then on. If
// the key part then has another number of keys than the services have
// IDs (ids4 is not the services': not the table's way), it is built again
// from the services.
func (x *backendIndex) fill(svcs []*table.Service, ids4 map[uint64][2]uint32) map[addrkey.Backend][]lb.ServiceID {
	refs, maxID := 0, lb.BackendID(0)
	for _, svc := range svcs {
		refs += len(svc.BackendIDs)
		for _, id := range svc.BackendIDs {
			maxID = max(maxID, id)
		}
	}
	if uint64(maxID) >= uint64(maxSlotsPerRef*refs+minIDSlots) {
		return x.fillInline(svcs, refs)
	}
	if ids4 != nil {
		x.entries = packedmap.Adopt(ids4, x.packer)
	} else {
		x.entries.Reserve(refs)
	}
	x.restored = make([][2]uint32, maxID+1)
	var shared map[addrkey.Backend][]lb.ServiceID
	bound := 0
	for _, svc := range svcs {
		for i, b := range svc.Spec.Backends {
			id := svc.BackendIDs[i]
			p := &x.restored[id]
			if *p == ([2]uint32{}) {
				*p = packUsers(users{id: id, one: svc.ID(), state: b.State})
				bound++
				if ids4 == nil || !b.Addr.Is4() {
					x.entries.Set(addrkey.BackendOf(table.BackendKey(b)), [2]uint32{uint32(id), 0})
				}
				continue
			}
			k := addrkey.BackendOf(table.BackendKey(b))
			if shared == nil {
				shared = map[addrkey.Backend][]lb.ServiceID{}
			}
			shared[k] = append(shared[k], svc.ID())
			u := unpackUsers(*p)
			u.flags |= usersShared
			u.state = b.State
			*p = packUsers(u)
		}
	}
	x.live = bound
	if bound != x.entries.Len() {
		x.entries = packedmap.New[addrkey.Backend, [2]uint32](bound, x.packer)
		for _, svc := range svcs {
			for i, b := range svc.Spec.Backends {
				x.entries.Set(addrkey.BackendOf(table.BackendKey(b)), [2]uint32{uint32(svc.BackendIDs[i]), 0})
			}
		}
	}
	if bound == 0 {
		x.restored = nil
	}
	return shared
}

// fillInline is fill for sparse IDs: put's way, one backend after the
// other, every entry inline (refs: the services' backend references).
func (x *backendIndex) fillInline(svcs []*table.Service, refs int) map[addrkey.Backend][]lb.ServiceID {
	x.Reserve(refs)
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
