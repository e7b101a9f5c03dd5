package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// upsertPlan creates or updates services: one for Upsert, a run of
// services (new or updated) for UpsertBatch and Sync. Each step sends one
// request per child (and family) for all its services. A service that the
// table or the allocator refuses fails alone; a map write that fails
// fails the op, whose rollback undoes what every service still in it may
// have written.
//
// Steps, in make-before-break order: acquire IDs (the backends bound
// already are held at once, the others get fresh IDs); write backends and
// revNAT; write service (slots, then the master, then stale slots); commit
// (the table changes: past this the op no longer rolls back; the backends
// no service uses any more are unbound); delete those backends, let their
// IDs be reused. An op whose services all make nothing new
// (writesNothingNew) writes their backends and revNAT entries beside
// their service entries, in one step (upsertStepsInOne).
type upsertPlan struct {
	items     []upsertItem
	committed bool
	// new services asked of the allocator (to size the op's holds once)
	asked int
	// asking are the items the allocator is asked for in the op's one
	// AllocAcquire, in its order (its reply's items are parallel); one
	// backs it for a plan of one service (no allocation).
	asking []int32
	one    [1]int32
	releaser
	// pooled is the object the plan is part of when it is a single
	// call's (singleUpsertOp), reused once its op is complete (opPool).
	pooled *upsertOne
	// idx, svcs and ids are the arrays of the items' backend index lists,
	// of the services they write and of those's backend IDs when the plan
	// is not pooled: taken from the pool's run arrays, given back when the
	// op is complete (opPool.completed), as are items when a run's
	// (runItems: newRunPlan).
	idx      []int
	svcs     []table.Service
	ids      []lb.BackendID
	runItems bool
	// holds is the array of op.svcHolds when it came from the pool's run
	// arrays (roomForHolds), given back when the op is complete.
	holds []messages.AllocBinding
}

// upsertItem is one service of an upsert plan.
type upsertItem struct {
	spec *lb.Service // validated
	to   *waiter
	slot int

	// What start found and planned.
	old        *table.Service // nil: a creation
	svc        *table.Service // the service to write, IDs filled by acquire
	acquireIdx []int          // the backends of svc to acquire IDs for (acquire), by index in svc
	fresh      []int          // of acquire, those asked of the allocator (not bound), ascending
	// The op holds a reference on the keys of acquire[:holding] that are
	// not fresh (in their entries' held count), and on the fresh ones too
	// once freshHeld: it bound them itself (bindFresh, see unholdAll).
	holding   int
	freshHeld bool
	removed   []lb.L3n4Addr // backends of old not in svc, in old's order
	// touch lists the kept backends (of old, in svc: by index in svc)
	// whose states svc changes (from old's: planUpsert reads no index entry
	// of a kept backend): the commit writes their index entries.
	// The others' entries need nothing: their states stay as planned
	// until the commit (an op that could change one, an upsert using the
	// backend, waits in its queue), and services sharing one already
	// have its state (propagateStates keeps them equal).
	touch         []int
	restoreShared []maps.BackendEntry // what gives the other services their backends' states back
	maxSlots      int                 // slots to clear beyond the service's own
	maxInner      int                 // the same at the internal scope (two scopes)
	acquired      bool                // holds its IDs (or needed none)
	// leased: its service ID came from the core's lease, and the
	// allocator is not told yet (lease.go: the next step claims it).
	leased bool
	err    error // this service failed alone
}

func (c *Core) upsertOp(specs []*lb.Service, to *waiter, slots []int) *op {
	n := 0
	for _, spec := range specs {
		n += 1 + len(spec.Backends)
	}
	var o *op
	if len(specs) == 1 {
		// A single call's op: the op, its plan and its one item in one
		// allocation.
		u := &upsertOne{}
		u.item[0] = newUpsertItem(specs[0], to, slots[0])
		u.plan.items = u.item[:]
		u.op.plan = &u.plan
		o = &u.op
	} else {
		o = &op{plan: newUpsertPlan(specs, to, slots)}
	}
	o.keys = make([]qkey, 0, n)
	for _, spec := range specs {
		o.keys = appendUpsertKeys(o.keys, spec)
	}
	return o
}

// upsertOne is the op of an upsert of one service, allocated together;
// a single call's also holds its waiter and its queue keys' array, and
// is reused once complete (opPool).
type upsertOne struct {
	op   op
	plan upsertPlan
	item [1]upsertItem
	w    waiter
	keys []qkey     // kept when reused
	idx  []int      // its item's backend index lists (kept when reused)
	old  oldService // the service it replaces (its arrays kept when reused)
	next newService // the service it writes (its IDs' array kept when reused)
	// holds is the array of op.svcHolds (the one service ID it may take).
	holds [1]messages.AllocBinding
	// spec is its copy of the call's service (own), its backends in bes
	// (kept when reused).
	spec lb.Service
	bes  []lb.Backend
}

// singleUpsertOp is upsertOp for an Upsert call, of spec (u's copy of its
// service, validated): its op, plan, item and waiter are u, an object
// taken from the pool and reused (opPool).
func (c *Core) singleUpsertOp(u *upsertOne, m *messages.Upsert, spec *lb.Service) *op {
	u.w.init(m, waitUpsert, 1)
	u.item[0] = newUpsertItem(spec, &u.w, 0)
	u.plan.items, u.plan.pooled = u.item[:], u
	u.op.plan = &u.plan
	u.keys = appendUpsertKeys(u.keys[:0], spec)
	u.op.keys = u.keys
	return &u.op
}

