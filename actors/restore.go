package actors

import (
	"fmt"
	"sort"

	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/sirupsen/logrus"
)

// startRestore rebuilds the table from the map owners' mirrors (which they
// loaded from the pinned maps when they started), applies the repairs,
// restores the allocator, then serves.
func (s *Supervisor) startRestore(ctx actor.Context) {
	var d table.Dump
	var r *table.Restored
	o := &op{}
	dump := func(child string, into func(any)) step {
		return step{name: "dump " + child, do: func(s *Supervisor, ctx actor.Context, o *op) {
			id := s.newReqID()
			s.request(ctx, o, child, id, &messages.MapDump{ReqID: id}, func(rep any) error {
				into(rep)
				return nil
			})
		}}
	}
	o.steps = []step{
		{name: "dump maps", do: func(s *Supervisor, ctx actor.Context, o *op) {
			for _, st := range []step{
				dump(ChildService4, func(r any) { d.Services4 = r.(*svcDumpedT).Entries }),
				dump(ChildService6, func(r any) { d.Services6 = r.(*svcDumpedT).Entries }),
				dump(ChildBackend4, func(r any) { d.Backends4 = r.(*beDumpedT).Entries }),
				dump(ChildBackend6, func(r any) { d.Backends6 = r.(*beDumpedT).Entries }),
				dump(ChildRevNAT, func(r any) { d.RevNAT4, d.RevNAT6 = r.(*revDumpedT).V4, r.(*revDumpedT).V6 }),
			} {
				st.do(s, ctx, o)
			}
		}},
		{name: "rebuild", do: func(s *Supervisor, ctx actor.Context, o *op) {
			if s.cfg.Restore {
				r = table.Rebuild(d)
			} else {
				r = flushAll(d)
			}
			o.steps = append(o.steps, fixSteps(r, maps.IPv4)...)
			o.steps = append(o.steps, fixSteps(r, maps.IPv6)...)
			o.steps = append(o.steps, step{name: "restore allocator", do: func(s *Supervisor, ctx actor.Context, o *op) {
				s.install(r)
				// The engine serves without waiting for the allocator: every
				// request to it queues behind this snapshot. Reads are
				// answered from the table at once.
				s.restoreAllocator(ctx, func(s *Supervisor, err error) {
					if !s.stopping {
						s.failServing(fmt.Errorf("restore: allocator: %w", err))
					}
				})
			}})
		}},
	}
	o.finish = func(s *Supervisor, err error) {
		if err != nil {
			s.readyErr = fmt.Errorf("restore: %w", err)
			s.log.WithError(err).Error("restore from the pinned maps failed")
			s.cfg.OnRestoreFailed(s.readyErr)
		} else {
			s.ready = true
			s.recordRestore(r)
			s.cfg.OnUp()
		}
		deferred := s.deferred
		s.deferred = nil
		for _, m := range deferred {
			s.handleEdge(ctx, m)
		}
	}
	s.begin(ctx, o)
}

// failServing stops serving after a failure found once serving began
// (the allocator refused the restored IDs: a bug, or maps changed under
// us). Later calls fail with err; restarting the engine restores again.
func (s *Supervisor) failServing(err error) {
	s.log.WithError(err).Error("restore from the pinned maps failed")
	s.ready = false
	s.readyErr = err
	s.abortAll(err) // ops that came after the snapshot: none has written yet
	s.cfg.OnDown()
	s.cfg.OnRestoreFailed(err)
}

// install makes the restored services the table.
func (s *Supervisor) install(r *table.Restored) {
	if len(s.services) == 0 {
		n := 0
		for _, svc := range r.Services {
			n += len(svc.BackendIDs)
		}
		s.services = make(map[lb.ServiceID]*table.Service, len(r.Services))
		s.byFE = packedmap.New[lb.L3n4Addr, lb.ServiceID](len(r.Services), frontendPacker{})
		s.users = packedmap.New[backendKey, users](n, backendPacker{})
	}
	for _, svc := range r.Services {
		s.put(svc)
	}
}

