package engine

import (
	"fmt"
	"slices"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/pagedindex"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// A backend has one state, whatever service refers to it: the backend map
// holds one entry per backend. The core keeps an index from backend
// to the services using it, so that a state change made through one
// service is applied to the others too (their slots are rewritten by a
// refresh op queued on their own frontend).

// users is the set of services using one backend: the first in one, any
// others in Core.shared (few backends are shared, and this entry is kept
// for every backend: 8 bytes packed, no pointer). It is also the backend's
// binding to its ID: the allocator keeps which backend IDs are in use,
// not whose they are. A backend is bound while a service uses it or an op
// holds it (an upsert that acquired it and has not committed, or is
// rolling back); its entry goes, and its ID is freed, when neither does.
type users struct {
	id  lb.BackendID
	one lb.ServiceID // 0: no service
	// state is the backend's, the same in every service using it (set by
	// put; propagateStates keeps the services equal).
	state lb.BackendState
	// flags: usersShared (other services use it too, listed in
	// Core.shared), and the references ops hold, in units of heldUnit (at
	// most one: the ops that acquire a backend wait in its queue one after
	// the other).
	flags uint8
	// slot is where the index keeps a restored backend's users (not
	// packed: Get sets it, Set and Delete read it); 0 for the others.
	slot uint32
}

const (
	usersShared = 1
	heldUnit    = 2
	heldMax     = 0xff / heldUnit
)

// shared reports whether services other than one use the backend.
func (u users) shared() bool { return u.flags&usersShared != 0 }

// held returns the number of references ops hold.
func (u users) held() int { return int(u.flags / heldUnit) }

// usersOf yields the services using backend k.
func (c *Core) usersOf(k addrkey.Backend) func(yield func(lb.ServiceID) bool) {
	return func(yield func(lb.ServiceID) bool) {
		u, _ := c.users.Get(k)
		if u.one == 0 || !yield(u.one) {
			return
		}
		if !u.shared() {
			return
		}
		for _, id := range c.shared[k] {
			if !yield(id) {
				return
			}
		}
	}
}

// removeUser forgets that service sid uses backend k. It returns k's ID
// and true when k is left unbound (no service uses it, no op holds it):
// its entry is gone, and the ID is to be freed.
func (c *Core) removeUser(k addrkey.Backend, sid lb.ServiceID) (lb.BackendID, bool) {
	u, ok := c.users.Get(k)
	if !ok {
		return 0, false
	}
	if !u.shared() {
		switch {
		case u.one != sid:
		case u.held() == 0:
			c.users.Delete(k, u)
			return u.id, true
		default: // still bound: an op holds it
			u.one = 0
			c.users.Set(k, u)
		}
		return 0, false
	}
	more := c.shared[k]
	if u.one == sid {
		u.one = more[len(more)-1]
		more = more[:len(more)-1]
	} else {
		more = slices.DeleteFunc(more, func(x lb.ServiceID) bool { return x == sid })
	}
	if len(more) == 0 {
		delete(c.shared, k)
		u.flags &^= usersShared
	} else {
		c.shared[k] = more
	}
	c.users.Set(k, u)
	return 0, false
}

// put installs svc in the table and the backend index, and reports
// whether svc shares a backend with another service. The references an
// op held on the backends at heldIdx (ascending indexes in
// svc.Spec.Backends) become the service's: one index update per backend.
// Those at fresh (ascending positions in heldIdx) the op bound itself
// (bindFresh) and has held in their queues since: their entries are the
// service's already, and put does not touch them. When svc replaces the
// service of its ID, its other backends are that service's own, with the
// same IDs (kept): of those, only the ones at touch (ascending indexes:
// those whose states svc changes, upsertItem.touch) are read and written;
// the others' entries need nothing. gone are the keys of
// the old service's backends svc no longer uses, and unbound (if not nil)
// gets the ID of each that put leaves unbound (no other service uses it,
// no op holds it).
func (c *Core) put(svc *table.Service, heldIdx, fresh, touch []int, gone []lb.L3n4Addr, unbound func(lb.BackendID)) (shared bool) {
	update := c.services.stored(svc.ID()) != nil
	c.services.put(svc)
	c.byFE.Set(svc.Frontend(), svc.ID())
	for _, k := range gone {
		if id, ok := c.removeUser(addrkey.BackendOf(k), svc.ID()); ok && unbound != nil {
			unbound(id)
		}
	}
	h := 0 // the next position in heldIdx
	for i, b := range svc.Spec.Backends {
		held := h < len(heldIdx) && heldIdx[h] == i
		k := addrkey.BackendOf(table.BackendKey(b))
		if held && len(fresh) > 0 && fresh[0] == h {
			fresh, h = fresh[1:], h+1
			continue // bindFresh wrote what addUser would make of it
		}
		if held {
			h++
		}
		if update && !held {
			if len(touch) == 0 || touch[0] != i {
				continue // kept, its entry as it was
			}
			touch = touch[1:]
			if isShared, ok := keepUser(&c.users, k, b.State); ok {
				shared = shared || isShared
				continue
			}
		}
		if addUser(&c.users, &c.shared, k, svc.ID(), b.State, svc.BackendIDs[i], held) {
			shared = true
		}
	}
	return shared
}

// keepUser gives backend k, which a service replaced by one that keeps it
// uses, the state st the new one gives it, and reports whether another
// service uses it too; false if k is not bound (not the core's way: put
// then binds it as a backend the service did not have). The entry is
// written only if st changes it.
func keepUser(x *backendIndex, k addrkey.Backend, st lb.BackendState) (isShared, ok bool) {
	u, ok := x.Get(k)
	if !ok {
		return false, false
	}
	if u.state != st {
		u.state = st
		x.Set(k, u)
	}
	return u.shared(), true
}

// drop removes svc from the table and the backend index, and calls
// unbound (if not nil) with the ID of each backend of svc it leaves
// unbound (no other service uses it, no op holds it): each such backend
// once, however many services of an op that drops them one after the
// other shared it (the last drop unbinds it).
func (c *Core) drop(svc *table.Service, unbound func(lb.BackendID)) {
	for _, b := range svc.Spec.Backends {
		if id, ok := c.removeUser(addrkey.BackendOf(table.BackendKey(b)), svc.ID()); ok && unbound != nil {
			unbound(id)
		}
	}
	c.services.delete(svc.ID())
	c.byFE.Delete(svc.Frontend())
}

// hold takes a reference on backend k for an op, if k is bound (a service
// uses it, or an op holds it), and returns its ID; a backend that is not
// bound needs a fresh ID (bindFresh). More than heldMax references at once
// (a bug: at most one op acquires a backend at a time) is an error.
func (c *Core) hold(k addrkey.Backend) (lb.BackendID, bool, error) {
	u, ok := c.users.Get(k)
	if !ok {
		return 0, false, nil
	}
	if u.held() == heldMax {
		return 0, false, fmt.Errorf("backend %s: %d ops hold it already", k.L3n4(), heldMax)
	}
	u.flags += heldUnit
	c.users.Set(k, u)
	return u.id, true, nil
}

// bindFresh binds k to the fresh ID id as the backend, in state st, of
// service sid, which an op is writing: the entry put would make of it at
// the commit, written at once, so that the commit does not write it
// again. k is not bound: the op found it unbound, and every other op on k
// waits in k's queue until this one completes, so no one reads the entry
// meanwhile but the allocator's snapshot (for its ID). The op's hold on
// k is its own record (upsertItem.freshHeld), not the entry's: a rollback
// unbinds it (unbindFresh).
func (c *Core) bindFresh(k addrkey.Backend, id lb.BackendID, sid lb.ServiceID, st lb.BackendState) {
	c.users.Set(k, users{id: id, one: sid, state: st})
}

// unbindFresh gives back k, which an op bound (bindFresh) and has not
// committed, and returns its ID, to be freed (releaser.free); false if k
// is not bound.
func (c *Core) unbindFresh(k addrkey.Backend) (lb.BackendID, bool) {
	u, ok := c.users.Get(k)
	if !ok {
		return 0, false
	}
	c.users.Delete(k, u)
	return u.id, true
}

// unhold gives back a reference an op held on k. It returns k's ID and
// true when k is left unbound (no service uses it, no op holds it): then
// the ID is to be freed (releaser.free).
func (c *Core) unhold(k addrkey.Backend) (lb.BackendID, bool) {
	u, ok := c.users.Get(k)
	if !ok || u.held() == 0 {
		return 0, false
	}
	u.flags -= heldUnit
	if u.held() == 0 && u.one == 0 {
		c.users.Delete(k, u)
		return u.id, true
	}
	c.users.Set(k, u)
	return 0, false
}

// backendsLeft reports (Config.OnBackendsLeft) the active backends of
// old, a UDP or any-protocol service, that svc (nil: deleted) no longer
// has active: connected UDP sockets stay on their backend until told.
func (c *Core) backendsLeft(old, svc *table.Service) {
	if p := old.Frontend().Protocol; p != lb.UDP && p != lb.ANY {
		return
	}
	var left []lb.L3n4Addr
	for _, b := range old.Spec.Backends {
		if b.State != lb.BackendStateActive {
			continue
		}
		still := false
		if svc != nil {
			k := table.BackendKey(b)
			for _, nb := range svc.Spec.Backends {
				if table.BackendKey(nb) == k {
					still = nb.State == lb.BackendStateActive
					break
				}
			}
		}
		if !still {
			left = append(left, table.BackendKey(b))
		}
	}
	if len(left) > 0 {
		c.cfg.OnBackendsLeft(old.ID(), left)
	}
}

// commit installs svc in the table (put) and, when it shares a backend
// with other services, gives them its backend states (propagateStates).
func (c *Core) commit(svc *table.Service, heldIdx, fresh, touch []int, gone []lb.L3n4Addr, unbound func(lb.BackendID)) {
	if c.put(svc, heldIdx, fresh, touch, gone, unbound) {
		c.propagateStates(svc)
	}
}

// propagateStates gives every other service using a backend of svc the
// state svc gives it, and queues a refresh of their maps.
func (c *Core) propagateStates(svc *table.Service) {
	var siblings []lb.ServiceID // allocated only when a backend is shared
	for _, b := range svc.Spec.Backends {
		for id := range c.usersOf(addrkey.BackendOf(table.BackendKey(b))) {
			if id != svc.ID() {
				siblings = append(siblings, id)
			}
		}
	}
	if siblings == nil {
		return
	}
	// In ID order, each once: the refresh ops run in the same order on
	// every replay of the same steps.
	slices.Sort(siblings)
	siblings = slices.Compact(siblings)
	states := make(map[addrkey.Backend]lb.BackendState, len(svc.Spec.Backends))
	for _, b := range svc.Spec.Backends {
		states[addrkey.BackendOf(table.BackendKey(b))] = b.State
	}
	for _, id := range siblings {
		// Most siblings already agree: they are read in place, and only
		// those whose states change are copied out.
		s := c.services.stored(id)
		changed := false
		for i := range s.nbe() {
			b := s.backend(c.services.packer, i)
			if st, ok := states[b.key]; ok && st != b.state {
				changed = true
				break
			}
		}
		if !changed {
			continue
		}
		sib := c.services.expand(s)
		next := c.services.expand(s)
		for i, b := range next.Spec.Backends {
			if st, ok := states[addrkey.BackendOf(table.BackendKey(b))]; ok {
				next.Spec.Backends[i].State = st
			}
		}
		table.SlotOrder(next.Spec.Backends, next.BackendIDs)
		// The same backends, kept: their entries have the states svc's
		// put gave them already, so put reads none.
		c.put(next, nil, nil, nil, nil, nil)
		c.run(&op{plan: &refreshPlan{fe: next.Frontend(), before: sib}, keys: opKeys(next.Frontend(), next.Spec.Backends)})
	}
}

// refreshPlan rewrites the maps of the service of fe from the table (after
// a backend state change made through another service).
type refreshPlan struct {
	fe  lb.L3n4Addr
	svc *table.Service
	// before is the service as it was before the state change: backends it
	// had active that are no longer are reported once the refresh is
	// written (OnBackendsLeft).
	before *table.Service
}

func (p *refreshPlan) start(c *Core, _ *op) []step {
	id, ok := c.byFE.Get(p.fe)
	if !ok {
		return nil // deleted meanwhile
	}
	p.svc = c.services.get(id)
	return refreshSteps
}

// refreshSteps are the steps of a refresh op (see on).
var refreshSteps = []step{
	{name: StepRefreshBackends, send: on((*refreshPlan).writeBackends), retry: mapRetries},
	{name: StepRefreshService, send: on((*refreshPlan).writeService), retry: mapRetries},
}

func (p *refreshPlan) writeBackends(c *Core, o *op) {
	var bes [2][]maps.BackendEntry
	bes[famIndex(p.svc.Family())] = table.BackendEntries(p.svc)
	c.applyBackends(o, bes, [2][]uint32{})
	c.applyRevNAT(o, []maps.RevNATEntry{table.RevNAT(p.svc)}, [2][]uint16{})
	c.applyMembers(o, table.MemberEntries(p.svc), nil, table.AffinityMatches(p.svc), nil)
}

func (p *refreshPlan) writeService(c *Core, o *op) {
	var ws [2][]maps.ServiceEntry
	ws[famIndex(p.svc.Family())] = table.SlotsAndMaster(p.svc)
	c.applyServices(o, ws, [2][]maps.ServiceKey{})
	// Its table follows the backends' new states (none left active: no
	// table, or the terminating ones').
	var mg maglevs
	mg.put(p.svc, p.svc)
	c.applyMaglev(o, mg)
	// A backend that left maintenance may leave a member entry, one that
	// entered it an affinity match: deleted if present (the owners skip
	// absent keys).
	var maybe []maps.MemberEntry
	var inMaintenance []maps.AffinityMatchKey
	for i, b := range p.svc.Spec.Backends {
		k := maps.MemberKey{BackendID: uint32(p.svc.BackendIDs[i]), RevNATIndex: uint16(p.svc.ID())}
		maybe = append(maybe, maps.MemberEntry{Key: k})
		if b.State == lb.BackendStateMaintenance {
			inMaintenance = append(inMaintenance, maps.AffinityMatchKey{BackendID: k.BackendID, RevNATIndex: k.RevNATIndex})
		}
	}
	maybe = append(maybe, maps.MemberEntry{Key: maps.MemberKey{RevNATIndex: uint16(p.svc.ID())}})
	c.applyMembers(o, nil, memberKeysNotIn(maybe, table.MemberEntries(p.svc)), nil, inMaintenance)
}

func (p *refreshPlan) rollback(*Core, *op) []step { return nil }

func (p *refreshPlan) finish(c *Core, _ *op, err error) {
	if err != nil {
		c.log.WithError(err).WithField("frontend", p.fe.String()).Warn("refresh after a backend state change failed; restore repairs it")
		return
	}
	if p.before != nil && p.svc != nil && p.svc.ID() == p.before.ID() {
		c.backendsLeft(p.before, p.svc)
	}
}

// newFrontendIndex returns an empty index of services by frontend with
// room for n: the IPv4 frontends by their run key (addrkey.FrontendRun:
// the addresses a cluster hands its services in order are runs of keys,
// whose entries share pages), the IPv6 ones packed in a map where the
// packer can.
func newFrontendIndex(n int) *pagedindex.Packed[lb.L3n4Addr, lb.ServiceID] {
	return pagedindex.NewPacked[lb.L3n4Addr, lb.ServiceID](n, FrontendRuns, addrkey.NewFrontendPacker())
}

// FrontendRuns is which frontends come in runs (addrkey.FrontendRun): the
// core's frontend index and the allocator's service IDs keep them by it.
var FrontendRuns = pagedindex.Runs[lb.L3n4Addr]{Of: addrkey.FrontendRun, Back: addrkey.FrontendFromRun}
