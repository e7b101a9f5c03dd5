package actors

import (
	"errors"
	"fmt"
	"slices"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// handleEdge serves the requests of the library API. Before restore has
// finished they wait (in arrival order); after a failed restore they fail.
// (The library learns readiness from Config.OnUp, not by asking.)
func (s *Supervisor) handleEdge(ctx actor.Context, msg any) {
	if !s.ready {
		if s.readyErr != nil {
			s.failEdge(msg, s.readyErr)
			return
		}
		s.deferred = append(s.deferred, msg)
		return
	}
	switch m := msg.(type) {
	case *messages.Upsert:
		if err := m.Service.Validate(); err != nil {
			m.Reply <- messages.UpsertReply{Err: fmt.Errorf("upsert service: %w", err)}
			return
		}
		s.run(ctx, s.upsertOp(m.Service, func(id lb.ServiceID, created bool, err error) {
			m.Reply <- messages.UpsertReply{ID: id, Created: created, Err: err}
		}))
	case *messages.UpsertBatch:
		s.upsertBatch(ctx, m)
	case *messages.DeleteBatch:
		s.deleteBatch(ctx, m)
	case *messages.Delete:
		svc, ok := s.services[m.ID]
		if !ok {
			m.Reply <- messages.DeleteReply{Err: fmt.Errorf("delete service %d: %w", m.ID, ErrServiceNotFound)}
			return
		}
		s.run(ctx, s.deleteOp(svc.Frontend(), m.ID, func(id lb.ServiceID, err error) {
			m.Reply <- messages.DeleteReply{ID: id, Err: err}
		}))
	case *messages.DeleteByFrontend:
		s.run(ctx, s.deleteOp(m.Frontend, 0, func(id lb.ServiceID, err error) {
			m.Reply <- messages.DeleteReply{ID: id, Err: err}
		}))
	case *messages.Get:
		svc, ok := s.services[m.ID]
		if !ok {
			m.Reply <- messages.GetReply{Err: fmt.Errorf("get service %d: %w", m.ID, ErrServiceNotFound)}
			return
		}
		m.Reply <- messages.GetReply{Service: svc.Spec.DeepCopy()}
	case *messages.List:
		m.Reply <- messages.ListReply{Services: s.list()}
	case *messages.Sync:
		s.sync(ctx, m)
	case *messages.RevNATAdd:
		s.revNATAdd(ctx, m)
	case *messages.RevNATDelete:
		s.revNATDelete(ctx, m.ID, func(err error) { m.Reply <- messages.RevNATReply{Err: err} })
	case *messages.RevNATDeleteAll:
		ids := make([]lb.ServiceID, 0, len(s.standalone))
		for id := range s.standalone {
			ids = append(ids, id)
		}
		s.fanOut(len(ids), func(done func(error)) {
			for _, id := range ids {
				s.revNATDelete(ctx, id, done)
			}
		}, func(err error) { m.Reply <- messages.RevNATReply{Err: err} })
	case *messages.RevNATGet:
		for _, e := range s.revNATs() {
			if e.ID == m.ID {
				m.Reply <- messages.RevNATReply{Entries: []messages.RevNAT{e}}
				return
			}
		}
		m.Reply <- messages.RevNATReply{Err: fmt.Errorf("get revNAT %d: %w", m.ID, ErrRevNATNotFound)}
	case *messages.RevNATDump:
		m.Reply <- messages.RevNATReply{Entries: s.revNATs()}
	case *messages.Stats:
		m.Reply <- s.stats()
	}
}

func (s *Supervisor) failEdge(msg any, err error) {
	switch m := msg.(type) {
	case *messages.Upsert:
		m.Reply <- messages.UpsertReply{Err: err}
	case *messages.Delete:
		m.Reply <- messages.DeleteReply{Err: err}
	case *messages.DeleteByFrontend:
		m.Reply <- messages.DeleteReply{Err: err}
	case *messages.Get:
		m.Reply <- messages.GetReply{Err: err}
	case *messages.List:
		m.Reply <- messages.ListReply{Err: err}
	case *messages.Sync:
		m.Reply <- messages.SyncReply{Err: err}
	case *messages.UpsertBatch:
		r := messages.UpsertBatchReply{Results: make([]messages.UpsertReply, len(m.Services))}
		for i := range r.Results {
			r.Results[i].Err = err
		}
		m.Reply <- r
	case *messages.DeleteBatch:
		r := messages.DeleteBatchReply{Results: make([]messages.DeleteReply, len(m.Frontends))}
		for i := range r.Results {
			r.Results[i].Err = err
		}
		m.Reply <- r
	case *messages.RevNATAdd:
		m.Reply <- messages.RevNATReply{Err: err}
	case *messages.RevNATDelete:
		m.Reply <- messages.RevNATReply{Err: err}
	case *messages.RevNATDeleteAll:
		m.Reply <- messages.RevNATReply{Err: err}
	case *messages.RevNATGet:
		m.Reply <- messages.RevNATReply{Err: err}
	case *messages.RevNATDump:
		m.Reply <- messages.RevNATReply{Err: err}
	case *messages.Stats:
		r := s.stats()
		m.Reply <- r
	}
}

func (s *Supervisor) list() []*lb.Service {
	ids := make([]lb.ServiceID, 0, len(s.services))
	for id := range s.services {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*lb.Service, len(ids))
	for i, id := range ids {
		out[i] = s.services[id].Spec.DeepCopy()
	}
	return out
}

func (s *Supervisor) revNATs() []messages.RevNAT {
	var out []messages.RevNAT
	for id, svc := range s.services {
		fe := svc.Frontend()
		out = append(out, messages.RevNAT{ID: id, Address: lb.L3n4Addr{Addr: fe.Addr, Port: fe.Port}, Service: true})
	}
	for id, a := range s.standalone {
		out = append(out, messages.RevNAT{ID: id, Address: a})
	}
	slices.SortFunc(out, func(a, b messages.RevNAT) int { return int(a.ID) - int(b.ID) })
	return out
}

func (s *Supervisor) stats() messages.StatsReply {
	bes := map[lb.BackendID]bool{}
	for _, svc := range s.services {
		for _, id := range svc.BackendIDs {
			bes[id] = true
		}
	}
	steps := make(map[string]messages.StepTiming, len(s.steps))
	for k, v := range s.steps {
		steps[k] = *v
	}
	restarts := make(map[string]int, len(s.restarts))
	for k, v := range s.restarts {
		restarts[k] = v
	}
	return messages.StatsReply{
		Services: len(s.services), Backends: len(bes), RevNAT: len(s.services) + len(s.standalone),
		ActorRestarts: restarts, Restore: s.restore, Ready: s.ready, OpsInFlight: s.inflight, RequestsResent: s.resent,
		RequestsSent: s.requestsSent, ChildMessages: s.childMessages, Steps: steps,
	}
}

// fanOut starts n sub-operations and calls finish once all have reported.
func (s *Supervisor) fanOut(n int, start func(done func(error)), finish func(error)) {
	if n == 0 {
		finish(nil)
		return
	}
	var errs []error
	left := n
	start(func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
		left--
		if left == 0 {
			finish(errors.Join(errs...))
		}
	})
}