// own copies s, an Upsert's service (its caller's, see messages.Upsert),
// into u and returns the copy: the service the op upserts, its backends
// in u's kept array (put in slot order in place later, as a sent copy's
// were).
func (u *upsertOne) own(s *lb.Service) *lb.Service {
	if s == nil {
		u.spec = lb.Service{} // fails validation, as the façade's nil does
		return &u.spec
	}
	u.spec = *s
	if s.Backends != nil {
		u.spec.Backends = append(u.bes[:0], s.Backends...)
		u.bes = u.spec.Backends
	}
	u.spec.SourceRanges = slices.Clone(s.SourceRanges)
	return &u.spec
}

// newUpsertPlan is the plan of upserting specs for to, spec i answering
// in slot slots[i].
func newUpsertPlan(specs []*lb.Service, to *waiter, slots []int) *upsertPlan {
	return planIn(make([]upsertItem, len(specs)), specs, to, slots)
}

// newRunPlan is newUpsertPlan for a run of a large call (startUpserts),
// its items in an array of the pool's run arrays.
func (c *Core) newRunPlan(specs []*lb.Service, to *waiter, slots []int) *upsertPlan {
	p := planIn(c.ops.takeItems(len(specs))[:len(specs)], specs, to, slots)
	p.runItems = true
	return p
}

// planIn is newUpsertPlan with its items in items (one per spec).
func planIn(items []upsertItem, specs []*lb.Service, to *waiter, slots []int) *upsertPlan {
	for i, spec := range specs {
		items[i] = newUpsertItem(spec, to, slots[i])
	}
	return &upsertPlan{items: items}
}

// newUpsertItem is the item of upserting spec for to, answering in slot.
func newUpsertItem(spec *lb.Service, to *waiter, slot int) upsertItem {
	return upsertItem{spec: spec, to: to, slot: slot}
}

// appendUpsertKeys appends the queues an upsert of spec waits in: its
// frontend, its backends and, for a service that shares its entries'
// address with the other scope, that scope's frontend (itemKeys counts
// them).
func appendUpsertKeys(keys []qkey, spec *lb.Service) []qkey {
	keys = appendOpKeys(keys, spec.Frontend.L3n4Addr, spec.Backends)
	if other, ok := otherScope(spec); ok {
		keys = append(keys, feQueue(other))
	}
	return keys
}

func (p *upsertPlan) start(c *Core, o *op) []step {
	// The items' backend index lists (acquireIdx, fresh) in one array.
	n := 0
	for i := range p.items {
		n += 2 * len(p.items[i].spec.Backends)
	}
	var idx []int
	var svcs []table.Service // where the items' services are made (nil: a single call's op, in its own)
	var ids []lb.BackendID   // their backend IDs
	if u := p.pooled; u != nil {
		if cap(u.idx) < n {
			u.idx = make([]int, n)
		}
		idx = u.idx[:n]
	} else {
		// The pool's run arrays, given back when the op is complete
		// (opPool.completed).
		idx = c.ops.takeIdx(n)[:n]
		svcs = c.ops.takeSvcs(len(p.items))[:len(p.items)]
		ids = c.ops.takeIDs(n / 2)
		p.idx, p.svcs, p.ids = idx, svcs, ids
	}
	live := 0
	for i := range p.items {
		it := &p.items[i]
		b := len(it.spec.Backends)
		k := 2 * b
		var dst *table.Service
		var dstIDs []lb.BackendID
		if svcs != nil {
			dst, dstIDs, ids = &svcs[i], ids[:b:b], ids[b:]
		}
		if c.planUpsert(it, idx[:k:k], p.pooled, dst, dstIDs) == nil {
			live++
		}
		idx = idx[k:]
	}
	if live == 0 {
		return nil
	}
	for it := range p.live {
		if !it.writesNothingNew() {
			return upsertSteps
		}
	}
	return upsertStepsInOne
}

// upsertSteps are the steps of an upsert op (see on).
var upsertSteps = []step{
	{name: StepAcquire, send: on((*upsertPlan).acquireIDs)},
	// Everything is sent, changed or not: the map owners skip entries
	// their map already holds, and an upsert (or Sync) of an unchanged
	// service still repairs maps that drifted.
	{name: StepWriteBackends, send: on((*upsertPlan).writeBackends), retry: mapRetries},
	{name: StepWriteService, send: on((*upsertPlan).writeService), retry: mapRetries},
	{name: StepCommit, send: on((*upsertPlan).commit)},
	{name: StepDeleteBackends, send: on((*upsertPlan).deleteFreedAndStale), retry: mapRetries},
	{name: StepReuseBackendIDs, send: on((*upsertPlan).reuse)},
}

// upsertStepsInOne are the steps of an upsert op whose services all
// write nothing new before their service entries (writesNothingNew): the
// backends, revNAT and the rest of the first write step are entries the
// maps hold already, so they go beside the service entries, in one step
// named for those, one round trip to the map owners sooner. They are
// still sent (an upsert of an unchanged service repairs maps that
// drifted). There is nothing to acquire.
var upsertStepsInOne = []step{
	{name: StepWriteService, send: on((*upsertPlan).writeInOne), retry: mapRetries},
	{name: StepCommit, send: on((*upsertPlan).commit)},
	{name: StepDeleteBackends, send: on((*upsertPlan).deleteFreedAndStale), retry: mapRetries},
	{name: StepReuseBackendIDs, send: on((*upsertPlan).reuse)},
}

