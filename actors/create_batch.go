package actors

import (
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// createBatchOp creates the services of specs (validated, frontends
// distinct and without a service or an op queued on them, no backend in
// two of them) as one op: the same steps, order and rollback as upsertOp
// for a new service, with one request per child and family at each step
// for all of them (the IDs are acquired per service). A service the
// allocator refuses fails alone; a failure of a map write fails (and rolls
// back) every service still in the op.
func (s *Supervisor) createBatchOp(specs []*lb.Service, reply func(i int, id lb.ServiceID, created bool, err error)) *op {
	o := &op{}
	for _, spec := range specs {
		o.keys = append(o.keys, opKeys(spec.Frontend.L3n4Addr, spec.Backends)...)
	}
	type item struct {
		i             int
		svc           *table.Service
		acquire       []lb.L3n4Addr
		restoreShared []maps.BackendEntry
		err           error // this service failed alone
		acquired      bool
	}
	items := make([]*item, len(specs)) // nil until the op starts
	o.finish = func(s *Supervisor, err error) {
		for i, it := range items {
			e := err // the op's (aborted while queued: every service's)
			if it != nil && it.err != nil {
				e = it.err // this service's alone
			}
			if e != nil {
				reply(i, 0, false, fmt.Errorf("upsert service %s: %w", specs[i].Frontend.L3n4Addr, e))
				continue
			}
			reply(i, it.svc.ID(), true, nil)
		}
	}
	// live yields the services still in the op.
	live := func(yield func(*item) bool) {
		for _, it := range items {
			if it.err == nil && !yield(it) {
				return
			}
		}
	}
	o.start = func(s *Supervisor, ctx actor.Context, o *op) {
		for i, spec := range specs {
			it := &item{i: i}
			items[i] = it
			it.err = s.planCreate(spec, &it.svc, &it.acquire, &it.restoreShared)
		}
		o.steps = []step{
			{name: "acquire IDs", do: func(s *Supervisor, ctx actor.Context, o *op) {
				for it := range live {
					id := s.newReqID()
					s.request(ctx, o, ChildAllocator, id, &messages.AllocAcquire{
						ReqID: id, Service: true, Frontend: it.svc.Frontend(), WantID: specs[it.i].Frontend.ID, Backends: it.acquire,
					}, func(r any) error {
						rep := r.(*messages.AllocAcquired)
						if rep.Err != nil {
							it.err = rep.Err // this service alone; the allocator took nothing for it
							return nil
						}
						it.acquired = true
						it.svc.Spec.Frontend.ID = rep.ServiceID
						copy(it.svc.BackendIDs, rep.BackendIDs)
						o.svcHolds = append(o.svcHolds, messages.AllocBinding{Key: it.svc.Frontend(), ID: uint64(rep.ServiceID), Refs: 1})
						for j, k := range it.acquire {
							o.beHolds = append(o.beHolds, messages.AllocBinding{Key: k, ID: uint64(rep.BackendIDs[j]), Refs: 1})
						}
						return nil
					})
				}
			}},
			{name: "write backends and revNAT", do: func(s *Supervisor, ctx actor.Context, o *op) {
				var bes [2][]maps.BackendEntry
				var revs []maps.RevNATEntry
				for it := range live {
					f := famIndex(it.svc.Family())
					bes[f] = append(bes[f], table.BackendEntries(it.svc)...)
					revs = append(revs, table.RevNAT(it.svc))
				}
				s.applyBackends(ctx, o, bes, [2][]uint32{})
				if len(revs) > 0 {
					id := s.newReqID()
					s.request(ctx, o, ChildRevNAT, id, &messages.RevNATApply{ReqID: id, Writes: revs}, applied)
				}
			}, retry: mapRetries},
			{name: "write service", do: func(s *Supervisor, ctx actor.Context, o *op) {
				var ws [2][]maps.ServiceEntry
				for it := range live {
					f := famIndex(it.svc.Family())
					ws[f] = append(ws[f], serviceWrites(it.svc)...)
				}
				s.applyServices(ctx, o, ws, [2][]maps.ServiceKey{})
			}, retry: mapRetries},
			{name: "commit", do: func(s *Supervisor, ctx actor.Context, o *op) {
				for it := range live {
					s.commit(ctx, it.svc)
				}
				o.svcHolds, o.beHolds = nil, nil
				o.rollback = nil // past the point of no return
			}},
		}
		o.rollback = func() []step {
			// Undo what the services that acquired their IDs may have
			// written: masters and slots, revNAT entries, the states of
			// backends shared with other services; then give the IDs back.
			var svcKeys [2][]maps.ServiceKey
			var rev [2][]uint16
			var shared [2][]maps.BackendEntry
			var fes, keys []lb.L3n4Addr
			var v6IDs map[lb.BackendID]bool // IDs are unique across families
			for it := range live {
				if !it.acquired {
					continue
				}
				f := famIndex(it.svc.Family())
				svcKeys[f] = append(svcKeys[f], slotKeys(it.svc.Frontend(), 0, len(it.svc.Spec.Backends))...)
				rev[f] = append(rev[f], uint16(it.svc.ID()))
				shared[f] = append(shared[f], it.restoreShared...)
				fes = append(fes, it.svc.Frontend())
				keys = append(keys, it.acquire...)
				markV6(&v6IDs, it.svc)
			}
			if len(fes) == 0 {
				return nil // nothing was acquired, so nothing was written
			}
			var freed [2][]uint32
			return []step{
				{name: "roll back: delete services", do: func(s *Supervisor, ctx actor.Context, o *op) {
					s.applyServices(ctx, o, [2][]maps.ServiceEntry{}, svcKeys)
				}, retry: mapRetries},
				{name: "roll back: delete revNAT and restore shared backends", do: func(s *Supervisor, ctx actor.Context, o *op) {
					id := s.newReqID()
					s.request(ctx, o, ChildRevNAT, id, &messages.RevNATApply{ReqID: id, Deletes4: rev[0], Deletes6: rev[1]}, applied)
					s.applyBackends(ctx, o, shared, [2][]uint32{})
				}, retry: mapRetries},
				releaseBackendsStep("roll back: release IDs", keys, fes, inV6(v6IDs), &freed, func(o *op) { o.svcHolds, o.beHolds = nil, nil }),
				deleteFreedStep("roll back: delete backends", &freed),
				{name: "roll back: reuse backend IDs", do: (*Supervisor).unholdStep},
			}
		}
	}
	return o
}

// planCreate checks a new service against the table and prepares it as
// upsertOp does for a frontend without a service: the ID it asks for is
// free here, every backend state change is allowed; it returns the
// service to write, the backends to acquire IDs for (all of them) and the
// entries that restore the states of backends shared with other services.
func (s *Supervisor) planCreate(spec *lb.Service, out **table.Service, acquire *[]lb.L3n4Addr, restoreShared *[]maps.BackendEntry) error {
	fe := spec.Frontend.L3n4Addr
	if id, ok := s.byFE.Get(fe); ok { // the batch only takes frontends nothing else may create first
		return fmt.Errorf("%w: frontend %s is already registered with ID %d", ErrFrontendInUse, fe, id)
	}
	if err := s.checkWantedID(fe, spec.Frontend.ID); err != nil {
		return err
	}
	svc := newTableService(spec)
	keys := make([]lb.L3n4Addr, len(svc.Spec.Backends))
	for i, b := range svc.Spec.Backends {
		keys[i] = table.BackendKey(b)
		if err := s.checkSharedState(b, keys[i], false, restoreShared); err != nil {
			return err
		}
	}
	*out, *acquire = svc, keys
	return nil
}
