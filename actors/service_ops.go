package actors

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// slotKeys returns the service map keys of slots from..to of fe.
func slotKeys(fe lb.L3n4Addr, from, to int) []maps.ServiceKey {
	if from > to {
		return nil
	}
	out := make([]maps.ServiceKey, 0, to-from+1)
	for i := from; i <= to; i++ {
		out = append(out, table.Key(fe, uint16(i)))
	}
	return out
}

// serviceWrites is slots 1..n then the master: make before break.
func serviceWrites(svc *table.Service) []maps.ServiceEntry {
	return table.SlotsAndMaster(svc)
}

// Step builders shared by upsert, delete and their rollbacks.

func stepWriteService(name string, svc *table.Service, deleteTo int) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		id := s.newReqID()
		s.request(ctx, o, svcChild(svc.Family()), id, &messages.ServiceApply{
			ReqID: id, Writes: serviceWrites(svc), Deletes: slotKeys(svc.Frontend(), table.SlotCount(svc)+1, deleteTo),
		}, applied)
	}, retry: mapRetries}
}

func stepDeleteService(name string, svc *table.Service, slots int) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		id := s.newReqID()
		s.request(ctx, o, svcChild(svc.Family()), id, &messages.ServiceApply{
			ReqID: id, Deletes: slotKeys(svc.Frontend(), 0, slots), // master first
		}, applied)
	}, retry: mapRetries}
}

func stepWriteBackendsRevNAT(name string, svc *table.Service) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		id := s.newReqID()
		s.request(ctx, o, beChild(svc.Family()), id, &messages.BackendApply{ReqID: id, Writes: table.BackendEntries(svc)}, applied)
		id = s.newReqID()
		s.request(ctx, o, ChildRevNAT, id, &messages.RevNATApply{ReqID: id, Writes: []maps.RevNATEntry{table.RevNAT(svc)}}, applied)
	}, retry: mapRetries}
}

func stepWriteBackends(name string, f maps.Family, es []maps.BackendEntry) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		if len(es) == 0 {
			return
		}
		id := s.newReqID()
		s.request(ctx, o, beChild(f), id, &messages.BackendApply{ReqID: id, Writes: es}, applied)
	}, retry: mapRetries}
}

func stepDeleteRevNAT(name string, f maps.Family, sid lb.ServiceID) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		id := s.newReqID()
		m := &messages.RevNATApply{ReqID: id}
		if f == maps.IPv6 {
			m.Deletes6 = []uint16{uint16(sid)}
		} else {
			m.Deletes4 = []uint16{uint16(sid)}
		}
		s.request(ctx, o, ChildRevNAT, id, m, applied)
	}, retry: mapRetries}
}

// stepsRelease gives backend references (and the service ID when svc) back
// to the allocator, deletes the backends that became unreferenced, then
// lets their IDs be reused.
func stepsRelease(f maps.Family, fe lb.L3n4Addr, svc bool, keys []lb.L3n4Addr) []step {
	if len(keys) == 0 && !svc {
		return nil
	}
	var fes []lb.L3n4Addr
	if svc {
		fes = []lb.L3n4Addr{fe}
	}
	var freed [2][]uint32
	return []step{
		releaseBackendsStep("release IDs", keys, fes, inFamily(f), &freed, func(o *op) {
			o.beHolds = nil
			if svc {
				o.svcHolds = nil
			}
		}),
		deleteFreedStep("delete backends", &freed),
		{name: "reuse backend IDs", do: (*Supervisor).unholdStep},
	}
}

func applied(r any) error { return r.(*messages.MapApplied).Err }
func done(r any) error    { return r.(*messages.AllocDone).Err }

// checkWantedID checks that the service ID want (0: any) is not taken by
// another frontend than fe or by a standalone revNAT entry.
func (s *Supervisor) checkWantedID(fe lb.L3n4Addr, want lb.ServiceID) error {
	if want == 0 {
		return nil
	}
	if other, ok := s.services[want]; ok && other.Frontend() != fe {
		return fmt.Errorf("%w: service ID %d is already registered to %s", ErrServiceIDInUse, want, other.Frontend())
	}
	if addr, ok := s.standalone[want]; ok {
		return fmt.Errorf("%w: service ID %d is already registered to revNAT entry %s", ErrServiceIDInUse, want, addr.AddrPort())
	}
	return nil
}

// checkSharedState checks b's state against the one backend k has in the
// other services (one state per backend, across services). If b changes
// it and k is not the service's own already (mine), the entry that gives
// the other services theirs back is added to *restore: the backend is
// written with the new state before the commit, so a rollback needs it.
func (s *Supervisor) checkSharedState(b lb.Backend, k lb.L3n4Addr, mine bool, restore *[]maps.BackendEntry) error {
	cur, id, ok := s.backendState(k)
	if !ok {
		return nil
	}
	if err := lb.ValidateStateTransition(cur, b.State); err != nil {
		return fmt.Errorf("backend %s: %w", b.AddrPort(), err)
	}
	if !mine && cur != b.State {
		prev := b
		prev.State = cur
		*restore = append(*restore, table.BackendEntry(prev, id))
	}
	return nil
}

