package actors

import (
	"slices"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/asynkron/protoactor-go/actor"
)

// A backend has one state, whatever service refers to it: the backend map
// holds one entry per backend. The supervisor keeps an index from backend
// to the services using it, so that a state change made through one
// service is applied to the others too (their slots are rewritten by a
// refresh op queued on their own frontend).

// users is the set of services using one backend: the first in one, any
// others in Supervisor.shared (few backends are shared, and this entry is
// kept for every backend: 12 bytes, no pointer).
type users struct {
	one lb.ServiceID // 0: empty
	// extra counts the other services, listed in Supervisor.shared.
	extra uint16
	// state and id are the backend's, the same in every service using it
	// (set by put; propagateStates keeps the services equal).
	state lb.BackendState
	id    lb.BackendID
}

// n is the number of services in the set.
func (u users) n() int {
	if u.one == 0 {
		return 0
	}
	return 1 + int(u.extra)
}

// usersOf yields the services using backend k.
func (s *Supervisor) usersOf(k backendKey) func(yield func(lb.ServiceID) bool) {
	return func(yield func(lb.ServiceID) bool) {
		u, _ := s.users.Get(k)
		if u.one == 0 || !yield(u.one) {
			return
		}
		if u.extra == 0 {
			return
		}
		for _, id := range s.shared[k] {
			if !yield(id) {
				return
			}
		}
	}
}

// addUser records that service sid uses backend k, in state st with id,
// and reports whether another service uses it too.
func (s *Supervisor) addUser(k backendKey, sid lb.ServiceID, st lb.BackendState, id lb.BackendID) (shared bool) {
	u, _ := s.users.Get(k)
	shared = u.one != 0
	if u.one == 0 {
		u.one = sid
	} else {
		if s.shared == nil {
			s.shared = map[backendKey][]lb.ServiceID{}
		}
		s.shared[k] = append(s.shared[k], sid)
		u.extra++
	}
	u.state, u.id = st, id
	s.users.Set(k, u)
	return shared
}

// removeUser forgets that service sid uses backend k.
func (s *Supervisor) removeUser(k backendKey, sid lb.ServiceID) {
	u, ok := s.users.Get(k)
	if !ok {
		return
	}
	if u.extra == 0 {
		if u.one == sid {
			s.users.Delete(k)
		}
		return
	}
	more := s.shared[k]
	if u.one == sid {
		u.one = more[len(more)-1]
		more = more[:len(more)-1]
	} else {
		more = slices.DeleteFunc(more, func(x lb.ServiceID) bool { return x == sid })
	}
	u.extra = uint16(len(more))
	if len(more) == 0 {
		delete(s.shared, k)
	} else {
		s.shared[k] = more
	}
	s.users.Set(k, u)
}

// put installs svc in the table and the backend index, and reports
// whether svc shares a backend with another service.
func (s *Supervisor) put(svc *table.Service) (shared bool) {
	if old, ok := s.services[svc.ID()]; ok {
		s.unindex(old)
	}
	s.services[svc.ID()] = svc
	s.byFE.Set(svc.Frontend(), svc.ID())
	for i, b := range svc.Spec.Backends {
		if s.addUser(compactKey(table.BackendKey(b)), svc.ID(), b.State, svc.BackendIDs[i]) {
			shared = true
		}
	}
	return shared
}

// drop removes svc from the table and the backend index.
func (s *Supervisor) drop(svc *table.Service) {
	s.unindex(svc)
	delete(s.services, svc.ID())
	s.byFE.Delete(svc.Frontend())
}

func (s *Supervisor) unindex(svc *table.Service) {
	for _, b := range svc.Spec.Backends {
		s.removeUser(compactKey(table.BackendKey(b)), svc.ID())
	}
}

// backendState returns the current state of a backend, its ID and
// whether any service uses it.
func (s *Supervisor) backendState(k lb.L3n4Addr) (lb.BackendState, lb.BackendID, bool) {
	u, ok := s.users.Get(compactKey(k))
	return u.state, u.id, ok
}

// commit installs svc in the table and, when it shares a backend with
// other services, gives them its backend states (propagateStates).
func (s *Supervisor) commit(ctx actor.Context, svc *table.Service) {
	if s.put(svc) {
		s.propagateStates(ctx, svc)
	}
}

// propagateStates gives every other service using a backend of svc the
// state svc gives it, and queues a refresh of their maps.
func (s *Supervisor) propagateStates(ctx actor.Context, svc *table.Service) {
	var siblings map[lb.ServiceID]bool // allocated only when a backend is shared
	for _, b := range svc.Spec.Backends {
		for id := range s.usersOf(compactKey(table.BackendKey(b))) {
			if id != svc.ID() {
				if siblings == nil {
					siblings = map[lb.ServiceID]bool{}
				}
				siblings[id] = true
			}
		}
	}
	if siblings == nil {
		return
	}
	states := make(map[lb.L3n4Addr]lb.BackendState, len(svc.Spec.Backends))
	for _, b := range svc.Spec.Backends {
		states[table.BackendKey(b)] = b.State
	}
	for id := range siblings {
		sib := s.services[id]
		var changed bool
		next := &table.Service{Spec: *sib.Spec.DeepCopy(), BackendIDs: slices.Clone(sib.BackendIDs)}
		for i, b := range next.Spec.Backends {
			if st, ok := states[table.BackendKey(b)]; ok && st != b.State {
				next.Spec.Backends[i].State = st
				changed = true
			}
		}
		if !changed {
			continue
		}
		table.SlotOrder(next.Spec.Backends, next.BackendIDs)
		s.put(next)
		s.refreshes++
		s.run(ctx, s.refreshOp(next.Frontend(), next.Spec.Backends))
	}
}

// refreshOp rewrites the maps of the service of fe from the table (after
// a backend state change made through another service).
func (s *Supervisor) refreshOp(fe lb.L3n4Addr, bs []lb.Backend) *op {
	o := &op{keys: opKeys(fe, bs)}
	o.finish = func(s *Supervisor, err error) {
		if err != nil {
			s.log.WithError(err).WithField("frontend", fe.String()).Warn("refresh after a backend state change failed; restore repairs it")
		}
	}
	o.start = func(s *Supervisor, ctx actor.Context, o *op) {
		id, ok := s.byFE.Get(fe)
		if !ok {
			return // deleted meanwhile
		}
		svc := s.services[id]
		o.steps = []step{
			stepWriteBackendsRevNAT("refresh backends and revNAT", svc),
			stepWriteService("refresh service", svc, table.SlotCount(svc)),
		}
	}
	return o
}