func (s *Supervisor) recordRestore(r *table.Restored) {
	st := messages.RestoreStats{
		Services:      len(r.Services),
		OrphanRevNAT:  len(r.OrphanRevNAT),
		Repairs:       len(r.Repairs),
		RepairsByKind: map[string]int{},
		Writes:        r.Fixes4.Writes() + r.Fixes6.Writes(),
	}
	bes := map[lb.BackendID]bool{}
	for _, svc := range r.Services {
		for _, id := range svc.BackendIDs {
			bes[id] = true
		}
	}
	st.Backends = len(bes)
	for _, rep := range r.Repairs {
		st.RepairsByKind[string(rep.Kind)]++
		s.log.WithFields(logrus.Fields{
			"repair": rep.Kind, "family": rep.Family.String(), "serviceID": rep.ServiceID,
			"frontend": rep.Frontend, "backendID": rep.BackendID,
		}).Warn("restore repaired the maps: " + rep.Detail)
	}
	s.restore = st
	s.log.WithFields(logrus.Fields{"services": st.Services, "backends": st.Backends, "repairs": st.Repairs, "writes": st.Writes}).Info("restored from pinned maps")
}

// fixSteps applies one family's fixes in the safe order.
func fixSteps(r *table.Restored, f maps.Family) []step {
	fx := r.Fixes(f)
	if fx.Empty() {
		return nil
	}
	svc := func(name string, w []maps.ServiceEntry, d []maps.ServiceKey) step {
		return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
			if len(w) == 0 && len(d) == 0 {
				return
			}
			id := s.newReqID()
			s.request(ctx, o, svcChild(f), id, &messages.ServiceApply{ReqID: id, Writes: w, Deletes: d}, applied)
		}, retry: mapRetries}
	}
	rev := func(name string, w []maps.RevNATEntry, d []uint16) step {
		return step{name: name, do: func(s *Supervisor, ctx actor.Context, o *op) {
			if len(w) == 0 && len(d) == 0 {
				return
			}
			id := s.newReqID()
			m := &messages.RevNATApply{ReqID: id, Writes: w}
			if f == maps.IPv6 {
				m.Deletes6 = d
			} else {
				m.Deletes4 = d
			}
			s.request(ctx, o, ChildRevNAT, id, m, applied)
		}, retry: mapRetries}
	}
	return []step{
		rev("repair: write revNAT", fx.RevNATWrites, nil),
		svc("repair: delete masters", nil, fx.MasterDeletes),
		svc("repair: write slots", fx.SlotWrites, nil),
		svc("repair: write masters", fx.MasterWrites, nil),
		svc("repair: delete slots", nil, fx.SlotDeletes),
		{name: "repair: delete backends", do: func(s *Supervisor, ctx actor.Context, o *op) {
			if len(fx.BackendDeletes) == 0 {
				return
			}
			id := s.newReqID()
			s.request(ctx, o, beChild(f), id, &messages.BackendApply{ReqID: id, Deletes: fx.BackendDeletes}, applied)
		}, retry: mapRetries},
		rev("repair: delete revNAT", nil, fx.RevNATDeletes),
	}
}

// flushAll is the "restore off" plan: every entry of every map is deleted.
func flushAll(d table.Dump) *table.Restored {
	r := &table.Restored{}
	for _, fam := range []struct {
		f   maps.Family
		svc []maps.ServiceEntry
		be  []maps.BackendEntry
		rev []maps.RevNATEntry
	}{{maps.IPv4, d.Services4, d.Backends4, d.RevNAT4}, {maps.IPv6, d.Services6, d.Backends6, d.RevNAT6}} {
		fx := r.Fixes(fam.f)
		for _, e := range fam.svc {
			if e.Key.Slot == 0 {
				fx.MasterDeletes = append(fx.MasterDeletes, e.Key)
			} else {
				fx.SlotDeletes = append(fx.SlotDeletes, e.Key)
			}
		}
		for _, e := range fam.be {
			fx.BackendDeletes = append(fx.BackendDeletes, e.ID)
		}
		for _, e := range fam.rev {
			fx.RevNATDeletes = append(fx.RevNATDeletes, e.ID)
		}
		sort.Slice(fx.BackendDeletes, func(i, j int) bool { return fx.BackendDeletes[i] < fx.BackendDeletes[j] })
	}
	return r
}
