package engine

import (
	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// backendIndex is the index from backend to the services using it
// (users). It behaves as one map from key to users, kept in two parts:
// each bound backend's slot by its key (slots), and the users in an array
// by slot (bySlot), with the free slots listed (free) so that the array
// is only as long as the most backends ever bound at once.
//
// The split is for restore (fill): a backend's ID serves as its slot
// there, so the key part may be what the table's rule 4 built already
// (table.Restored.BackendIDs4, taken over as is), and the users fill an
// array by ID where filling a map of 100k keys took a sixth of a warm
// restart. Once restored, a slot is only a place: a backend bound later
// takes a free one, whatever its ID.
type backendIndex struct {
	slots  packedmap.Map[addrkey.Backend, uint32]
	bySlot []users  // a free slot's users are zero (id 0)
	free   []uint32 // free slots of bySlot
	packer *addrkey.BackendPacker
}

// newBackendIndex returns an empty index whose key part has room for n
// backends (the slots grow as they are taken; fill makes its own).
func newBackendIndex(n int) backendIndex {
	x := backendIndex{packer: addrkey.NewBackendPacker()}
	x.slots = packedmap.New[addrkey.Backend, uint32](n, x.packer)
	return x
}

// Get returns the users of k and whether k is bound.
func (x *backendIndex) Get(k addrkey.Backend) (users, bool) {
	s, ok := x.slots.Get(k)
	if !ok {
		return users{}, false
	}
	return x.bySlot[s], true
}

// Set sets the users of k (u.id not 0).
func (x *backendIndex) Set(k addrkey.Backend, u users) {
	s, ok := x.slots.Get(k)
	if !ok {
		if n := len(x.free); n > 0 {
			s, x.free = x.free[n-1], x.free[:n-1]
		} else {
			s = uint32(len(x.bySlot))
			x.bySlot = append(x.bySlot, users{})
		}
		x.slots.Set(k, s)
	}
	x.bySlot[s] = u
}

// Delete forgets k.
func (x *backendIndex) Delete(k addrkey.Backend) {
	s, ok := x.slots.Get(k)
	if !ok {
		return
	}
	x.slots.Delete(k)
	x.bySlot[s] = users{}
	x.free = append(x.free, s)
}

// Len returns the number of bound backends.
func (x *backendIndex) Len() int { return x.slots.Len() }

// All yields every bound backend and its users, in no order.
func (x *backendIndex) All(yield func(addrkey.Backend, users) bool) {
	for k, s := range x.slots.All {
		if !yield(k, x.bySlot[s]) {
			return
		}
	}
}

// Reserve makes room for n backends if the index is empty.
func (x *backendIndex) Reserve(n int) {
	if x.Len() != 0 {
		return
	}
	x.slots.Reserve(n)
	if cap(x.bySlot) < n {
		x.bySlot, x.free = make([]users, 0, n), nil
	}
}

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

// maxSlotsPerBackend bounds the array fill makes when slots are IDs: at
// most this many slots per backend reference of the services, plus
// minIDSlots. Restored IDs beyond it (sparse IDs) are given slots in
// order instead, through the key part.
const (
	maxSlotsPerBackend = 2
	minIDSlots         = 1 << 16
)

// fill indexes the backends of svcs in the empty index x (learn first), as
// put would one service after the other, and returns the users beyond the
// first of the shared backends (nil if none). The services must not
// change until fill returns; the result is the serial one
// (TestFillEqualsPut).
//
// Where the services' backend IDs are dense enough, each ID is its
// backend's slot: the users fill an array by ID, and ids4, if not nil, is
// taken over as the key part of the IPv4 backends (table.Restored's
// BackendIDs4: each IPv4 backend the services use, packed as the packer
// packs it, to its ID). x owns ids4 from then on. If the key part then
// has another number of keys than the services have IDs (ids4 is not the
// services': not the table's way), it is built again from the services.
func (x *backendIndex) fill(svcs []*table.Service, ids4 map[uint64]uint32) map[addrkey.Backend][]lb.ServiceID {
	refs, maxID := 0, lb.BackendID(0)
	for _, svc := range svcs {
		refs += len(svc.BackendIDs)
		for _, id := range svc.BackendIDs {
			maxID = max(maxID, id)
		}
	}
	if uint64(maxID) >= uint64(maxSlotsPerBackend*refs+minIDSlots) {
		return x.fillInOrder(svcs, refs)
	}
	if ids4 != nil {
		x.slots = packedmap.Adopt(ids4, x.packer)
	}
	x.bySlot = make([]users, maxID+1)
	var shared map[addrkey.Backend][]lb.ServiceID
	bound := 0
	for _, svc := range svcs {
		for i, b := range svc.Spec.Backends {
			id := svc.BackendIDs[i]
			u := &x.bySlot[id]
			if u.id == 0 {
				*u = users{id: id, one: svc.ID(), state: b.State}
				bound++
				if ids4 == nil || !b.Addr.Is4() {
					x.slots.Set(addrkey.BackendOf(table.BackendKey(b)), uint32(id))
				}
				continue
			}
			k := addrkey.BackendOf(table.BackendKey(b))
			if shared == nil {
				shared = map[addrkey.Backend][]lb.ServiceID{}
			}
			shared[k] = append(shared[k], svc.ID())
			u.flags |= usersShared
			u.state = b.State
		}
	}
	if bound != x.slots.Len() {
		x.slots = packedmap.New[addrkey.Backend, uint32](bound, x.packer)
		for _, svc := range svcs {
			for i, b := range svc.Spec.Backends {
				x.slots.Set(addrkey.BackendOf(table.BackendKey(b)), uint32(svc.BackendIDs[i]))
			}
		}
	}
	x.free = x.free[:0]
	for s := len(x.bySlot) - 1; s >= 0; s-- { // the lowest slots are taken first
		if x.bySlot[s].id == 0 {
			x.free = append(x.free, uint32(s))
		}
	}
	return shared
}

// fillInOrder is fill for sparse IDs: put's way, one backend after the
// other (refs: the services' backend references, at least the backends).
func (x *backendIndex) fillInOrder(svcs []*table.Service, refs int) map[addrkey.Backend][]lb.ServiceID {
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