// writesNothingNew reports whether the first write step of it would
// write only entries its old service has, in the maps already: an update
// that keeps every backend in its state (so each backend entry and ID is
// the old one) and adds no lb_members entry, affinity match or source
// range (the revNAT entry of an update is the old one). Nothing the
// service entries point at is then made by the op, so writing them
// beside the rest breaks no make-before-break order.
func (it *upsertItem) writesNothingNew() bool {
	if it.old == nil || len(it.acquireIdx) > 0 || len(it.touch) > 0 {
		return false
	}
	return notIn(table.MemberEntries(it.svc), table.MemberEntries(it.old)) == nil &&
		notIn(table.AffinityMatches(it.svc), table.AffinityMatches(it.old)) == nil &&
		notIn(table.SourceRanges(it.svc), table.SourceRanges(it.old)) == nil
}

// planUpsert checks it against the table and plans it, its backend
// index lists (acquireIdx, fresh) in room, two per backend; the error
// (also in it.err) fails this service alone. one is the single call's op
// it is the item of (nil: none), where it reads the service it replaces
// and makes the one it writes; otherwise it makes that in dst, its
// backend IDs in ids, or in a new one (dst nil).
func (c *Core) planUpsert(it *upsertItem, room []int, one *upsertOne, dst *table.Service, ids []lb.BackendID) error {
	fe := it.spec.Frontend.L3n4Addr
	want := it.spec.Frontend.ID
	if id, ok := c.byFE.Get(fe); ok {
		if one != nil {
			it.old = one.old.read(&c.services, c.services.stored(id))
		} else {
			it.old = c.services.get(id)
		}
		if it.old.Spec.Source != it.spec.Source {
			it.err = ownedError(it.old, it.spec.Source)
			return it.err
		}
		if want != 0 && want != id {
			it.err = fmt.Errorf("%w: frontend %s is already registered with ID %d", ErrFrontendInUse, fe, id)
			return it.err
		}
	}
	if it.err = c.checkWantedID(fe, want); it.err != nil {
		return it.err
	}
	if it.err = c.checkOtherScope(it.spec); it.err != nil {
		return it.err
	}
	switch {
	case one != nil:
		it.svc = one.next.make(it.spec)
	case dst != nil:
		it.svc = newTableServiceIn(it.spec, dst, ids)
	default:
		it.svc = newTableService(it.spec)
	}
	var old oldBackends // the old service's backends (none for a new service)
	if it.old != nil {
		it.svc.Spec.Frontend.ID = it.old.ID()
		old = newOldBackends(it.old)
	}
	bs := it.svc.Spec.Backends
	it.acquireIdx, it.fresh = room[:0:len(bs)], room[len(bs):len(bs):2*len(bs)]
	for i, b := range bs {
		k := table.BackendKey(b)
		if j, mine := old.take(k); mine {
			// Kept: the old service has its ID and its state (the index's:
			// services sharing a backend agree on its state), so the
			// index is not read.
			cur := it.old.Spec.Backends[j].State
			if it.err = checkTransition(cur, b, it.spec.Source); it.err != nil {
				return it.err
			}
			it.svc.BackendIDs[i] = it.old.BackendIDs[j]
			if cur != b.State {
				it.touch = append(it.touch, i)
			}
			continue
		}
		bound, err := c.checkSharedState(it, b, k)
		if err != nil {
			it.err = err
			return it.err
		}
		if !bound {
			it.fresh = append(it.fresh, len(it.acquireIdx))
		}
		it.acquireIdx = append(it.acquireIdx, i)
	}
	oldSlots := 0
	if it.old != nil {
		oldSlots = table.SlotCount(it.old)
		// The old backends not taken are those the service no longer
		// uses, in the old service's order.
		for j, b := range it.old.Spec.Backends {
			if !old.taken(j) {
				it.removed = append(it.removed, table.BackendKey(b))
			}
		}
	}
	it.maxSlots = max(oldSlots, len(bs))
	if it.old != nil {
		it.maxInner = table.SlotCountAt(it.old, lb.ScopeInternal)
	}
	if it.svc.Spec.TwoScopes() {
		it.maxInner = max(it.maxInner, len(bs))
	}
	it.acquired = it.old != nil && len(it.acquireIdx) == 0
	return nil
}

// oldBackendsScanMax is the most backends an old service may have for
// oldBackends to find them by a scan.
const oldBackendsScanMax = 64

// oldBackends finds the backends of the service an upsert replaces by
// key, each at most once (take), and tells which were found (taken). A
// service of up to oldBackendsScanMax backends is scanned, with a bit per
// backend taken: no map made and hashed for the few backends most
// services have (making and reading the map took some 10% of an endpoint
// change's time in the core); a larger one is indexed by a map, an entry
// deleted when taken.
type oldBackends struct {
	svc  *table.Service
	took uint64              // bit i: backend i taken (scan)
	m    map[lb.L3n4Addr]int // key to index, the backends not taken (map)
}

func newOldBackends(svc *table.Service) oldBackends {
	o := oldBackends{svc: svc}
	if n := len(svc.Spec.Backends); n > oldBackendsScanMax {
		o.m = make(map[lb.L3n4Addr]int, n)
		for i, b := range svc.Spec.Backends {
			o.m[table.BackendKey(b)] = i
		}
	}
	return o
}

// take returns the index of the old backend of key k, if there is one
// not taken yet, and marks it taken.
func (o *oldBackends) take(k lb.L3n4Addr) (int, bool) {
	if o.svc == nil {
		return 0, false
	}
	if o.m != nil {
		i, ok := o.m[k]
		if !ok {
			return 0, false
		}
		delete(o.m, k)
		return i, true
	}
	for i, b := range o.svc.Spec.Backends {
		if o.took&(1<<i) == 0 && table.BackendKey(b) == k {
			o.took |= 1 << i
			return i, true
		}
	}
	return 0, false
}