// newTableService returns the table's form of spec: a copy (the edge's
// spec stays as sent), backends in slot order, IDs to fill in.
func newTableService(spec *lb.Service) *table.Service {
	svc := &table.Service{Spec: *spec}
	svc.Spec.Backends = slices.Clone(spec.Backends)
	if svc.Spec.SessionAffinity && svc.Spec.SessionAffinityTimeout == 0 {
		// What the master slot holds, so Get answers the same before and
		// after a restart.
		svc.Spec.SessionAffinityTimeout = lb.DefaultSessionAffinityTimeout
	}
	table.SlotOrder(svc.Spec.Backends, nil)
	svc.BackendIDs = make([]lb.BackendID, len(svc.Spec.Backends))
	return svc
}

// upsertOp builds the op for one service (already validated). reply gets
// the outcome.
func (s *Supervisor) upsertOp(spec *lb.Service, reply func(id lb.ServiceID, created bool, err error)) *op {
	fe := spec.Frontend.L3n4Addr
	o := &op{keys: opKeys(fe, spec.Backends)}
	var (
		created bool
		newSvc  *table.Service
	)
	o.finish = func(s *Supervisor, err error) {
		if err != nil {
			reply(0, false, fmt.Errorf("upsert service %s: %w", fe, err))
			return
		}
		reply(newSvc.ID(), created, nil)
	}
	o.start = func(s *Supervisor, ctx actor.Context, o *op) {
		var old *table.Service
		if id, ok := s.byFE.Get(fe); ok {
			old = s.services[id]
		}
		want := spec.Frontend.ID
		if old != nil && want != 0 && want != old.ID() {
			o.err = fmt.Errorf("%w: frontend %s is already registered with ID %d", ErrFrontendInUse, fe, old.ID())
			return
		}
		if o.err = s.checkWantedID(fe, want); o.err != nil {
			return
		}
		newSvc = newTableService(spec)
		// The old service's backends and their IDs (a nil map for a new
		// service: most upserts create, and it would be most of their
		// garbage).
		var oldIDs map[lb.L3n4Addr]lb.BackendID
		if old != nil {
			newSvc.Spec.Frontend.ID = old.ID()
			oldIDs = make(map[lb.L3n4Addr]lb.BackendID, len(old.Spec.Backends))
			for i, b := range old.Spec.Backends {
				oldIDs[table.BackendKey(b)] = old.BackendIDs[i]
			}
		}
		acquire := make([]lb.L3n4Addr, 0, len(newSvc.Spec.Backends))
		acquireIdx := make([]int, 0, len(newSvc.Spec.Backends))
		var restoreShared []maps.BackendEntry
		var newKeys map[lb.L3n4Addr]bool
		if old != nil {
			newKeys = make(map[lb.L3n4Addr]bool, len(newSvc.Spec.Backends))
		}
		for i, b := range newSvc.Spec.Backends {
			k := table.BackendKey(b)
			if newKeys != nil {
				newKeys[k] = true
			}
			oldID, mine := oldIDs[k]
			if o.err = s.checkSharedState(b, k, mine, &restoreShared); o.err != nil {
				return
			}
			if mine {
				newSvc.BackendIDs[i] = oldID
				continue
			}
			acquire = append(acquire, k)
			acquireIdx = append(acquireIdx, i)
		}
		var removed []lb.L3n4Addr
		if old != nil {
			for _, b := range old.Spec.Backends {
				if k := table.BackendKey(b); !newKeys[k] {
					removed = append(removed, k)
				}
			}
		}
		created = old == nil
		f := newSvc.Family()
		oldSlots := 0
		if old != nil {
			oldSlots = table.SlotCount(old)
		}
		maxSlots := max(oldSlots, len(newSvc.Spec.Backends))

		o.steps = []step{
			{name: "acquire IDs", do: func(s *Supervisor, ctx actor.Context, o *op) {
				if !created && len(acquire) == 0 {
					return
				}
				id := s.newReqID()
				s.request(ctx, o, ChildAllocator, id, &messages.AllocAcquire{
					ReqID: id, Service: created, Frontend: fe, WantID: want, Backends: acquire,
				}, func(r any) error {
					rep := r.(*messages.AllocAcquired)
					if rep.Err != nil {
						return rep.Err
					}
					if created {
						newSvc.Spec.Frontend.ID = rep.ServiceID
						o.svcHolds = []messages.AllocBinding{{Key: fe, ID: uint64(rep.ServiceID), Refs: 1}}
					}
					o.beHolds = make([]messages.AllocBinding, 0, len(acquireIdx))
					for j, i := range acquireIdx {
						newSvc.BackendIDs[i] = rep.BackendIDs[j]
						o.beHolds = append(o.beHolds, messages.AllocBinding{Key: acquire[j], ID: uint64(rep.BackendIDs[j]), Refs: 1})
					}
					return nil
				})
			}},
			// Everything is sent, changed or not: the map owners skip
			// entries their map already holds, and an upsert (or Sync) of
			// an unchanged service still repairs maps that drifted.
			stepWriteBackendsRevNAT("write backends and revNAT", newSvc),
			stepWriteService("write service", newSvc, maxSlots),
			{name: "commit", do: func(s *Supervisor, ctx actor.Context, o *op) {
				s.commit(ctx, newSvc)
				// The references of removed backends leave the table now
				// but are held by this op until it releases them.
				o.svcHolds, o.beHolds = nil, nil
				for _, k := range removed {
					o.beHolds = append(o.beHolds, messages.AllocBinding{Key: k, ID: uint64(oldIDs[k]), Refs: 1})
				}
				o.rollback = nil // past the point of no return
			}},
		}
		o.steps = append(o.steps, stepsRelease(f, fe, false, removed)...)

		o.rollback = func() []step {
			acquiredKeys := make([]lb.L3n4Addr, len(o.beHolds))
			for i, h := range o.beHolds {
				acquiredKeys[i] = h.Key
			}
			shared := stepWriteBackends("roll back: states of shared backends", f, restoreShared)
			if created {
				if len(o.svcHolds) == 0 {
					return nil // nothing was acquired, so nothing was written
				}
				return append([]step{
					stepDeleteService("roll back: delete service", newSvc, maxSlots),
					stepDeleteRevNAT("roll back: delete revNAT", f, newSvc.ID()),
					shared,
				}, stepsRelease(f, fe, true, acquiredKeys)...)
			}
			return append([]step{
				stepWriteBackendsRevNAT("roll back: write backends and revNAT", old),
				shared,
				stepWriteService("roll back: write service", old, maxSlots),
			}, stepsRelease(f, fe, false, acquiredKeys)...)
		}
	}
	return o
}

