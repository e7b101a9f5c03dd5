package engine

import (
	"slices"
	"time"

	"github.com/actorlb/actorlb/internal/addrkey"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// The ID lease: free IDs the allocator granted the core in advance
// (messages.AllocLease) and keeps out of use until the core binds them.
// An upsert whose IDs the lease covers does not wait for an allocator
// round trip: it takes its IDs from the lease when it begins, and the
// AllocBind that tells the allocator travels beside its backend writes.
//
// The lease is first asked for by the first upsert that needs IDs, after
// its AllocAcquire: the allocator hands out IDs in its order, so a fresh
// engine's first service gets ID 1 and the lease the IDs after it.
//
// The allocator stays the owner of the ID spaces. Leased IDs are held
// there, so it never hands them to anyone else; an ID leaves the lease
// when a request naming it is handled (bound if the request succeeds,
// free if it fails). The allocator's snapshot after a crash (transport.go)
// holds the lease and the leased IDs of requests not yet answered, so a
// resent AllocBind finds them leased again.

// lease is the IDs the core may hand out without asking.
type lease struct {
	svcs []lb.ServiceID
	bes  []lb.BackendID
	// asking: a lease op is in flight; dryUntil: the allocator granted
	// less than asked (its space runs low), so the core does not ask
	// again before then.
	asking   bool
	dryUntil time.Time
}

// leaseRetry is how long the core waits before asking again after the
// allocator granted less than asked.
const leaseRetry = time.Second

// leasedIDs are the leased IDs a request to the allocator names: they are
// the core's until the request is answered (pendingReq.leased).
type leasedIDs struct {
	svcs []lb.ServiceID
	bes  []lb.BackendID
}

// takeService takes a service ID from the lease: want if it is leased
// (want != 0), else the oldest (IDs are handed out in the allocator's
// order). It reports false when the lease has none to give.
func (l *lease) takeService(want lb.ServiceID) (lb.ServiceID, bool) {
	if want != 0 {
		i := slices.Index(l.svcs, want)
		if i < 0 {
			return 0, false
		}
		l.svcs = slices.Delete(l.svcs, i, i+1)
		return want, true
	}
	if len(l.svcs) == 0 {
		return 0, false
	}
	id := l.svcs[0]
	l.svcs = l.svcs[1:]
	return id, true
}

// takeBackend takes the oldest backend ID of the lease (there is one).
func (l *lease) takeBackend() lb.BackendID {
	id := l.bes[0]
	l.bes = l.bes[1:]
	return id
}

// leasable reports whether fe may be bound to a leased ID: not a frontend
// whose allocator key is also a standalone revNAT entry's (any protocol,
// external scope), which the allocator binds to its reservation.
func leasable(fe lb.L3n4Addr) bool {
	return fe.Protocol != lb.ANY || fe.Scope != lb.ScopeExternal
}

// refillLease asks the allocator for IDs when the lease is below half of
// Config.LeaseServices or LeaseBackends, unless an ask is in flight, the
// core is not serving, or the allocator ran short less than leaseRetry
// ago.
func (c *Core) refillLease() {
	l := &c.lease
	ns, nb := c.cfg.LeaseServices-len(l.svcs), c.cfg.LeaseBackends-len(l.bes)
	if l.asking || !c.ready || c.readyErr != nil || c.stopping ||
		(2*ns <= c.cfg.LeaseServices && 2*nb <= c.cfg.LeaseBackends) {
		return
	}
	if !l.dryUntil.IsZero() && c.now().Before(l.dryUntil) {
		return
	}
	l.asking = true
	c.begin(&op{plan: &leasePlan{want: messages.AllocLease{Services: max(ns, 0), Backends: max(nb, 0)}}, background: true})
}

// leasePlan asks the allocator for a lease.
type leasePlan struct {
	want messages.AllocLease
	got  *messages.AllocLeased
}

func (p *leasePlan) start(*Core, *op) []step { return leaseSteps }

// leaseSteps are the steps of a lease op (see on).
var leaseSteps = []step{{name: StepLease, send: on((*leasePlan).ask)}}

func (p *leasePlan) ask(c *Core, o *op) {
	m := p.want
	m.ReqID = c.reqID()
	c.request(o, ChildAllocator, 0, leased, &m)
}

// leased folds the allocator's AllocLeased.
func leased(o *op, _ int, reply any) error {
	r := reply.(*messages.AllocLeased)
	if r.Err == nil {
		o.plan.(*leasePlan).got = r
	}
	return r.Err
}

func (p *leasePlan) rollback(*Core, *op) []step { return nil }

func (p *leasePlan) finish(c *Core, _ *op, err error) {
	l := &c.lease
	l.asking = false
	if err != nil || p.got == nil {
		if err != nil && !c.stopping {
			c.log.WithError(err).Debug("lease IDs")
		}
		l.dryUntil = c.now().Add(leaseRetry)
		return
	}
	l.svcs = append(l.svcs, p.got.ServiceIDs...)
	l.bes = append(l.bes, p.got.BackendIDs...)
	if len(p.got.ServiceIDs) < p.want.Services || len(p.got.BackendIDs) < p.want.Backends {
		l.dryUntil = c.now().Add(leaseRetry)
	}
}

// leaseItem gives it its IDs from the lease when the lease covers them
// all: its service ID if it is a new service, and an ID for each backend
// it acquires: the one the table has for a backend in use, else a leased
// one. (The services of one op share no backend: they wait in one queue
// per backend. And no other op on these backends is in flight, so the
// table's IDs are the allocator's.) It records the AllocBind that tells
// the allocator (it.bind) and reports whether it did.
func (c *Core) leaseItem(it *upsertItem) bool {
	l := &c.lease
	if it.old == nil && (!leasable(it.svc.Frontend()) || len(l.svcs) == 0 && it.spec.Frontend.ID == 0) {
		return false
	}
	need := 0
	for _, k := range it.acquire {
		if _, ok := c.users.Get(addrkey.BackendOf(k)); !ok {
			need++
		}
	}
	if need > len(l.bes) {
		return false
	}
	b := &messages.AllocBind{Frontend: it.svc.Frontend(), Backends: it.acquire, BackendIDs: make([]lb.BackendID, len(it.acquire))}
	var ids leasedIDs
	if it.old == nil {
		id, ok := l.takeService(it.spec.Frontend.ID)
		if !ok {
			return false // a wanted ID the lease does not have
		}
		b.ServiceID = id
		it.svc.Spec.Frontend.ID = id
		ids.svcs = []lb.ServiceID{id}
	}
	if need > 0 {
		ids.bes = make([]lb.BackendID, 0, need)
	}
	for j, k := range it.acquire {
		u, used := c.users.Get(addrkey.BackendOf(k))
		id := u.id
		if !used {
			id = l.takeBackend()
			ids.bes = append(ids.bes, id)
		}
		b.BackendIDs[j] = id
		it.svc.BackendIDs[it.acquireIdx[j]] = id
	}
	it.bind, it.leased = b, ids
	return true
}

// requestLeased is request for a request to the allocator that names the
// leased IDs ids: they count in the allocator's snapshot until answered.
func (c *Core) requestLeased(o *op, item int, f fold, msg messages.Request, ids leasedIDs) {
	c.request(o, ChildAllocator, item, f, msg)
	if p, ok := c.reqs.get(msg.RequestID()); ok {
		p.leased = ids
	}
}

// lateRequest makes the request id of o late: o's steps go on without
// its reply, up to a step that settles.
func (c *Core) lateRequest(o *op, id uint64) {
	if p, ok := c.reqs.get(id); ok && !p.late {
		p.late = true
		o.pending--
		o.late++
	}
}

// leasedOut returns the IDs of the lease and those leased IDs that
// requests not yet answered name: what the allocator's snapshot holds
// as leased.
func (c *Core) leasedOut() (svcs []lb.ServiceID, bes []lb.BackendID) {
	svcs = slices.Clone(c.lease.svcs)
	bes = slices.Clone(c.lease.bes)
	for _, p := range c.reqs.all {
		svcs = append(svcs, p.leased.svcs...)
		bes = append(bes, p.leased.bes...)
	}
	return svcs, bes
}
