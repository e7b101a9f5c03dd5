package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// handleCall serves a call of the library API. Before restore has
// finished calls wait (in arrival order); after a failed restore they
// fail.
func (c *Core) handleCall(call messages.Call) {
	if !c.ready {
		if c.readyErr != nil {
			if m, ok := call.(*messages.Stats); ok {
				c.answer(m, c.stats())
				return
			}
			c.answer(call, call.Failed(c.readyErr))
			return
		}
		c.deferred = append(c.deferred, call)
		return
	}
	switch m := call.(type) {
	case *messages.Upsert:
		if !m.Take() {
			c.answer(m, messages.UpsertReply{Err: fmt.Errorf("upsert service: %w", ErrCallWithdrawn)})
			return
		}
		u := c.ops.takeUpsert()
		spec := u.own(m.Service) // the caller's service is read here only
		m.Release()
		if err := spec.Validate(); err != nil {
			c.ops.giveBack(u)
			c.answer(m, messages.UpsertReply{Err: fmt.Errorf("upsert service: %w", err)})
			return
		}
		c.interactive()
		c.run(c.singleUpsertOp(u, m, spec))
	case *messages.UpsertBatch:
		c.upsertBatch(m)
	case *messages.Delete:
		s := c.services.stored(m.ID)
		if s == nil || (m.Frontend != (lb.L3n4Addr{}) && s.frontend() != m.Frontend) {
			c.answer(m, messages.DeleteReply{Err: fmt.Errorf("delete service %d: %w", m.ID, ErrServiceNotFound)})
			return
		}
		c.interactive()
		c.run(c.singleDeleteOp(m, deleteItem{fe: s.frontend(), want: m.ID, as: m.As}))
	case *messages.DeleteByFrontend:
		c.interactive()
		c.run(c.singleDeleteOp(m, deleteItem{fe: m.Frontend, as: m.As}))
	case *messages.DeleteBatch:
		c.deleteBatch(m)
	case *messages.Get:
		spec := c.services.spec(m.ID)
		if spec == nil {
			c.answer(m, messages.GetReply{Err: fmt.Errorf("get service %d: %w", m.ID, ErrServiceNotFound)})
			return
		}
		c.answer(m, messages.GetReply{Service: spec})
	case *messages.List:
		c.answer(m, messages.ListReply{Services: c.list()})
	case *messages.Sync:
		c.sync(m)
	case *messages.Reconcile:
		c.reconcile(m)
	case *messages.RevNATAdd:
		c.revNATAdd(m)
	case *messages.RevNATDelete:
		c.revNATDelete(m.ID, newWaiter(m, waitRevNAT, 1))
	case *messages.RevNATDeleteAll:
		ids := make([]lb.ServiceID, 0, len(c.standalone))
		for id := range c.standalone {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		w := newWaiter(m, waitRevNAT, len(ids))
		c.answerIfDone(w)
		for _, id := range ids {
			c.revNATDelete(id, w)
		}
	case *messages.RevNATGet:
		for _, e := range c.revNATs() {
			if e.ID == m.ID {
				c.answer(m, messages.RevNATReply{Entries: []messages.RevNAT{e}})
				return
			}
		}
		c.answer(m, messages.RevNATReply{Err: fmt.Errorf("get revNAT %d: %w", m.ID, ErrRevNATNotFound)})
	case *messages.RevNATDump:
		c.answer(m, messages.RevNATReply{Entries: c.revNATs()})
	case *messages.Stats:
		c.answer(m, c.stats())
	default:
		c.answer(call, call.Failed(fmt.Errorf("engine: unknown call %T", call)))
	}
}

// waiter collects the outcomes of one call's operations and answers the
// call when the last is in.
type waiter struct {
	call messages.Call
	kind waitKind
	left int

	upserts           []messages.UpsertReply
	deletes           []messages.DeleteReply
	upserted, deleted int // Sync
	failed            []syncFailure
	errs              []error

	// The outcome of a call of one service (most calls), held here
	// rather than in an array of its own.
	upsert1 [1]messages.UpsertReply
	delete1 [1]messages.DeleteReply
}

// syncFailure is a failed desired service of a Sync and its index.
type syncFailure struct {
	idx int
	messages.SyncFailure
}

type waitKind uint8

const (
	waitUpsert      waitKind = iota // Upsert: one UpsertReply
	waitUpsertBatch                 // UpsertBatch: one per service
	waitDelete                      // Delete, DeleteByFrontend: one DeleteReply
	waitDeleteBatch                 // DeleteBatch: one per frontend
	waitSync                        // Sync: counts and errors
	waitRevNAT                      // RevNATDelete, RevNATDeleteAll: errors
)

func newWaiter(call messages.Call, kind waitKind, n int) *waiter {
	w := &waiter{}
	w.init(call, kind, n)
	return w
}

// init makes w, zero, the waiter of call (newWaiter; a single call's
// reused op holds its waiter: opPool).
func (w *waiter) init(call messages.Call, kind waitKind, n int) {
	w.call, w.kind, w.left = call, kind, n
	switch {
	case (kind == waitUpsert || kind == waitUpsertBatch) && n == 1:
		w.upserts = w.upsert1[:]
	case kind == waitUpsert || kind == waitUpsertBatch:
		w.upserts = make([]messages.UpsertReply, n)
	case (kind == waitDelete || kind == waitDeleteBatch) && n == 1:
		w.deletes = w.delete1[:]
	case kind == waitDelete || kind == waitDeleteBatch:
		w.deletes = make([]messages.DeleteReply, n)
	}
}

// upserted records the outcome of the upsert in slot of w (nil: a refresh,
// nobody waits).
func (c *Core) upserted(w *waiter, slot int, r messages.UpsertReply) {
	if w == nil {
		return
	}
	if w.kind == waitSync {
		if r.Err == nil {
			w.upserted++
		} else {
			w.errs = append(w.errs, r.Err)
			if m, ok := w.call.(*messages.Sync); ok {
				w.failed = append(w.failed, syncFailure{slot, messages.SyncFailure{Frontend: m.Desired[slot].Frontend.L3n4Addr, Err: r.Err}})
			}
		}
	} else {
		w.upserts[slot] = r
	}
	c.countDone(w)
}

// deleted records the outcome of the delete in slot of w.
func (c *Core) deleted(w *waiter, slot int, r messages.DeleteReply) {
	if w.kind == waitSync {
		switch {
		case errors.Is(r.Err, ErrServiceNotFound), errors.Is(r.Err, ErrFrontendOwned):
			// an in-flight create that failed, or one of another
			// source that succeeded: nothing of this source to delete
		case r.Err == nil:
			w.deleted++
		default:
			w.errs = append(w.errs, r.Err)
		}
	} else {
		w.deletes[slot] = r
	}
	c.countDone(w)
}

// revNATDone records the outcome of a standalone revNAT delete.
func (c *Core) revNATDone(w *waiter, err error) {
	if err != nil {
		w.errs = append(w.errs, err)
	}
	c.countDone(w)
}

func (c *Core) countDone(w *waiter) {
	w.left--
	c.answerIfDone(w)
}

// answerIfDone answers the call of w if nothing is left to wait for.
func (c *Core) answerIfDone(w *waiter) {
	if w.left != 0 {
		return
	}
	w.left = -1 // answered
	switch w.kind {
	case waitUpsert:
		c.answer(w.call, w.upserts[0])
	case waitUpsertBatch:
		c.answer(w.call, messages.UpsertBatchReply{Results: w.upserts})
	case waitDelete:
		c.answer(w.call, w.deletes[0])
	case waitDeleteBatch:
		c.answer(w.call, messages.DeleteBatchReply{Results: w.deletes})
	case waitSync:
		err := errors.Join(w.errs...)
		if err != nil {
			err = fmt.Errorf("sync: %w", err)
		}
		var failed []messages.SyncFailure
		if len(w.failed) > 0 {
			slices.SortFunc(w.failed, func(a, b syncFailure) int { return cmp.Compare(a.idx, b.idx) })
			failed = make([]messages.SyncFailure, len(w.failed))
			for i, f := range w.failed {
				failed[i] = f.SyncFailure
			}
		}
		c.answer(w.call, messages.SyncReply{Upserted: w.upserted, Deleted: w.deleted, Failed: failed, Err: err})
	case waitRevNAT:
		c.answer(w.call, messages.RevNATReply{Err: errors.Join(w.errs...)})
	}
}

func (c *Core) list() []*lb.Service {
	ids := make([]lb.ServiceID, 0, c.services.len())
	for id := range c.services.all {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*lb.Service, len(ids))
	for i, id := range ids {
		out[i] = c.services.spec(id)
	}
	return out
}

func (c *Core) revNATs() []messages.RevNAT {
	var out []messages.RevNAT
	for id, s := range c.services.all {
		fe := s.frontend()
		out = append(out, messages.RevNAT{ID: id, Address: lb.L3n4Addr{Addr: fe.Addr, Port: fe.Port}, Service: true})
	}
	for id, a := range c.standalone {
		out = append(out, messages.RevNAT{ID: id, Address: a})
	}
	slices.SortFunc(out, func(a, b messages.RevNAT) int { return int(a.ID) - int(b.ID) })
	return out
}

func (c *Core) stats() messages.StatsReply {
	steps := make(map[string]messages.StepTiming, len(c.steps))
	for k, v := range c.steps {
		steps[k] = *v
	}
	restarts := make(map[string]int, len(c.cfg.Restarts))
	for k, v := range c.cfg.Restarts {
		restarts[k] = v
	}
	return messages.StatsReply{
		Services: c.services.len(), Backends: c.users.Len(), RevNAT: c.services.len() + len(c.standalone),
		ActorRestarts: restarts, Restore: c.restore, Ready: c.ready, OpsInFlight: c.inflight + len(c.intake), RequestsResent: c.resent,
		RequestsSent: c.requestsSent, ChildMessages: c.childMessages, Steps: steps,
		SpareEntries: c.spares.room(),
	}
}

// sync validates the whole desired set and finds what is stale (every
// other frontend of the source, known or in flight, and for the API every
// standalone revNAT entry), then queues an upsert for each desired service
// and the deletes of the stale ones, as a DeleteBatch of them would
// (takeInDeletes): in this one Step, or, while single calls are about or
// when there are many, a chunk per Step, the deletes after the upserts'
// last chunk (intake.go). The calls still being taken in when it comes
// are taken in first, so that what it finds stale is what every call
// before it left. Nothing a call that arrives later adds is deleted by
// this sync: it is not among the stale frontends.
func (c *Core) sync(m *messages.Sync) {
	c.drainIntake() // what is stale depends on every call before this one
	desired := map[lb.L3n4Addr]int{}
	ids := map[lb.ServiceID]int{}
	for i, svc := range m.Desired {
		if err := svc.Validate(); err != nil {
			c.answer(m, messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w", i, err)})
			return
		}
		if svc.Source != m.Source {
			c.answer(m, messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w: its source is %s, the sync's is %s", i, errInvalidSync, svc.Source, m.Source)})
			return
		}
		fe := svc.Frontend.L3n4Addr
		if j, dup := desired[fe]; dup {
			c.answer(m, messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w: frontend %s also in service %d", i, errInvalidSync, fe, j)})
			return
		}
		desired[fe] = i
		if id := svc.Frontend.ID; id != 0 {
			if j, dup := ids[id]; dup {
				c.answer(m, messages.SyncReply{Err: fmt.Errorf("sync: service %d: %w: service ID %d also in service %d", i, errInvalidSync, id, j)})
				return
			}
			ids[id] = i
		}
	}
	var stale []lb.L3n4Addr
	for fe, id := range c.byFE.All {
		if _, ok := desired[fe]; !ok && c.services.stored(id).source == m.Source {
			stale = append(stale, fe)
		}
	}
	for key, q := range c.queues.all {
		if key.backend {
			continue
		}
		fe := key.l3n4()
		// A known frontend is in stale already if it is stale (above),
		// and a queue key is one frontend's: no frontend comes twice.
		if _, ok := desired[fe]; !ok {
			if _, known := c.byFE.Get(fe); !known && queuedSource(q, fe) == m.Source {
				stale = append(stale, fe)
			}
		}
	}
	var revs []lb.ServiceID // standalone revNAT entries are the API's
	for id := range c.standalone {
		if m.Source == lb.SourceAPI {
			revs = append(revs, id)
		}
	}
	w := newWaiter(m, waitSync, len(m.Desired)+len(stale)+len(revs))
	c.answerIfDone(w)
	lane := newLane(len(m.Desired) + len(stale))
	deletes := func() {
		c.takeInDeletes(stale, true, m.Source, w, lane)
		for _, id := range revs {
			c.revNATDelete(id, w)
		}
	}
	if k := c.chunkOf(lane, len(m.Desired)); k > 0 {
		// Single calls are about, or the sync is large: the upserts are
		// taken in a chunk at a time (intake.go), the deletes after them.
		c.takeInUpserts(m.Desired, k, w, lane, nil, deletes, func(err error) {
			c.deletesAborted(stale, 0, w, err)
			for range revs {
				c.revNATDone(w, err)
			}
		})
		return
	}
	c.startUpserts(m.Desired, 0, w, lane, nil) // validated above
	deletes()
}

// queuedSource is the source of the last upsert queued on fe (a frontend
// the table does not know yet), SourceAPI if none.
func queuedSource(q queue, fe lb.L3n4Addr) lb.Source {
	src := lb.SourceAPI
	for o := range q.all {
		if p, ok := o.plan.(*upsertPlan); ok {
			for i := range p.items {
				if p.items[i].spec.Frontend.L3n4Addr == fe {
					src = p.items[i].spec.Source
				}
			}
		}
	}
	return src
}

// upsertBatch starts the upserts of a batch, in order, in this one Step
// (so their requests share the outbox), and answers when all have.
func (c *Core) upsertBatch(m *messages.UpsertBatch) {
	w := newWaiter(m, waitUpsertBatch, len(m.Services))
	c.answerIfDone(w)
	lane := newLane(len(m.Services))
	if lane == nil {
		c.interactive()
	}
	valid := func(i int, svc *lb.Service) bool {
		if err := svc.Validate(); err != nil {
			c.upserted(w, i, messages.UpsertReply{Err: fmt.Errorf("upsert service %d of the batch: %w", i, err)})
			return false
		}
		return true
	}
	if k := c.chunkOf(lane, len(m.Services)); k > 0 {
		// Single calls are about, or the call is large: it is taken in
		// a chunk at a time (intake.go).
		c.takeInUpserts(m.Services, k, w, lane, valid, nil, nil)
		return
	}
	c.startUpserts(m.Services, 0, w, lane, valid)
}

// reserveMin is the number of services from which startUpserts sizes the
// indexes of an empty engine for them.
const reserveMin = 1024

// reserveFor sizes the indexes of an empty engine for svcs, if they are
// many (the first sync or batch): at once, rather than by doubling.
func (c *Core) reserveFor(svcs []*lb.Service) {
	if c.services.len() != 0 || len(svcs) < reserveMin {
		return
	}
	fe6, n6 := 0, 0 // the frontends and backends the indexes keep in maps (not IPv4)
	for _, svc := range svcs {
		if !svc.Frontend.Addr.Is4() {
			fe6++
		}
		for _, b := range svc.Backends {
			if !b.Addr.Is4() {
				n6++
			}
		}
	}
	c.byFE.Reserve(len(svcs)-fe6, fe6)
	c.users.Reserve(n6)
}

// startUpserts starts the upserts of svcs, in order, for waiter w (service
// i answers in its slot i), skipping those valid refuses (nil: none). Runs
// of services (a frontend without a queued op, no queue key in two of
// them), new ones and updates alike, go as one op each; the others as one
// op each. A run is one plan, one request per map owner and step, instead
// of one per service: a batch or sync that creates or changes 10,000
// services sends tens of requests, not hundreds of thousands. The ops are
// in lane, the call's bulk lane (nil: one service, it begins at once),
// where a run may be cut into chunks when it begins (bulk.go).
//
// base is the index in the call of svcs[0] (a call taken in by chunks).
func (c *Core) startUpserts(svcs []*lb.Service, base int, w *waiter, lane *bulkLane, valid func(int, *lb.Service) bool) {
	var run []*lb.Service
	var runIdx []int
	// ro is the run's op, made for its first service: each service that
	// joins the run enters ro in its queues at once, so the queues are
	// where a later service of the call finds that it shares a frontend
	// or backend with the run (one lookup per key, no set of its own).
	var ro *op
	nkeys := 0
	for _, svc := range svcs {
		nkeys += 1 + len(svc.Backends)
	}
	c.reserveFor(svcs)
	c.presizeQueues(nkeys)
	var keys []qkey
	var found []queue // the queues of keys, as looked up
	lookup := func() {
		found = found[:0]
		for _, k := range keys {
			found = append(found, c.queues.get(k))
		}
	}
	flush := func() {
		if ro == nil {
			return
		}
		ro.plan = c.newRunPlan(run, w, runIdx)
		ro.lane = lane
		c.entered(ro)
		ro, run, runIdx = nil, nil, nil
	}
	left, first := nkeys, true // keys of the services not looked at yet: the first run's size
	for i, svc := range svcs {
		i += base
		left -= 1 + len(svc.Backends)
		if valid != nil && !valid(i, svc) {
			continue
		}
		// The queues upsertOp gives it, the other scope's frontend
		// included: a run holding two services of one queue would wait
		// behind itself there.
		keys = appendUpsertKeys(keys[:0], svc)
		lookup()
		if ro != nil && slices.ContainsFunc(found, func(q queue) bool { return q.last() == ro }) {
			// Shares a frontend or backend with the run: the run goes
			// first (and may complete at once, leaving its queues).
			flush()
			lookup()
		}
		queued := found[0].head != nil // keys[0] is the frontend's: a flushed run counts
		if !queued {
			if ro == nil {
				n := 1 + len(svc.Backends) + left // the rest of the call, for its first run
				if first {
					// The run may take the rest of the call (most do).
					m := len(svcs) - (i - base)
					run, runIdx = make([]*lb.Service, 0, m), make([]int, 0, m)
					first = false
				} else {
					n = min(n, runKeysMax)
				}
				ro = &op{keys: c.ops.takeKeys(n), runKeys: true}
			}
			for j, k := range keys {
				c.enter(ro, k, found[j])
			}
			ro.keys = append(ro.keys, keys...)
			run, runIdx = append(run, svc), append(runIdx, i)
			continue
		}
		flush()
		o := c.upsertOp([]*lb.Service{svc}, w, []int{i})
		o.lane = lane
		c.run(o)
	}
	flush()
}

// runKeysMax bounds the queue keys a run's op makes room for at once
// beyond the first run of a call (a call cut into many runs would
// otherwise make room for the rest of the call each time).
const runKeysMax = 4096

// deleteBatch deletes the services of the frontends in runs of distinct
// frontends, each one op (a repeated frontend starts the next run, which
// queues behind the first on that frontend, so the order holds), in the
// call's bulk lane: in this one Step, or, while single calls are about, a
// chunk per Step (intake.go).
func (c *Core) deleteBatch(m *messages.DeleteBatch) {
	w := newWaiter(m, waitDeleteBatch, len(m.Frontends))
	c.answerIfDone(w)
	lane := newLane(len(m.Frontends))
	if lane == nil {
		c.interactive()
	}
	c.takeInDeletes(m.Frontends, false, m.As, w, lane)
}

// takeInDeletes starts the deletes of frontends fes, as source as, for w
// (frontend i answers in its slot i), in lane: runs of distinct
// frontends, each one op (startDeletes; distinct: fes holds no frontend
// twice). While single calls are about, or
// when they are many, they are taken in a chunk at a time (intake.go), so
// that single calls do not wait behind all of them, and the children
// delete a chunk's entries while the next is taken in.
func (c *Core) takeInDeletes(fes []lb.L3n4Addr, distinct bool, as lb.Source, w *waiter, lane *bulkLane) {
	if k := c.chunkOf(lane, len(fes)); k > 0 {
		c.addIntake(&intakeCall{
			n:     len(fes),
			chunk: k,
			lane:  lane,
			take:  func(from, to int) { c.startDeletes(fes, distinct, as, from, to, w, lane) },
			abort: func(from int, err error) { c.deletesAborted(fes, from, w, err) },
		})
		return
	}
	c.startDeletes(fes, distinct, as, 0, len(fes), w, lane)
}

// deletesAborted answers the deletes of fes[from:] for w with err: they
// were not taken in when the core stopped.
func (c *Core) deletesAborted(fes []lb.L3n4Addr, from int, w *waiter, err error) {
	for i := from; i < len(fes); i++ {
		c.deleted(w, i, messages.DeleteReply{Err: fmt.Errorf("delete service %s: %w", fes[i], err)})
	}
}

// startDeletes starts the deletes of frontends [from, to) of fes, as
// source as, for w, in lane: runs of distinct frontends, each one op. When
// fes is distinct (no frontend twice) they are one run, and no set of the
// frontends seen is built.
func (c *Core) startDeletes(fes []lb.L3n4Addr, distinct bool, as lb.Source, from, to int, w *waiter, lane *bulkLane) {
	for start := from; start < to; {
		var seen map[lb.L3n4Addr]bool // nil when distinct: nothing is seen twice
		if !distinct {
			// Sized for the rest of the call (a run mostly ends there):
			// grown from empty, the set of a call of 1,000 frontends
			// rehashed seven times.
			seen = make(map[lb.L3n4Addr]bool, to-start)
		}
		items := make([]deleteItem, 0, to-start)
		end := start
		for end < to && !seen[fes[end]] {
			if seen != nil {
				seen[fes[end]] = true
			}
			items = append(items, deleteItem{fe: fes[end], as: as, to: w, slot: end})
			end++
		}
		o := c.deleteOp(items)
		o.lane = lane
		c.run(o)
		start = end
	}
}