// taken reports whether old backend i was taken.
func (o *oldBackends) taken(i int) bool {
	if o.m != nil {
		_, left := o.m[table.BackendKey(o.svc.Spec.Backends[i])]
		return !left
	}
	return o.took&(1<<i) != 0
}

// live yields the services still in the plan.
func (p *upsertPlan) live(yield func(*upsertItem) bool) {
	for i := range p.items {
		if it := &p.items[i]; it.err == nil && it.svc != nil && !yield(it) {
			return
		}
	}
}

// acquireIDs takes the backends' IDs: a backend bound already (another
// service uses it: planUpsert saw it) is held at once, so that no op frees
// it meanwhile; the others (it.fresh), and a new service's ID, are asked
// of the allocator.
func (p *upsertPlan) acquireIDs(c *Core, o *op) {
	lease := c.leaseServes(p, o)
	p.asking = p.one[:0]
	if len(p.items) > 1 {
		p.asking = make([]int32, 0, len(p.items))
	}
	if lease {
		defer c.refillLease()
	}
	for i := range p.items {
		it := &p.items[i]
		if it.err != nil || it.svc == nil || it.acquired {
			continue
		}
		it.holding = len(it.acquireIdx)
		for j, isFresh := range it.acquireFresh {
			if isFresh {
				continue
			}
			k := it.acquire(j)
			id, ok, err := c.hold(addrkey.BackendOf(k))
			if err == nil && !ok { // planned in this step: cannot happen
				err = fmt.Errorf("backend %s was unbound since its service was planned", k)
			}
			if err != nil {
				it.err = fmt.Errorf("%s: %w", StepAcquire, err)
				it.holding = j
				break
			}
			it.svc.BackendIDs[it.acquireIdx[j]] = id
		}
		if it.err != nil {
			p.unholdAll(c, o, it)
			continue
		}
		if it.old != nil && len(it.fresh) == 0 {
			it.acquired = true
			continue
		}
		if lease {
			if p.fromLease(c, o, i) {
				continue
			}
			c.refillLease() // the lease is short: this service may wait for it
			if c.waitForLease(p, o, i) {
				continue
			}
		}
		p.asking = append(p.asking, int32(i))
	}
	p.ask(c, o)
}

// folder returns the fold of p's acquire replies.
func (p *upsertPlan) folder(c *Core) fold {
	return func(o *op, _ int, reply any) error { return p.acquired(c, o, reply) }
}

// acquireOne is the AllocAcquire of one service, its item beside it (one
// allocation).
type acquireOne struct {
	m    messages.AllocAcquire
	item [1]messages.AcquireItem
}

// ask asks the allocator, in one request, for the IDs of the items of
// p.asking: a new service's, and its fresh backends'.
func (p *upsertPlan) ask(c *Core, o *op) {
	if len(p.asking) == 0 {
		return
	}
	var m *messages.AllocAcquire
	if len(p.asking) == 1 {
		one := &acquireOne{}
		one.m.Items = one.item[:]
		m = &one.m
	} else {
		// Lent to the allocator until it answers (spares.go).
		m = &messages.AllocAcquire{Items: c.spares.acquires.take(len(p.asking))[:len(p.asking)]}
	}
	for n, i := range p.asking {
		it := &p.items[i]
		fresh := it.svc.Spec.Backends // most often all of them (a new service): no copy
		if len(it.fresh) < len(fresh) {
			fresh = make([]lb.Backend, len(it.fresh))
			for n, j := range it.fresh {
				fresh[n] = it.svc.Spec.Backends[it.acquireIdx[j]]
			}
		}
		if it.old == nil {
			p.asked++
			if want := it.spec.Frontend.ID; want != 0 {
				c.unlease(o, want) // its AllocUnhold goes ahead of the acquire
			}
		}
		m.Items[n] = messages.AcquireItem{Service: it.old == nil, Frontend: it.svc.Frontend(), WantID: it.spec.Frontend.ID, Backends: fresh}
	}
	m.ReqID = c.reqID()
	m.Reuse = c.spares.takeAnswer()
	c.send(o, ChildAllocator, 0, p.folder(c), m, len(p.asking) > 1)
}

// acquired folds the allocator's answer for the items of p.asking, all of
// them (a refusal or a wrong answer for one leaves the others granted, so
// that the rollback gives back what they took); it returns the first
// error of the op's own.
func (p *upsertPlan) acquired(c *Core, o *op, reply any) error {
	rep := reply.(*messages.AllocAcquired)
	if len(rep.Items) != len(p.asking) {
		return fmt.Errorf("the allocator answered %d services of %d", len(rep.Items), len(p.asking)) // the op's error: the step prefixes it
	}
	var first error
	for n, i := range p.asking {
		if err := p.acquiredItem(c, o, int(i), &rep.Items[n]); err != nil && first == nil {
			first = err
		}
	}
	c.spares.keepAnswer(rep) // folded: nothing of it is kept (grant copies the IDs)
	return first
}

