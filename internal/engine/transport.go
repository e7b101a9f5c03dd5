package engine

import (
	"fmt"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// fold folds a child's reply into its op: item says which of the plan's
// items the request was for. It returns the reply's error.
type fold func(o *op, item int, reply any) error

// pendingReq is a request sent to a child and not yet answered: 48
// bytes, one for every request (some five an upsert), so its fields are
// no wider than they need be; answered ones are reused (pendingTable's
// take and recycle).
type pendingReq struct {
	op    *op
	msg   messages.Request
	fold  fold
	item  int32 // an index into the op's plan
	tries int32
	child uint8 // its index in Children
	// sent is set once the request has left the outbox: only requests a
	// child has seen are sent again when it fails.
	sent bool
	// lent: msg's slices are the core's spares, lent to the child until
	// it answers (spares.go); cleared when the request is sent again.
	lent bool
}

// childName returns the name of the child p is for.
func (p *pendingReq) childName() string { return Children[p.child] }

// replyErr is the fold of replies that only carry an error.
func replyErr(_ *op, _ int, r any) error {
	switch r := r.(type) {
	case *messages.MapApplied:
		return r.Err
	case *messages.AllocDone:
		return r.Err
	case *messages.MaglevApplied:
		return r.Err
	}
	return nil
}

// reqID reserves the ID of a request: build the request with it and pass
// it to request at once.
func (c *Core) reqID() uint64 { return c.reqs.reserve() }

// request queues msg (its ID from reqID) for child, a request of o's
// current step; f folds its reply (for item). Folds are plain functions,
// not bound methods, so that a request allocates only itself.
func (c *Core) request(o *op, child string, item int, f fold, msg messages.Request) {
	c.send(o, child, item, f, msg, false)
}

// send is request; lent says msg's slices were made for it alone (from
// the core's spares, or new) and go to the spares once the child answers
// (spares.go).
func (c *Core) send(o *op, child string, item int, f fold, msg messages.Request, lent bool) {
	id := msg.RequestID()
	p := c.reqs.take()
	*p = pendingReq{op: o, child: uint8(childIndex(child)), msg: msg, item: int32(item), fold: f, lent: lent}
	o.pending++
	c.reqs.set(id, p)
	c.enqueue(p)
}

// enqueue puts p in its child's outbox. Every request goes this way, first
// sends and resends alike, so that a child gets them in the order they were
// made (after a crash: the allocator's fresh snapshot first, see
// snapshotFirst).
func (c *Core) enqueue(p *pendingReq) {
	if p.sent {
		// Sent again: the first copy may still be in the child's
		// mailbox when this one is answered, so its slices stay its.
		p.lent = false
	}
	p.sent = false
	c.outbox[p.child] = append(c.outbox[p.child], p)
	if p.op != nil && len(p.op.keys) >= urgentKeys {
		c.urgent = true
	}
}

// urgentKeys is the size (queue keys: services and backends) from which
// an op's requests make the outbox urgent (Urgent).
const urgentKeys = 256

// Urgent reports whether the outbox holds a request of a large op (of
// urgentKeys or more): the children have work worth starting on at once,
// rather than after the inputs queued meanwhile (the supervisor sends the
// outbox after each input while it is urgent, and otherwise once those
// inputs are stepped, so that small requests travel together).
func (c *Core) Urgent() bool { return c.urgent }

// onReply folds a child's reply to request id into its op.
func (c *Core) onReply(id uint64, reply any) {
	p, ok := c.reqs.get(id)
	if !ok {
		return // a duplicate reply to a request that was resent
	}
	c.reqs.del(id)
	o := p.op
	o.pending--
	if p.fold != nil {
		o.fail(p.fold(o, int(p.item), reply))
	}
	if p.lent {
		c.spares.giveBack(p.msg)
	}
	c.reqs.recycle(p)
	c.advance(o)
}

// failRequest answers a pending request with err (the child could not).
func (c *Core) failRequest(id uint64, err error) {
	p, ok := c.reqs.get(id)
	if !ok {
		return
	}
	c.reqs.del(id)
	o := p.op
	o.pending--
	o.fail(err)
	c.reqs.recycle(p)
	c.advance(o)
}

// onChildStopped resends what a child that stopped for good and was
// spawned again owed (restoring the allocator first if it was the
// allocator).
func (c *Core) onChildStopped(name string) {
	c.cfg.Restarts[name]++
	c.log.WithField("child", name).Warn("child actor stopped; respawning it")
	if name == ChildAllocator {
		c.snapshotAllocator(nil)
	}
	for id, p := range c.reqs.all {
		if p.childName() == name && p.sent {
			c.resend(id, p)
		}
	}
}

// onChildFailed resends what a child restarted in place owed.
func (c *Core) onChildFailed(m ChildFailed) {
	if m.Child == ChildAllocator {
		c.snapshotAllocator(nil)
	}
	// Every request the child owed is sent again: the one it failed on
	// (counted against its retries) and those it had buffered or queued
	// (map owners buffer requests until they flush; resending is
	// idempotent, and a second reply is ignored).
	failed := map[uint64]bool{}
	messages.EachRequest(m.Failed, func(msg any) {
		if r, ok := msg.(messages.Request); ok {
			failed[r.RequestID()] = true
		}
	})
	for id, p := range c.reqs.all {
		if p.childName() != m.Child || !p.sent {
			continue // requests still in the outbox go to the new incarnation anyway
		}
		switch {
		case failed[id]:
			c.resend(id, p)
		case m.Child != ChildAllocator:
			// Map owners only: their requests are idempotent. The
			// allocator's are not (a second acquire takes a second
			// reference); its queued requests survive the restart.
			c.resent++
			c.enqueue(p)
		}
	}
}

// resend sends a lost request again, counting a try; past MaxResends the
// request fails. A lost allocator snapshot is not sent again: the fresh
// one sent after the crash supersedes it.
func (c *Core) resend(id uint64, p *pendingReq) {
	if _, ok := p.msg.(*messages.AllocRestore); ok {
		c.onReply(id, &messages.AllocDone{ReqID: id})
		return
	}
	p.tries++
	if int(p.tries) > c.cfg.MaxResends {
		c.failRequest(id, fmt.Errorf("%s failed %d times on this request", p.childName(), p.tries))
		return
	}
	c.resent++
	c.enqueue(p)
}

// allocBindings computes the allocator's state from the table: the
// service bindings (standalone revNAT IDs reserved, and the service IDs
// ops in flight hold) and the backend IDs in use: every backend the index
// binds (in use by a service or held by an op) and the IDs ops freed and
// have not let be reused yet; and the service IDs of the lease (held;
// its backend IDs are in bes).
func (c *Core) allocBindings() (svcs []messages.AllocBinding, bes []lb.BackendID, leased []lb.ServiceID) {
	svcs = make([]messages.AllocBinding, 0, c.services.len()+len(c.standalone))
	for id, s := range c.services.all {
		svcs = append(svcs, messages.AllocBinding{Key: s.frontend(), ID: uint64(id), Refs: 1})
	}
	for id, addr := range c.standalone {
		svcs = append(svcs, messages.AllocBinding{Key: addr, ID: uint64(id)})
	}
	bes = make([]lb.BackendID, 0, c.users.Len())
	for _, u := range c.users.All {
		bes = append(bes, u.id)
	}
	// An op that holds IDs always awaits a reply, or the lease.
	ops := map[*op]bool{}
	for _, p := range c.reqs.all {
		ops[p.op] = true
	}
	for _, w := range c.lease.waiting {
		ops[w.o] = true
	}
	for o := range ops {
		svcs = append(svcs, o.svcHolds...)
		for _, id := range o.freed {
			bes = append(bes, lb.BackendID(id))
		}
	}
	leased, bes = c.leaseBindings(bes)
	return svcs, bes, leased
}

// snapshotPlan sends the allocator its state, rebuilt from the table and
// the IDs held by ops in flight, ahead of every request queued for it.
type snapshotPlan struct {
	msg *messages.AllocRestore
	// failed runs if the allocator refuses the snapshot (nil: log it).
	failed func(c *Core, err error)
}

// snapshotAllocator begins the op that restores the allocator from the
// table (after an allocator restart, or at the end of restore).
func (c *Core) snapshotAllocator(failed func(c *Core, err error)) {
	svcs, bes, leased := c.allocBindings()
	c.begin(&op{plan: &snapshotPlan{
		msg:    &messages.AllocRestore{Services: svcs, BackendIDs: bes, Leased: leased},
		failed: failed,
	}})
}

func (p *snapshotPlan) start(*Core, *op) []step {
	return snapshotSteps
}

// snapshotSteps are the steps of a snapshot op (see on).
var snapshotSteps = []step{{name: StepRestoreAllocator, send: on((*snapshotPlan).send)}}

func (p *snapshotPlan) send(c *Core, o *op) {
	p.msg.ReqID = c.reqID()
	c.request(o, ChildAllocator, 0, replyErr, p.msg)
	c.snapshotFirst(p.msg.ReqID)
}

func (p *snapshotPlan) rollback(*Core, *op) []step { return nil }

func (p *snapshotPlan) finish(c *Core, _ *op, err error) {
	if err == nil {
		return
	}
	if p.failed != nil {
		p.failed(c, err)
		return
	}
	// A bug, or maps changed under us.
	c.log.WithError(err).Error("restore allocator after restart")
}

// snapshotFirst moves the allocator snapshot id to the front of the
// allocator's outbox. The requests queued there are not in the snapshot,
// so they must reach the allocator after it; an older snapshot still queued
// is superseded by this one and answered as done.
func (c *Core) snapshotFirst(id uint64) {
	ps := c.outbox[childIndex(ChildAllocator)]
	snap, _ := c.reqs.get(id)
	out := make([]*pendingReq, 0, len(ps))
	out = append(out, snap)
	var stale []uint64
	for _, p := range ps {
		if p == snap {
			continue
		}
		if r, ok := p.msg.(*messages.AllocRestore); ok {
			stale = append(stale, r.ReqID)
			continue
		}
		out = append(out, p)
	}
	c.outbox[childIndex(ChildAllocator)] = out
	for _, sid := range stale {
		c.onReply(sid, &messages.AllocDone{ReqID: sid})
	}
}
