package engine

import (
	"sync"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// backendIndex is the index from backend to the services using it
// (users), kept in two halves by a bit of the backend's key
// (addrkey.Backend.Half), two maps that share one packer (an IPv6 prefix
// is learnt once for both). It behaves as one map; the halves let restore
// fill it on two cores (fill), where one map took a fifth of a warm
// restart.
type backendIndex struct {
	half   [2]packedmap.Map[addrkey.Backend, users]
	packer *addrkey.BackendPacker
}

// newBackendIndex returns an empty index with room for n backends.
func newBackendIndex(n int) backendIndex {
	x := backendIndex{packer: addrkey.NewBackendPacker()}
	for h := range x.half {
		x.half[h] = packedmap.New[addrkey.Backend, users]((n+1)/2, x.packer)
	}
	return x
}

func (x *backendIndex) of(k addrkey.Backend) *packedmap.Map[addrkey.Backend, users] {
	return &x.half[k.Half()]
}

// Get returns the users of k and whether any service uses it.
func (x *backendIndex) Get(k addrkey.Backend) (users, bool) { return x.of(k).Get(k) }

// Set sets the users of k.
func (x *backendIndex) Set(k addrkey.Backend, u users) { x.of(k).Set(k, u) }

// Delete forgets k.
func (x *backendIndex) Delete(k addrkey.Backend) { x.of(k).Delete(k) }

// Len returns the number of backends in use.
func (x *backendIndex) Len() int { return x.half[0].Len() + x.half[1].Len() }

// All yields every backend and its users, in no order.
func (x *backendIndex) All(yield func(addrkey.Backend, users) bool) {
	for h := range x.half {
		for k, u := range x.half[h].All {
			if !yield(k, u) {
				return
			}
		}
	}
}

// Reserve makes room for n backends if the index is empty.
func (x *backendIndex) Reserve(n int) {
	if x.Len() != 0 {
		return
	}
	for h := range x.half {
		x.half[h].Reserve((n + 1) / 2)
	}
}

// learn has the packer learn the IPv6 prefixes of svcs' backends, in the
// order put would (so that it packs the same keys, and refuses the same
// ones once full). After it, packing a key of svcs only reads the packer,
// so fill's goroutines (and the table's, at install) may share it.
func (x *backendIndex) learn(svcs []*table.Service) {
	for _, svc := range svcs {
		for _, b := range svc.Spec.Backends {
			if !b.Addr.Is4() {
				x.packer.Learn(addrkey.BackendOf(table.BackendKey(b)))
			}
		}
	}
}

// fill indexes the backends of svcs, as put would one service after the
// other (learn first), each half on a goroutine of its own (both go
// through svcs in order and take the keys of their half), and returns
// the users beyond the first of the shared backends (nil if none). The
// services must be new to the index and must not change until fill
// returns; the result is the serial one (TestFillEqualsPut).
func (x *backendIndex) fill(svcs []*table.Service) map[addrkey.Backend][]lb.ServiceID {
	var shared [2]map[addrkey.Backend][]lb.ServiceID
	var wg sync.WaitGroup
	for h := range x.half {
		wg.Go(func() {
			m := &x.half[h]
			for _, svc := range svcs {
				for i, b := range svc.Spec.Backends {
					k := addrkey.BackendOf(table.BackendKey(b))
					if k.Half() == h {
						addUser(m, &shared[h], k, svc.ID(), b.State, svc.BackendIDs[i], false)
					}
				}
			}
		})
	}
	wg.Wait()
	if shared[0] == nil {
		return shared[1]
	}
	for k, ids := range shared[1] {
		shared[0][k] = ids // the halves' keys are disjoint
	}
	return shared[0]
}

// addUser records in m (and shared, for a second user or more) that
// service sid uses backend k, in state st with id, and reports whether
// another service uses it too. held: the reference an op held on k is the
// service's now.
func addUser(m *packedmap.Map[addrkey.Backend, users], shared *map[addrkey.Backend][]lb.ServiceID, k addrkey.Backend, sid lb.ServiceID, st lb.BackendState, id lb.BackendID, held bool) (isShared bool) {
	u, _ := m.Get(k)
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
	m.Set(k, u)
	return isShared
}