// acquiredItem folds the allocator's answer r for item i: the fresh IDs
// are bound to their backends at once (a restarted allocator is told they
// are in use). A refusal fails that service alone: the allocator took
// nothing for it, and it gives back the backends it held.
func (p *upsertPlan) acquiredItem(c *Core, o *op, i int, r *messages.AcquiredItem) error {
	it := &p.items[i]
	if r.Err != nil {
		it.err = fmt.Errorf("%s: %w", StepAcquire, r.Err)
		p.unholdAll(c, o, it)
		return nil
	}
	if len(r.BackendIDs) != len(it.fresh) {
		return fmt.Errorf("the allocator gave %d backend IDs for %d backends", len(r.BackendIDs), len(it.fresh)) // the op's error: the step prefixes it
	}
	if it.old == nil {
		p.roomForHolds(c, o, p.asked)
		o.svcHolds = append(o.svcHolds, messages.AllocBinding{Key: it.svc.Frontend(), ID: uint64(r.ServiceID), Refs: 1})
	}
	p.grant(c, o, it, r.ServiceID, r.BackendIDs)
	return nil
}

// grant gives it its IDs, from the allocator or the lease: the service
// ID id (a new service) and ids for its fresh backends, bound at once.
func (p *upsertPlan) grant(c *Core, o *op, it *upsertItem, id lb.ServiceID, ids []lb.BackendID) {
	it.acquired = true
	if it.old == nil {
		it.svc.Spec.Frontend.ID = id
	}
	for n, j := range it.fresh {
		k, id, i := it.acquire(j), ids[n], it.acquireIdx[j]
		c.bindFresh(addrkey.BackendOf(k), id, it.svc.ID(), it.svc.Spec.Backends[i].State)
		it.svc.BackendIDs[i] = id
	}
	it.freshHeld = true
}

// roomForHolds gives o, if it holds no service ID, room for n: a single
// call's op its own array (upsertOne.holds), any other an array of the
// pool's run arrays (given back when the op is complete).
func (p *upsertPlan) roomForHolds(c *Core, o *op, n int) {
	switch {
	case o.svcHolds != nil:
	case p.pooled != nil:
		o.svcHolds = p.pooled.holds[:0]
	default:
		p.holds = c.ops.takeHolds(n)
		o.svcHolds = p.holds
	}
}

// acquire returns the key of backend j of acquire.
func (it *upsertItem) acquire(j int) lb.L3n4Addr {
	return table.BackendKey(it.svc.Spec.Backends[it.acquireIdx[j]])
}

// acquireFresh yields the index of each backend of acquire, in order,
// and whether it is fresh (in it.fresh).
func (it *upsertItem) acquireFresh(yield func(int, bool) bool) {
	next := it.fresh // ascending
	for j := range it.acquireIdx {
		fresh := len(next) > 0 && next[0] == j
		if fresh {
			next = next[1:]
		}
		if !yield(j, fresh) {
			return
		}
	}
}

// unholdAll gives back the references it holds: the fresh backends it
// bound are unbound, and so are the others left with no service and no
// op; the IDs of those unbound are freed.
func (p *upsertPlan) unholdAll(c *Core, o *op, it *upsertItem) {
	for j, fresh := range it.acquireFresh {
		if j >= it.holding {
			break
		}
		if fresh && !it.freshHeld {
			continue
		}
		k := addrkey.BackendOf(it.acquire(j))
		var id lb.BackendID
		var unbound bool
		if fresh {
			id, unbound = c.unbindFresh(k)
		} else {
			id, unbound = c.unhold(k)
		}
		if unbound {
			p.free(o, it.svc.Family(), id)
		}
	}
	it.holding, it.freshHeld = 0, false
}

// The write steps size their buffers before filling them: a batch of
// 10,000 services writes 100,000 backends, and buffers grown by doubling
// would allocate twice that.

func (p *upsertPlan) writeBackends(c *Core, o *op) {
	p.claimLeased(c, o)
	var nbe [2]int
	nsvc := 0
	for it := range p.live {
		nbe[famIndex(it.svc.Family())] += len(it.svc.Spec.Backends)
		nsvc++
	}
	var bes [2][]maps.BackendEntry
	for f, n := range nbe {
		if n > 0 {
			bes[f] = c.spares.beWrites.take(n)
		}
	}
	revs := c.spares.revWrites.take(nsvc)
	var ms []maps.MemberEntry
	var as []maps.AffinityMatchKey
	var rs []maps.SourceRangeKey
	for it := range p.live {
		f := famIndex(it.svc.Family())
		bes[f] = table.AppendBackendEntries(bes[f], it.svc)
		revs = append(revs, table.RevNAT(it.svc))
		ms = append(ms, table.MemberEntries(it.svc)...)
		as = append(as, table.AffinityMatches(it.svc)...)
		rs = append(rs, table.SourceRanges(it.svc)...)
	}
	c.lendBackendWrites(o, bes)
	c.lendRevNATWrites(o, revs)
	c.applyMembers(o, ms, nil, as, nil)
	// Before the master: a master carrying FlagSourceRange never goes
	// live without its ranges (the datapath would drop every client).
	c.applyRanges(o, rs, nil)
}

// writeInOne is writeBackends and writeService in one step
// (upsertStepsInOne).
func (p *upsertPlan) writeInOne(c *Core, o *op) {
	p.writeBackends(c, o)
	p.writeService(c, o)
}

