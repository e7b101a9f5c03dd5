package engine

import (
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// The ID lease. The allocator owns the ID spaces; the core holds a lease
// of free IDs the allocator granted it in advance (AllocLease), so that a
// small op (at most Config.BulkChunk services: a single call, or a chunk
// of a large call beside one) creating a service, or adding backends new
// to the engine, takes its IDs without waiting for the allocator. The
// allocator keeps the lease's service IDs held and its backend IDs in
// use, so it hands none of them to anyone else.
//
// A service ID from the lease is the op's, unclaimed (op.leased), until
// the op's next step tells the allocator which frontend it went to
// (AllocClaim, sent beside the backend writes); then it is one of the
// op's service IDs (op.svcHolds) as an acquired one is. A rollback before
// the claim puts the ID back in the lease; after it, it releases the ID
// as any other. A backend ID from the lease is bound in the backend index
// at once, as an acquired one is.
//
// The lease is refilled by an op of its own once half of either part is
// used, one at a time. When it cannot serve a service (empty, a wanted
// ID, a frontend with a standalone revNAT reservation, more fresh
// backends than it holds) the service asks the allocator as before.
//
// Restarts: a restarted allocator's snapshot (allocBindings) counts the
// lease (service IDs held, backend IDs in use) and the ops' unclaimed IDs;
// a claim sent again after it finds the binding made and changes nothing.
// A restarted core begins with no lease: its snapshot replaces the
// allocator's state, which forgets the old core's lease.
type idLease struct {
	svc    []lb.ServiceID
	be     []lb.BackendID
	asking bool // a lease op is in flight
	// waiting are what waits for the refill in flight: the services of
	// small ops that the lease could not serve and may serve once it is
	// in, and requests for an ID by name, which must not reach the
	// allocator before the refill (it may hold that ID for the core).
	// Each counts as a request its op awaits.
	waiting []leaseWaiter
}

// leaseWaiter is a part of op o waiting for the refill: wake sends it on
// once the refill is done.
type leaseWaiter struct {
	o    *op
	wake func()
}

// leaseServes reports whether the lease is on and may serve the services
// of p (a small op).
func (c *Core) leaseServes(p *upsertPlan) bool {
	return c.cfg.LeaseServiceIDs > 0 && len(p.items) <= c.cfg.BulkChunk
}

// fromLease gives item i of p, planned and holding its bound backends,
// its service ID (for a new service) and its fresh backends' IDs from the
// lease, if the lease has them all; it reports whether it did.
func (p *upsertPlan) fromLease(c *Core, o *op, i int) bool {
	it := &p.items[i]
	l := &c.lease
	n := len(it.fresh)
	if len(l.be) < n {
		return false
	}
	if it.old == nil && (it.spec.Frontend.ID != 0 || len(l.svc) == 0 || c.reservedFrontend(it.svc.Frontend())) {
		return false
	}
	var id lb.ServiceID
	if it.old == nil {
		id, l.svc = l.svc[0], l.svc[1:]
		o.leased = append(o.leased, id)
		it.leased = true
	}
	ids := l.be[:n:n]
	l.be = l.be[n:]
	p.grant(c, o, it, id, ids)
	return true
}

// waitForLease makes item i of p wait for the refill in flight, if there
// is one and it may serve the item (not a wanted ID, not a standalone
// revNAT entry's frontend, no more fresh backends than a lease holds): so
// that the services of small ops get their IDs in the allocator's order
// (the first service after a start takes the lease's first ID, not the
// one after the lease). It reports whether the item waits.
func (c *Core) waitForLease(p *upsertPlan, o *op, i int) bool {
	it := &p.items[i]
	if !c.lease.asking || len(it.fresh) > c.cfg.LeaseBackendIDs || (it.old == nil && c.reservedFrontend(it.svc.Frontend())) {
		return false
	}
	c.afterLease(o, func() {
		if !p.fromLease(c, o, i) {
			p.ask(c, o, i, p.folder(c)) // a wanted ID is taken out of the lease first
		}
	})
	return true
}

// afterLease runs wake, part of o's current step, once the refill in
// flight is done (at once when none is).
func (c *Core) afterLease(o *op, wake func()) {
	if !c.lease.asking {
		wake()
		return
	}
	c.lease.waiting = append(c.lease.waiting, leaseWaiter{o: o, wake: wake})
	o.pending++
}

// wakeLeaseWaiters sends on what waited for the refill, once it is done.
func (c *Core) wakeLeaseWaiters() {
	ws := c.lease.waiting
	c.lease.waiting = nil
	for _, w := range ws {
		if w.o.done {
			continue
		}
		w.o.pending--
		w.wake()
	}
	for _, w := range ws {
		if !w.o.done {
			c.advance(w.o)
		}
	}
	c.refillLease()
}

// reservedFrontend reports whether fe is the address of a standalone
// revNAT entry: the allocator gives a new service there that entry's ID.
func (c *Core) reservedFrontend(fe lb.L3n4Addr) bool {
	for _, addr := range c.standalone {
		if addr == fe {
			return true
		}
	}
	return false
}

// unlease takes service ID id out of the lease, if it is there, and asks
// the allocator (in o's current step, before what follows) to unhold it:
// it is wanted by name (a service's wanted ID, a standalone revNAT entry).
func (c *Core) unlease(o *op, id lb.ServiceID) {
	i := slices.Index(c.lease.svc, id)
	if i < 0 {
		return
	}
	c.lease.svc = slices.Delete(c.lease.svc, i, i+1)
	c.request(o, ChildAllocator, 0, replyErr, &messages.AllocUnhold{ReqID: c.reqID(), ServiceIDs: []lb.ServiceID{id}})
}

// claimLeased tells the allocator which frontends the op's services got
// their service IDs from the lease for (in o's current step): from then
// the op holds them as acquired ones.
func (p *upsertPlan) claimLeased(c *Core, o *op) {
	if len(o.leased) == 0 {
		return
	}
	bs := make([]messages.AllocBinding, 0, len(o.leased))
	for it := range p.live {
		if it.leased && !it.claimed {
			it.claimed = true
			bs = append(bs, messages.AllocBinding{Key: it.svc.Frontend(), ID: uint64(it.svc.ID()), Refs: 1})
		}
	}
	o.leased = nil
	o.svcHolds = append(o.svcHolds, bs...)
	c.request(o, ChildAllocator, 0, replyErr, &messages.AllocClaim{ReqID: c.reqID(), Bindings: bs})
}

// unclaimedBack puts it's service ID, from the lease and not claimed,
// back in the lease (a rollback before the claim).
func (c *Core) unclaimedBack(o *op, it *upsertItem) {
	id := it.svc.ID()
	c.lease.svc = append(c.lease.svc, id)
	if i := slices.Index(o.leased, id); i >= 0 {
		o.leased = slices.Delete(o.leased, i, i+1)
	}
	it.leased = false
}

// refillLease begins a lease op when half of either part of the lease is
// used and none is in flight.
func (c *Core) refillLease() {
	l := &c.lease
	ns, nb := c.cfg.LeaseServiceIDs, c.cfg.LeaseBackendIDs
	if ns <= 0 || l.asking || !c.ready || c.stopping || (len(l.svc) > ns/2 && len(l.be) > nb/2) {
		return
	}
	l.asking = true
	c.begin(&op{plan: &leasePlan{svc: ns - len(l.svc), be: max(nb-len(l.be), 0)}})
}

// leasePlan asks the allocator for a lease of svc service IDs and be
// backend IDs, and adds what it grants to the core's lease.
type leasePlan struct{ svc, be int }

func (p *leasePlan) start(*Core, *op) []step { return leaseSteps }

// leaseSteps are the steps of a lease op (see on).
var leaseSteps = []step{{name: StepLeaseIDs, send: on((*leasePlan).send)}}

func (p *leasePlan) send(c *Core, o *op) {
	c.request(o, ChildAllocator, 0, func(_ *op, _ int, reply any) error {
		r, ok := reply.(*messages.AllocLeased)
		if !ok {
			return replyErr(o, 0, reply)
		}
		if r.Err == nil {
			c.lease.svc = append(c.lease.svc, r.ServiceIDs...)
			c.lease.be = append(c.lease.be, r.BackendIDs...)
		}
		return r.Err
	}, &messages.AllocLease{ReqID: c.reqID(), ServiceIDs: p.svc, BackendIDs: p.be})
}

func (p *leasePlan) rollback(*Core, *op) []step { return nil }

func (p *leasePlan) finish(c *Core, _ *op, err error) {
	c.lease.asking = false
	if err != nil {
		// The allocator failed it more than MaxResends times (or the core
		// stops): the services ask the allocator until the next refill.
		c.log.WithError(err).Debug("lease IDs from the allocator")
	}
	if !c.stopping {
		c.wakeLeaseWaiters()
	}
}

// leaseBindings adds the lease to an allocator snapshot: the service IDs
// of the lease and those ops took from it and have not claimed (held),
// and the backend IDs of the lease (in use).
func (c *Core) leaseBindings(bes []lb.BackendID, ops map[*op]bool) (leased []lb.ServiceID, _ []lb.BackendID) {
	leased = slices.Clone(c.lease.svc)
	for o := range ops {
		leased = append(leased, o.leased...)
	}
	return leased, append(bes, c.lease.be...)
}
