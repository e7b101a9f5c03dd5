package engine

import (
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// The ID lease. The allocator owns the ID spaces; the core holds a lease
// of free IDs the allocator granted it in advance (AllocLease), so that a
// single-service call (Upsert, a batch of one) creating a service, or
// adding backends new to the engine, takes its IDs without waiting for
// the allocator. The allocator keeps the lease's service IDs held and its
// backend IDs in use, so it hands none of them to anyone else.
//
// Only the ops of single-service calls use it. A large call's run asks
// the allocator once for all its services, one round trip among many;
// its chunks beside single calls (the bulk lane) drained a lease that
// served them, and the single calls then waited for refills (measured:
// p99 of a single Upsert beside batches 3.1 ms against 1.6 without).
//
// A service ID from the lease is claimed within the Step that took it:
// the op's one service takes its IDs (fromLease) and, nothing being
// awaited, goes on to the backend writes at once, where it tells the
// allocator which frontend got the ID (AllocClaim) and holds it as an
// acquired one (op.svcHolds). So no input, and no snapshot, comes
// between the take and the claim, and a rollback releases the ID as any
// other. A backend ID from the lease is bound in the backend index at
// once, as an acquired one is.
//
// The backend IDs an op frees (their entries deleted) join the lease's
// end when it has room (keepFreed), rather than going back to the
// allocator: it has them in use, as it has the lease's, so an update
// that drops a backend needs no allocator round trip.
//
// The lease is refilled by an op of its own once half of either part is
// used, one at a time. A service the lease cannot serve while a refill is
// in flight waits for it (waitForLease), so that IDs come in the
// allocator's order; otherwise (no refill, a wanted ID, a frontend with a
// standalone revNAT reservation, more fresh backends than a lease holds)
// it asks the allocator as before.
//
// Restarts: a restarted allocator's snapshot (allocBindings) counts the
// lease (service IDs held, backend IDs in use); a claim sent again after
// it finds the binding the snapshot made (from op.svcHolds) and changes
// nothing. A restarted core begins with no lease: its snapshot replaces
// the allocator's state, which forgets the old core's lease.
type idLease struct {
	svc    []lb.ServiceID
	be     []lb.BackendID
	asking bool // a lease op is in flight
	// svcBuf and beBuf are the arrays svc and be are windows of (taking
	// IDs moves a window's start on): a refill moves what is left back to
	// the array's start and adds the grant after it, rather than
	// appending to a window with no room left at its end.
	svcBuf []lb.ServiceID
	beBuf  []lb.BackendID
	// waiting are what waits for the refill in flight: services of
	// single-service calls that the lease could not serve, and requests
	// for an ID by name, which must not reach the allocator before the
	// refill (it may hold that ID for the core). Each counts as a
	// request its op awaits.
	waiting []leaseWaiter
}

// leaseWaiter is a part of op o waiting for the refill: wake sends it on
// once the refill is done.
type leaseWaiter struct {
	o    *op
	wake func()
}

// leaseServes reports whether the lease is on and may serve the service
// of p: an op of a single-service call (of no bulk lane), whose service
// claims what it takes in the same Step (see above).
func (c *Core) leaseServes(p *upsertPlan, o *op) bool {
	return c.cfg.LeaseServiceIDs > 0 && len(p.items) == 1 && o.lane == nil
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
		it.leased = true
	}
	ids := l.be[:n:n]
	l.be = l.be[n:]
	p.grant(c, o, it, id, ids)
	return true
}

// waitForLease makes item i of p wait for the refill in flight, if there
// is one and the item is not one the lease never serves (a standalone
// revNAT entry's frontend, more fresh backends than a lease holds). So
// services get their IDs in the allocator's order (the first service
// after a start takes the lease's first ID, not the one after the
// lease), and a wanted ID the refill brings is taken out of the lease
// before it is asked for. It reports whether the item waits.
func (c *Core) waitForLease(p *upsertPlan, o *op, i int) bool {
	it := &p.items[i]
	if !c.lease.asking || len(it.fresh) > c.cfg.LeaseBackendIDs || (it.old == nil && c.reservedFrontend(it.svc.Frontend())) {
		return false
	}
	c.afterLease(o, func() {
		if !p.fromLease(c, o, i) {
			p.asking = append(p.one[:0], int32(i))
			p.ask(c, o) // a wanted ID is taken out of the lease first
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
// their service IDs from the lease for (in o's current step, the one
// after the take): from then the op holds them as acquired ones.
func (p *upsertPlan) claimLeased(c *Core, o *op) {
	var bs []messages.AllocBinding
	for it := range p.live {
		if it.leased {
			it.leased = false
			bs = append(bs, messages.AllocBinding{Key: it.svc.Frontend(), ID: uint64(it.svc.ID()), Refs: 1})
		}
	}
	if len(bs) == 0 {
		return
	}
	p.roomForHolds(c, o, len(bs))
	o.svcHolds = append(o.svcHolds, bs...)
	c.request(o, ChildAllocator, 0, replyErr, &messages.AllocClaim{ReqID: c.reqID(), Bindings: bs})
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
			c.lease.svc = topUp(&c.lease.svcBuf, c.lease.svc, r.ServiceIDs)
			c.lease.be = topUp(&c.lease.beBuf, c.lease.be, r.BackendIDs)
		}
		return r.Err
	}, &messages.AllocLease{ReqID: c.reqID(), ServiceIDs: p.svc, BackendIDs: p.be})
}

// leaseID is an ID the lease keeps, or is given (an op's freed backend
// IDs come as uint32).
type leaseID interface{ ~int | ~uint16 | ~uint32 }

// topUp returns live, a window of the array *buf, followed by more: in
// *buf, from its start, when it has room for both (taken IDs are copied
// out of the window at once, so nothing else reads its old place), else
// in a new array, which becomes *buf.
func topUp[T, U leaseID](buf *[]T, live []T, more []U) []T {
	b := *buf
	if n := len(live) + len(more); cap(b) < n {
		b = make([]T, 0, n)
	}
	b = b[:copy(b[:len(live)], live)]
	for _, id := range more {
		b = append(b, T(id))
	}
	*buf = b
	return b
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

// keepFreed moves backend IDs an op freed (their entries deleted) into
// the lease, as many as it has room for (Config.LeaseBackendIDs), and
// returns the others. The allocator has them in use, as it has the
// lease's, so no message is needed: an update that drops a backend
// completes without a round trip to the allocator. They join the lease's
// end, after the IDs it was granted. None is kept while the lease is off,
// nor while the core stops.
func (c *Core) keepFreed(freed []uint32) []uint32 {
	l := &c.lease
	room := c.cfg.LeaseBackendIDs - len(l.be)
	if c.cfg.LeaseServiceIDs <= 0 || room <= 0 || c.stopping || len(freed) == 0 {
		return freed
	}
	n := min(room, len(freed))
	l.be = topUp(&l.beBuf, l.be, freed[:n])
	return freed[n:]
}

// leaseBindings adds the lease to an allocator snapshot: its service IDs
// (held) and its backend IDs (in use).
func (c *Core) leaseBindings(bes []lb.BackendID) (leased []lb.ServiceID, _ []lb.BackendID) {
	return slices.Clone(c.lease.svc), append(bes, c.lease.be...)
}