func (p *upsertPlan) writeService(c *Core, o *op) {
	var n [2]int
	for it := range p.live {
		n[famIndex(it.svc.Family())] += table.ServiceEntriesMax(it.svc)
	}
	var ws [2][]maps.ServiceEntry
	for f := range n {
		if n[f] > 0 {
			ws[f] = c.spares.svcWrites.take(n[f])
		}
	}
	var ds [2][]maps.ServiceKey
	var mg maglevs
	for it := range p.live {
		f := famIndex(it.svc.Family())
		ws[f] = table.AppendSlotsAndMaster(ws[f], it.svc)
		ds[f] = append(ds[f], staleKeys(it.svc, it.maxSlots, it.maxInner, it.old != nil && it.old.Spec.TwoScopes())...)
		mg.put(it.svc, it.old)
	}
	c.lendServices(o, ws, ds) // ds: appended to nil, the request's alone
	// Beside the service: its backends are written, and those it drops
	// are deleted only after the commit.
	c.applyMaglev(o, mg)
}

// deleteFreedAndStale deletes the backends that became free and the
// lb_members and lb_affinity_match entries the services no longer have
// (after the service write: nothing the datapath can still reach).
func (p *upsertPlan) deleteFreedAndStale(c *Core, o *op) {
	p.deleteFreed(c, o)
	var md []maps.MemberKey
	var ad []maps.AffinityMatchKey
	var rd []maps.SourceRangeKey
	for it := range p.live {
		if it.old != nil {
			md = append(md, memberKeysNotIn(table.MemberEntries(it.old), table.MemberEntries(it.svc))...)
			ad = append(ad, notIn(table.AffinityMatches(it.old), table.AffinityMatches(it.svc))...)
			rd = append(rd, notIn(table.SourceRanges(it.old), table.SourceRanges(it.svc))...)
		}
	}
	c.applyMembers(o, nil, md, nil, ad)
	c.applyRanges(o, nil, rd) // the ranges the new master no longer has
}

// commit puts the services in the table: the references the op held
// become the services' own, and the backends the services no longer use
// (nor another service, nor an op) are unbound, their IDs freed.
func (p *upsertPlan) commit(c *Core, o *op) {
	o.svcHolds = nil
	for it := range p.live {
		if it.old != nil {
			c.backendsLeft(it.old, it.svc)
		}
		var fresh []int // bound by the op (grant), once it holds them
		if it.freshHeld {
			fresh = it.fresh
		}
		fam := it.svc.Family()
		// The backends it held are the service's now; those the old
		// service alone used are unbound and freed.
		c.commit(it.svc, it.acquireIdx, fresh, it.touch, it.removed, func(id lb.BackendID) { p.free(o, fam, id) })
		it.holding, it.freshHeld = 0, false
	}
	p.committed = true // past the point of no return
}

// rollback undoes what the services that hold their IDs may have written:
// old backends and revNAT entries back, shared backends' states back,
// old services back (new ones deleted, master first), new revNAT entries
// deleted; then the IDs they acquired are given back.
func (p *upsertPlan) rollback(*Core, *op) []step {
	if p.committed {
		return nil
	}
	some := false
	for it := range p.live {
		some = some || it.acquired || it.holding > 0
	}
	if !some {
		return nil // nothing was acquired, so nothing was written
	}
	return upsertRollbackSteps
}

// upsertRollbackSteps are the steps of a rollback of an upsert op (see on).
var upsertRollbackSteps = []step{
	{name: StepRollbackBackends, send: on((*upsertPlan).rollbackBackends), retry: mapRetries},
	{name: StepRollbackService, send: on((*upsertPlan).rollbackService), retry: mapRetries},
	{name: StepRollbackRevNAT, send: on((*upsertPlan).rollbackRevNAT), retry: mapRetries},
	{name: StepRollbackReleaseIDs, send: on((*upsertPlan).rollbackRelease)},
	{name: StepRollbackDeleteBEs, send: on((*upsertPlan).deleteFreed), retry: mapRetries},
	{name: StepRollbackReuseIDs, send: on((*upsertPlan).reuse)},
}

// undone yields the services the rollback undoes.
func (p *upsertPlan) undone(yield func(*upsertItem) bool) {
	for it := range p.live {
		if it.acquired && !yield(it) {
			return
		}
	}
}

func (p *upsertPlan) rollbackBackends(c *Core, o *op) {
	var bes [2][]maps.BackendEntry
	var revs []maps.RevNATEntry
	var ms []maps.MemberEntry
	var as []maps.AffinityMatchKey
	var rs []maps.SourceRangeKey
	for it := range p.undone {
		f := famIndex(it.svc.Family())
		if it.old != nil {
			bes[f] = appendKeptBackendEntries(bes[f], it)
			revs = append(revs, table.RevNAT(it.old))
			ms = append(ms, table.MemberEntries(it.old)...)
			as = append(as, table.AffinityMatches(it.old)...)
			rs = append(rs, table.SourceRanges(it.old)...)
		}
		bes[f] = append(bes[f], it.restoreShared...)
	}
	c.applyBackends(o, bes, [2][]uint32{})
	c.applyRevNAT(o, revs, [2][]uint16{})
	c.applyMembers(o, ms, nil, as, nil)
	c.applyRanges(o, rs, nil) // before the old master is written back
}

// appendKeptBackendEntries appends the backend entries of it.old but
// those it drops (it.removed): the op wrote the backends it keeps, with
// their states, and not those it drops, which an op taking one may write
// meanwhile (they are not its queues); writing a dropped one back would
// undo that op's state. it.removed is in it.old's order (planUpsert), so
// one walk of both finds them.
func appendKeptBackendEntries(dst []maps.BackendEntry, it *upsertItem) []maps.BackendEntry {
	removed := it.removed
	for i, b := range it.old.Spec.Backends {
		if len(removed) > 0 && table.BackendKey(b) == removed[0] {
			removed = removed[1:]
			continue
		}
		dst = append(dst, table.BackendEntry(b, it.old.BackendIDs[i]))
	}
	return dst
}