// deleteOp builds the op that deletes the service of fe (which must still
// have ID want when the op starts, if want is set).
func (s *Supervisor) deleteOp(fe lb.L3n4Addr, want lb.ServiceID, reply func(id lb.ServiceID, err error)) *op {
	o := &op{keys: opKeys(fe, nil)}
	var old *table.Service
	o.finish = func(s *Supervisor, err error) {
		if err != nil {
			what := fe.String()
			if want != 0 {
				what = strconv.Itoa(int(want))
			}
			reply(0, fmt.Errorf("delete service %s: %w", what, err))
			return
		}
		reply(old.ID(), nil)
	}
	o.start = func(s *Supervisor, ctx actor.Context, o *op) {
		id, ok := s.byFE.Get(fe)
		if !ok || (want != 0 && id != want) {
			o.err = ErrServiceNotFound
			return
		}
		old = s.services[id]
		f := old.Family()
		slots := table.SlotCount(old)
		keys := make([]lb.L3n4Addr, len(old.Spec.Backends))
		for i, b := range old.Spec.Backends {
			keys[i] = table.BackendKey(b)
		}
		o.steps = []step{
			stepDeleteService("delete service", old, slots),
			{name: "commit", do: func(s *Supervisor, ctx actor.Context, o *op) {
				s.drop(old)
				// Until released, the op holds the service's references.
				o.svcHolds = []messages.AllocBinding{{Key: fe, ID: uint64(id), Refs: 1}}
				for i, k := range keys {
					o.beHolds = append(o.beHolds, messages.AllocBinding{Key: k, ID: uint64(old.BackendIDs[i]), Refs: 1})
				}
				o.rollback = nil
			}},
		}
		// Release the backends' references, delete the backends no
		// service uses any more, delete the revNAT entry, then let the
		// freed backend IDs and the service ID be reused (one allocator
		// round trip for both).
		var freed [2][]uint32
		o.steps = append(o.steps,
			releaseBackendsStep("release backend IDs", keys, nil, inFamily(f), &freed, func(o *op) { o.beHolds = nil }),
			deleteFreedStep("delete backends", &freed),
			stepDeleteRevNAT("delete revNAT", f, id),
			releaseServiceIDsStep([]lb.L3n4Addr{fe}),
		)
		o.rollback = func() []step {
			return []step{stepWriteService("roll back: write service", old, slots)}
		}
	}
	return o
}

var errInvalidSync = errors.New("invalid sync")
