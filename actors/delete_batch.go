package actors

import (
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// deleteBatchOp deletes the services of several distinct frontends as one
// op, in the order and with the rollback of deleteOp, but with one request
// per child and family at each step for all of them. A frontend without a
// service is answered at once with ErrServiceNotFound; a failure of a map
// write fails (and rolls back) every service still in the op.
func (s *Supervisor) deleteBatchOp(fes []lb.L3n4Addr, reply func(i int, id lb.ServiceID, err error)) *op {
	o := &op{keys: make([]qkey, len(fes))}
	for i, fe := range fes {
		o.keys[i] = feQueue(fe)
	}
	type item struct {
		i   int
		old *table.Service
	}
	var live []item
	started := false
	o.finish = func(s *Supervisor, err error) {
		if !started { // aborted while queued: every frontend gets err
			for i, fe := range fes {
				reply(i, 0, fmt.Errorf("delete service %s: %w", fe, err))
			}
			return
		}
		for _, it := range live {
			if err != nil {
				reply(it.i, 0, fmt.Errorf("delete service %s: %w", it.old.Frontend(), err))
			} else {
				reply(it.i, it.old.ID(), nil)
			}
		}
	}
	o.start = func(s *Supervisor, ctx actor.Context, o *op) {
		started = true
		for i, fe := range fes {
			id, ok := s.byFE.Get(fe)
			if !ok {
				reply(i, 0, fmt.Errorf("delete service %s: %w", fe, ErrServiceNotFound))
				continue
			}
			live = append(live, item{i, s.services[id]})
		}
		if len(live) == 0 {
			return
		}
		// Per family: the service keys (masters first); the backend keys
		// of both (the allocator's reply is sorted by family with v6IDs).
		var svcKeys [2][]maps.ServiceKey
		var beKeys []lb.L3n4Addr
		var rev [2][]uint16
		var rollback [2][]maps.ServiceEntry
		var v6IDs map[lb.BackendID]bool // backend IDs of IPv6 services (IDs are unique across families)
		liveFEs := make([]lb.L3n4Addr, len(live))
		for j, it := range live {
			liveFEs[j] = it.old.Frontend()
			f := famIndex(it.old.Family())
			markV6(&v6IDs, it.old)
			svcKeys[f] = append(svcKeys[f], slotKeys(it.old.Frontend(), 0, table.SlotCount(it.old))...)
			for _, b := range it.old.Spec.Backends {
				beKeys = append(beKeys, table.BackendKey(b))
			}
			rev[f] = append(rev[f], uint16(it.old.ID()))
			rollback[f] = append(rollback[f], serviceWrites(it.old)...)
		}
		var freed [2][]uint32
		o.steps = []step{
			{name: "delete service", do: func(s *Supervisor, ctx actor.Context, o *op) {
				s.applyServices(ctx, o, [2][]maps.ServiceEntry{}, svcKeys)
			}, retry: mapRetries},
			{name: "commit", do: func(s *Supervisor, ctx actor.Context, o *op) {
				for _, it := range live {
					s.drop(it.old)
					// Until released, the op holds the services' references.
					o.svcHolds = append(o.svcHolds, messages.AllocBinding{Key: it.old.Frontend(), ID: uint64(it.old.ID()), Refs: 1})
					for j, b := range it.old.Spec.Backends {
						o.beHolds = append(o.beHolds, messages.AllocBinding{Key: table.BackendKey(b), ID: uint64(it.old.BackendIDs[j]), Refs: 1})
					}
				}
				o.rollback = nil
			}},
			// One request, so that the references held are given back all
			// at once (a restarted allocator counts o.beHolds).
			releaseBackendsStep("release backend IDs", beKeys, nil, inV6(v6IDs), &freed, func(o *op) { o.beHolds = nil }),
			deleteFreedStep("delete backends", &freed),
			{name: "delete revNAT", do: func(s *Supervisor, ctx actor.Context, o *op) {
				id := s.newReqID()
				s.request(ctx, o, ChildRevNAT, id, &messages.RevNATApply{ReqID: id, Deletes4: rev[0], Deletes6: rev[1]}, applied)
			}, retry: mapRetries},
			releaseServiceIDsStep(liveFEs),
		}
		o.rollback = func() []step {
			return []step{{name: "roll back: write service", do: func(s *Supervisor, ctx actor.Context, o *op) {
				s.applyServices(ctx, o, rollback, [2][]maps.ServiceKey{})
			}, retry: mapRetries}}
		}
	}
	return o
}