func (p *upsertPlan) rollbackService(c *Core, o *op) {
	var ws [2][]maps.ServiceEntry
	var ds [2][]maps.ServiceKey
	var mg maglevs
	for it := range p.undone {
		f := famIndex(it.svc.Family())
		if it.old != nil {
			mg.put(it.old, it.svc)
		} else {
			mg.drop(it.svc)
		}
		if it.old != nil {
			ws[f] = append(ws[f], table.SlotsAndMaster(it.old)...)
			ds[f] = append(ds[f], staleKeys(it.old, it.maxSlots, it.maxInner, it.svc.Spec.TwoScopes())...)
		} else {
			ds[f] = appendSlotKeys(ds[f], it.svc.Frontend(), 0, it.maxSlots) // master first
			if it.svc.Spec.TwoScopes() {
				ds[f] = appendInnerKeys(ds[f], it.svc.Frontend(), true, 1, it.maxInner)
			}
		}
	}
	c.applyServices(o, ws, ds)
	c.applyMaglev(o, mg)
}

func (p *upsertPlan) rollbackRevNAT(c *Core, o *op) {
	var rev [2][]uint16
	var md []maps.MemberKey
	var ad []maps.AffinityMatchKey
	var rd []maps.SourceRangeKey
	for it := range p.undone {
		if it.old == nil {
			f := famIndex(it.svc.Family())
			rev[f] = append(rev[f], uint16(it.svc.ID()))
			md = append(md, memberKeysNotIn(table.MemberEntries(it.svc), nil)...)
			ad = append(ad, table.AffinityMatches(it.svc)...)
			rd = append(rd, table.SourceRanges(it.svc)...)
		} else {
			md = append(md, memberKeysNotIn(table.MemberEntries(it.svc), table.MemberEntries(it.old))...)
			ad = append(ad, notIn(table.AffinityMatches(it.svc), table.AffinityMatches(it.old))...)
			rd = append(rd, notIn(table.SourceRanges(it.svc), table.SourceRanges(it.old))...)
		}
	}
	c.applyRevNAT(o, nil, rev)
	c.applyMembers(o, nil, md, nil, ad)
	c.applyRanges(o, nil, rd) // after the old master (or none) is back
}

// rollbackRelease gives back what the services held: their backends'
// references (those left unbound are freed, deleted next) and the IDs of
// new services.
func (p *upsertPlan) rollbackRelease(c *Core, o *op) {
	var fes []lb.L3n4Addr
	for it := range p.live {
		p.unholdAll(c, o, it)
		if it.acquired && it.old == nil {
			fes = append(fes, it.svc.Frontend())
		}
	}
	c.releaseServices(o, fes)
}

// split runs the services of a batch op that a full map failed as one op
// each: those that fit are applied, only the rest fail. (The rollback has
// undone the whole batch; the table is as before it.)
func (p *upsertPlan) split(c *Core, err error) []*op {
	if !errors.Is(err, maps.ErrMapFull) {
		return nil
	}
	var subs []*op
	for i := range p.items {
		if it := &p.items[i]; it.err == nil && it.svc != nil {
			subs = append(subs, c.upsertOp([]*lb.Service{it.spec}, it.to, []int{it.slot}))
		}
	}
	if len(subs) < 2 {
		return nil
	}
	for i := range p.items { // those that failed alone are answered now
		if it := &p.items[i]; it.err != nil || it.svc == nil {
			p.answer(c, it, nil)
		}
	}
	return subs
}

func (p *upsertPlan) finish(c *Core, _ *op, err error) {
	for i := range p.items {
		p.answer(c, &p.items[i], err)
	}
}

// answer answers one service: err is the op's (or, aborted while queued,
// every service's); the service's own failure comes first.
func (p *upsertPlan) answer(c *Core, it *upsertItem, err error) {
	if it.err != nil {
		err = it.err
	}
	r := messages.UpsertReply{}
	if err != nil {
		r.Err = fmt.Errorf("upsert service %s: %w", it.spec.Frontend.L3n4Addr, err)
	} else {
		r.ID, r.Created = it.svc.ID(), it.old == nil
	}
	c.upserted(it.to, it.slot, r)
}

// otherScope returns the frontend spec's service shares its entries'
// address with at the other scope, when one service could claim it: the
// internal scope of a two-scope service, or the external scope of a
// service declared at the internal scope.
func otherScope(spec *lb.Service) (lb.L3n4Addr, bool) {
	fe := spec.Frontend.L3n4Addr
	switch {
	case spec.TwoScopes():
		fe.Scope = lb.ScopeInternal
		return fe, true
	case fe.Scope == lb.ScopeInternal:
		fe.Scope = lb.ScopeExternal
		return fe, true
	}
	return fe, false
}

// checkOtherScope refuses a two-scope service whose internal-scope
// frontend is a service of its own, and a service at an internal-scope
// frontend whose external one is a two-scope service (one key each).
func (c *Core) checkOtherScope(spec *lb.Service) error {
	other, ok := otherScope(spec)
	if !ok {
		return nil
	}
	id, taken := c.byFE.Get(other)
	if !taken {
		return nil
	}
	if spec.TwoScopes() {
		return fmt.Errorf("%w: a service with two backend sets (one traffic policy Local) uses the internal scope of %s, which is service %d", ErrFrontendInUse, spec.Frontend.L3n4Addr, id)
	}
	if s := c.services.stored(id); s != nil && s.twoScopes() {
		return fmt.Errorf("%w: %s is the internal backend set of service %d (%s has two backend sets)", ErrFrontendInUse, spec.Frontend.L3n4Addr, id, other)
	}
	return nil
}