// sync validates the whole desired set, then, in this one Receive, queues
// an upsert for each desired service and a delete for every other
// frontend known or in flight, and for every standalone revNAT entry. Calls
// that arrive later are queued behind these, so nothing they add is
// deleted by this sync.
func (s *Supervisor) sync(ctx actor.Context, m *messages.Sync) {
	desired := map[lb.L3n4Addr]int{}
	ids := map[lb.ServiceID]int{}
	for i, svc := range m.Desired {
		if err := svc.Validate(); err != nil {
			m.Reply <- messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w", i, err)}
			return
		}
		fe := svc.Frontend.L3n4Addr
		if j, dup := desired[fe]; dup {
			m.Reply <- messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w: frontend %s also in service %d", i, errInvalidSync, fe, j)}
			return
		}
		desired[fe] = i
		if id := svc.Frontend.ID; id != 0 {
			if j, dup := ids[id]; dup {
				m.Reply <- messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w: service ID %d also in service %d", i, errInvalidSync, id, j)}
				return
			}
			ids[id] = i
		}
	}
	var stale []lb.L3n4Addr
	for fe := range s.byFE.All {
		if _, ok := desired[fe]; !ok {
			stale = append(stale, fe)
		}
	}
	for key := range s.queues {
		if key.backend {
			continue
		}
		fe := key.l3n4()
		if _, ok := desired[fe]; !ok && !slices.Contains(stale, fe) {
			if _, known := s.byFE.Get(fe); !known {
				stale = append(stale, fe)
			}
		}
	}
	var revs []lb.ServiceID
	for id := range s.standalone {
		revs = append(revs, id)
	}
	upserted, deleted := 0, 0
	s.fanOut(len(m.Desired)+len(stale)+len(revs), func(done func(error)) {
		for _, svc := range m.Desired {
			s.run(ctx, s.upsertOp(svc, func(_ lb.ServiceID, _ bool, err error) {
				if err == nil {
					upserted++
				}
				done(err)
			}))
		}
		for _, fe := range stale {
			s.run(ctx, s.deleteOp(fe, 0, func(_ lb.ServiceID, err error) {
				if errors.Is(err, ErrServiceNotFound) {
					err = nil // an in-flight create that failed: nothing to delete
				} else if err == nil {
					deleted++
				}
				done(err)
			}))
		}
		for _, id := range revs {
			s.revNATDelete(ctx, id, done)
		}
	}, func(err error) {
		if err != nil {
			err = fmt.Errorf("sync: %w", err)
		}
		m.Reply <- messages.SyncReply{Upserted: upserted, Deleted: deleted, Err: err}
	})
}

