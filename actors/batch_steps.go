package actors

import (
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// Helpers of the batch ops (createBatchOp, deleteBatchOp), which keep what
// they write per IP family: index 0 IPv4, 1 IPv6.

var families = [2]maps.Family{maps.IPv4, maps.IPv6}

func famIndex(f maps.Family) int {
	if f == maps.IPv6 {
		return 1
	}
	return 0
}

// applyServices sends each family's service map owner its writes and
// deletes (none when both are empty).
func (s *Supervisor) applyServices(ctx actor.Context, o *op, writes [2][]maps.ServiceEntry, deletes [2][]maps.ServiceKey) {
	for f := range families {
		if len(writes[f]) > 0 || len(deletes[f]) > 0 {
			id := s.newReqID()
			s.request(ctx, o, svcChild(families[f]), id, &messages.ServiceApply{ReqID: id, Writes: writes[f], Deletes: deletes[f]}, applied)
		}
	}
}

// applyBackends is applyServices for the backend maps.
func (s *Supervisor) applyBackends(ctx actor.Context, o *op, writes [2][]maps.BackendEntry, deletes [2][]uint32) {
	for f := range families {
		if len(writes[f]) > 0 || len(deletes[f]) > 0 {
			id := s.newReqID()
			s.request(ctx, o, beChild(families[f]), id, &messages.BackendApply{ReqID: id, Writes: writes[f], Deletes: deletes[f]}, applied)
		}
	}
}

// releaseBackendsStep gives back the references to keys, then the service
// IDs of fes, in one allocator request, and sorts the freed backend IDs
// into *freed by family (famOf); o.freed holds them until unholdStep.
// clear drops the holds the reply gives back.
func releaseBackendsStep(name string, keys, fes []lb.L3n4Addr, famOf func(lb.BackendID) int, freed *[2][]uint32, clear func(o *op)) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		if len(keys) == 0 && len(fes) == 0 {
			return
		}
		id := s.newReqID()
		s.request(ctx, o, ChildAllocator, id, &messages.AllocRelease{ReqID: id, Backends: keys, Frontends: fes}, func(r any) error {
			rep := r.(*messages.AllocReleased)
			for _, b := range rep.FreedBackends {
				f := famOf(b)
				freed[f] = append(freed[f], uint32(b))
			}
			o.freed = rep.FreedBackends
			clear(o)
			return rep.Err
		})
	}}
}

// inFamily is famOf for IDs that all belong to family f.
func inFamily(f maps.Family) func(lb.BackendID) int {
	i := famIndex(f)
	return func(lb.BackendID) int { return i }
}

// markV6 adds the backend IDs of svc to *v6 if svc is an IPv6 service.
func markV6(v6 *map[lb.BackendID]bool, svc *table.Service) {
	if svc.Family() != maps.IPv6 {
		return
	}
	if *v6 == nil {
		*v6 = map[lb.BackendID]bool{}
	}
	for _, b := range svc.BackendIDs {
		(*v6)[b] = true
	}
}

// inV6 is famOf for IDs of both families: those in v6 are IPv6 (backend
// IDs are unique across families).
func inV6(v6 map[lb.BackendID]bool) func(lb.BackendID) int {
	return func(b lb.BackendID) int {
		if v6[b] {
			return 1
		}
		return 0
	}
}

// deleteFreedStep deletes the backends released before it.
func deleteFreedStep(name string, freed *[2][]uint32) step {
	return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
		s.applyBackends(ctx, o, [2][]maps.BackendEntry{}, *freed)
	}, retry: mapRetries}
}

// releaseServiceIDsStep lets the backend IDs the op freed be reused and
// gives the service IDs of fes back: one allocator round trip, the last
// step of a delete.
func releaseServiceIDsStep(fes []lb.L3n4Addr) step {
	return step{name: "release service ID", do: func(s *Supervisor, ctx actor.Context, o *op) {
		s.unholdStep(ctx, o)
		id := s.newReqID()
		s.request(ctx, o, ChildAllocator, id, &messages.AllocRelease{ReqID: id, Frontends: fes}, func(r any) error {
			o.svcHolds = nil
			return r.(*messages.AllocReleased).Err
		})
	}}
}

// unholdStep lets the backend IDs the op freed be reused (a step's do).
func (s *Supervisor) unholdStep(ctx actor.Context, o *op) {
	if len(o.freed) == 0 {
		return
	}
	id := s.newReqID()
	s.request(ctx, o, ChildAllocator, id, &messages.AllocUnhold{ReqID: id, BackendIDs: o.freed}, func(r any) error {
		o.freed = nil
		return done(r)
	})
}