// checkWantedID checks that the service ID want (0: any) is not taken by
// another frontend than fe or by a standalone revNAT entry.
func (c *Core) checkWantedID(fe lb.L3n4Addr, want lb.ServiceID) error {
	if want == 0 {
		return nil
	}
	if other := c.services.stored(want); other != nil && other.frontend() != fe {
		return fmt.Errorf("%w: service ID %d is already registered to %s", ErrServiceIDInUse, want, other.frontend())
	}
	if addr, ok := c.standalone[want]; ok {
		return fmt.Errorf("%w: service ID %d is already registered to revNAT entry %s", ErrServiceIDInUse, want, addr.AddrPort())
	}
	return nil
}

// checkSharedState checks b's state against the one backend k, which the
// service of it does not use yet, has in the other services (one state
// per backend, across services). If b changes it, the entry that gives
// the other services theirs back is added to it.restoreShared: the
// backend is written with the new state before the commit, so a rollback
// needs it. It also reports whether k is bound (planUpsert's one look at
// the index for a backend new to the service).
func (c *Core) checkSharedState(it *upsertItem, b lb.Backend, k lb.L3n4Addr) (bound bool, err error) {
	u, bound := c.users.Get(addrkey.BackendOf(k))
	if !bound || u.one == 0 {
		return bound, nil // no other service uses it
	}
	if err := checkTransition(u.state, b, it.spec.Source); err != nil && !c.droppedEarlier(it, k) {
		return true, err
	}
	if u.state != b.State {
		prev := b
		prev.State = u.state
		it.restoreShared = append(it.restoreShared, table.BackendEntry(prev, u.id))
	}
	return true, nil
}

// droppedEarlier reports whether every service using backend k has its
// frontend upserted without k by an earlier service of it's call (an
// UpsertBatch, a Sync; the last such of the call for each). Called one by
// one, those would have run first and left k free, to be taken as a new
// backend in any state, as after a call that drops it (a terminating
// backend may come back so). An op's queues are the backends it takes,
// not those it drops, so they may run beside it instead: it then holds k
// while they drop it, and the services end as if called one by one.
// Read only when a state transition is refused; an earlier service that
// is invalid or another source's does not count (it fails).
func (c *Core) droppedEarlier(it *upsertItem, k lb.L3n4Addr) bool {
	if it.to == nil {
		return false
	}
	var svcs []*lb.Service
	switch m := it.to.call.(type) {
	case *messages.UpsertBatch:
		svcs = m.Services
	case *messages.Sync:
		svcs = m.Desired
	default:
		return false
	}
	earlier := svcs[:min(it.slot, len(svcs))]
	for id := range c.usersOf(addrkey.BackendOf(k)) {
		s := c.services.stored(id)
		if s == nil {
			return false
		}
		fe := s.frontend()
		j := len(earlier) - 1
		for j >= 0 && (earlier[j] == nil || earlier[j].Frontend.L3n4Addr != fe) {
			j--
		}
		if j < 0 {
			return false
		}
		spec := earlier[j]
		if spec.Source != s.source || spec.Validate() != nil ||
			slices.ContainsFunc(spec.Backends, func(b lb.Backend) bool { return table.BackendKey(b) == k }) {
			return false
		}
	}
	return true
}

// checkTransition checks that backend b may go from state cur to its own.
// The transition rules guard the API's writes. Kubernetes is the truth
// about its endpoints: an address that was terminating may be ready again
// (a new pod on a reused IP, a hostNetwork pod rolled).
func checkTransition(cur lb.BackendState, b lb.Backend, src lb.Source) error {
	if err := lb.ValidateStateTransition(cur, b.State); err != nil && src != lb.SourceKubernetes {
		return fmt.Errorf("backend %s: %w", b.AddrPort(), err)
	}
	return nil
}

// newTableService returns the table's form of spec, backends in slot
// order, IDs to fill in. Its backends are spec's own, put in slot order in
// place: the core owns the services of the messages it is given (the
// façade sends copies), and nothing reads their backends' order after the
// intake (one of these per service is most of a batch's garbage).
func newTableService(spec *lb.Service) *table.Service {
	return newTableServiceIn(spec, new(table.Service), nil)
}

// newTableServiceIn is newTableService in svc, its backend IDs in ids'
// array when it has room (a single call's op reuses both: newService).
func newTableServiceIn(spec *lb.Service, svc *table.Service, ids []lb.BackendID) *table.Service {
	*svc = table.Service{Spec: *spec}
	if svc.Spec.SessionAffinity && svc.Spec.SessionAffinityTimeout == 0 {
		// What the master slot holds, so Get answers the same before and
		// after a restart.
		svc.Spec.SessionAffinityTimeout = lb.DefaultSessionAffinityTimeout
	}
	table.SlotOrder(svc.Spec.Backends, nil)
	if len(svc.Spec.SourceRanges) > 0 {
		// The order restore rebuilds them in.
		svc.Spec.SourceRanges = slices.Clone(svc.Spec.SourceRanges)
		table.SortRanges(svc.Spec.SourceRanges)
	}
	if n := len(svc.Spec.Backends); cap(ids) >= n {
		svc.BackendIDs = ids[:n]
		clear(svc.BackendIDs)
	} else {
		svc.BackendIDs = make([]lb.BackendID, n)
	}
	return svc
}