// upsertBatch starts the upserts of a batch, in order, in this one Receive
// (so their requests share the outbox), and answers when all have. Runs of
// new services (a frontend without a service or a queued op, no backend in
// two of them) go as one op each; the others as one upsert op each.
func (s *Supervisor) upsertBatch(ctx actor.Context, m *messages.UpsertBatch) {
	r := messages.UpsertBatchReply{Results: make([]messages.UpsertReply, len(m.Services))}
	s.fanOut(len(m.Services), func(done func(error)) {
		var run []*lb.Service
		var runIdx []int
		taken := map[qkey]bool{} // queue keys of the run
		flush := func() {
			if len(run) == 0 {
				return
			}
			idx := runIdx
			s.run(ctx, s.createBatchOp(run, func(i int, id lb.ServiceID, created bool, err error) {
				r.Results[idx[i]] = messages.UpsertReply{ID: id, Created: created, Err: err}
				done(nil)
			}))
			run, runIdx = nil, nil
			clear(taken)
		}
		for i, svc := range m.Services {
			if err := svc.Validate(); err != nil {
				r.Results[i].Err = fmt.Errorf("upsert service %d of the batch: %w", i, err)
				done(nil)
				continue
			}
			fe := svc.Frontend.L3n4Addr
			keys := opKeys(fe, svc.Backends)
			for _, k := range keys {
				if taken[k] { // shares a frontend or backend with the run: the run goes first
					flush()
					break
				}
			}
			_, exists := s.byFE.Get(fe)
			_, queued := s.queues[feQueue(fe)] // a flushed run counts
			if !exists && !queued {
				for _, k := range keys {
					taken[k] = true
				}
				run, runIdx = append(run, svc), append(runIdx, i)
				continue
			}
			flush()
			s.run(ctx, s.upsertOp(svc, func(id lb.ServiceID, created bool, err error) {
				r.Results[i] = messages.UpsertReply{ID: id, Created: created, Err: err}
				done(nil)
			}))
		}
		flush()
	}, func(error) { m.Reply <- r })
}

// deleteBatch deletes the services of the frontends in batch ops: runs of
// distinct frontends, each one op (a repeated frontend starts the next run,
// which queues behind the first on that frontend, so the order holds).
func (s *Supervisor) deleteBatch(ctx actor.Context, m *messages.DeleteBatch) {
	r := messages.DeleteBatchReply{Results: make([]messages.DeleteReply, len(m.Frontends))}
	s.fanOut(len(m.Frontends), func(done func(error)) {
		for start := 0; start < len(m.Frontends); {
			seen := map[lb.L3n4Addr]bool{}
			end := start
			for end < len(m.Frontends) && !seen[m.Frontends[end]] {
				seen[m.Frontends[end]] = true
				end++
			}
			base := start
			s.run(ctx, s.deleteBatchOp(m.Frontends[start:end], func(i int, id lb.ServiceID, err error) {
				r.Results[base+i] = messages.DeleteReply{ID: id, Err: err}
				done(nil)
			}))
			start = end
		}
	}, func(error) { m.Reply <- r })
}

func (s *Supervisor) revNATAdd(ctx actor.Context, m *messages.RevNATAdd) {
	e := m.Entry
	addr := lb.L3n4Addr{Addr: e.Address.Addr, Port: e.Address.Port}
	if e.ID == 0 {
		m.Reply <- messages.RevNATReply{Err: fmt.Errorf("add revNAT: invalid id \"0\": service ID must be between 1 and 65535")}
		return
	}
	if !addr.Addr.IsValid() || addr.Addr.Zone() != "" || addr.Port == 0 {
		m.Reply <- messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: invalid address %q: want IP:PORT with a port between 1 and 65535", e.ID, addr.AddrPort())}
		return
	}
	if svc, ok := s.services[e.ID]; ok {
		m.Reply <- messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: %w %s", e.ID, ErrRevNATOwned, svc.Frontend())}
		return
	}
	if cur, ok := s.standalone[e.ID]; ok && cur == addr {
		m.Reply <- messages.RevNATReply{Entries: []messages.RevNAT{{ID: e.ID, Address: addr}}}
		return
	}
	o := &op{finish: func(s *Supervisor, err error) {
		if err != nil {
			m.Reply <- messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: %w", e.ID, err)}
			return
		}
		s.standalone[e.ID] = addr
		m.Reply <- messages.RevNATReply{Entries: []messages.RevNAT{{ID: e.ID, Address: addr}}}
	}}
	o.steps = []step{
		{name: "reserve ID", do: func(s *Supervisor, ctx actor.Context, o *op) {
			if _, ok := s.standalone[e.ID]; ok {
				return // re-pointing an existing standalone entry
			}
			id := s.newReqID()
			s.request(ctx, o, ChildAllocator, id, &messages.AllocReserve{ReqID: id, Key: addr, ID: e.ID}, done)
		}},
		{name: "write revNAT", do: func(s *Supervisor, ctx actor.Context, o *op) {
			id := s.newReqID()
			s.request(ctx, o, ChildRevNAT, id, &messages.RevNATApply{ReqID: id, Writes: []maps.RevNATEntry{{
				ID: uint16(e.ID), Value: maps.RevNATValue{Address: addr.Addr, Port: addr.Port},
			}}}, applied)
		}},
	}
	s.begin(ctx, o)
}

func (s *Supervisor) revNATDelete(ctx actor.Context, sid lb.ServiceID, reply func(error)) {
	if svc, ok := s.services[sid]; ok {
		reply(fmt.Errorf("delete revNAT %d: %w %s (delete the service)", sid, ErrRevNATOwned, svc.Frontend()))
		return
	}
	addr, ok := s.standalone[sid]
	if !ok {
		reply(fmt.Errorf("delete revNAT %d: %w", sid, ErrRevNATNotFound))
		return
	}
	o := &op{finish: func(s *Supervisor, err error) {
		if err != nil {
			reply(fmt.Errorf("delete revNAT %d: %w", sid, err))
			return
		}
		reply(nil)
	}}
	o.steps = []step{
		stepDeleteRevNAT("delete revNAT", table.FamilyOf(addr), sid),
		{name: "release ID", do: func(s *Supervisor, ctx actor.Context, o *op) {
			delete(s.standalone, sid)
			id := s.newReqID()
			s.request(ctx, o, ChildAllocator, id, &messages.AllocDrop{ReqID: id, Key: addr}, done)
		}},
	}
	s.begin(ctx, o)
}
