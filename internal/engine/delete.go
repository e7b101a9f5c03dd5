package engine

import (
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// deletePlan deletes the services of distinct frontends: one for Delete,
// several for DeleteBatch, with one request per child (and family) at each
// step for all of them. A frontend without a service fails alone
// (ErrServiceNotFound); a map write that fails fails the op, whose
// rollback writes the services back.
//
// Steps, in make-before-break order: delete the services' masters and
// slots; commit (they leave the table, and the backends no service uses
// any more are unbound); delete those backends and, beside them, the
// revNAT entries (with the lb_members and affinity entries, the Maglev
// tables and source ranges keyed by the service IDs); let the freed
// backend IDs and the service IDs be reused.
type deletePlan struct {
	items     []deleteItem
	committed bool
	releaser
	// pooled is the object the plan is part of when it is a single
	// call's (singleDeleteOp), reused once its op is complete (opPool).
	pooled *deleteOne
}

// deleteOne is the op of a delete of one frontend, allocated together;
// a single call's also holds its item and waiter, and is reused once
// complete (opPool).
type deleteOne struct {
	op   op
	plan deletePlan
	key  [1]qkey
	item [1]deleteItem
	w    waiter
	old  oldService // the service it deletes (kept when reused)
}

// singleDeleteOp is deleteOp for a Delete or DeleteByFrontend call of
// item (its waiter unset): its op, plan, item and waiter are one reused
// object (opPool).
func (c *Core) singleDeleteOp(call messages.Call, item deleteItem) *op {
	d := c.ops.takeDelete()
	d.w.init(call, waitDelete, 1)
	item.to = &d.w
	d.item[0] = item
	d.plan.items, d.plan.pooled = d.item[:], d
	d.key[0] = feQueue(item.fe)
	d.op.plan, d.op.keys = &d.plan, d.key[:]
	return &d.op
}

// deleteItem is one frontend of a delete plan.
type deleteItem struct {
	fe   lb.L3n4Addr
	want lb.ServiceID // the service must still have this ID (0: any)
	as   lb.Source    // the writer: the service must be of this source
	to   *waiter
	slot int

	old *table.Service // what start found
	err error          // this frontend failed alone
}

func (c *Core) deleteOp(items []deleteItem) *op {
	var o *op
	if len(items) == 1 {
		// A single call's op: the op, its plan and its one key in one
		// allocation.
		d := &deleteOne{}
		d.plan.items = items
		d.op.plan, d.op.keys = &d.plan, d.key[:]
		o = &d.op
	} else {
		o = &op{plan: &deletePlan{items: items}, keys: make([]qkey, len(items))}
	}
	for i, it := range items {
		o.keys[i] = feQueue(it.fe)
	}
	return o
}

func (p *deletePlan) start(c *Core, _ *op) []step {
	live := 0
	for i := range p.items {
		it := &p.items[i]
		id, ok := c.byFE.Get(it.fe)
		if !ok || (it.want != 0 && id != it.want) {
			it.err = ErrServiceNotFound
			continue
		}
		var old *table.Service
		if p.pooled != nil {
			old = p.pooled.old.read(&c.services, c.services.stored(id))
		} else {
			old = c.services.get(id)
		}
		if old.Spec.Source != it.as {
			it.err = ownedError(old, it.as)
			continue
		}
		it.old = old
		live++
	}
	if live == 0 {
		return nil
	}
	return deleteSteps
}

// deleteSteps are the steps of a delete op (see on).
var deleteSteps = []step{
	{name: StepDeleteService, send: on((*deletePlan).deleteServices), retry: mapRetries},
	{name: StepCommit, send: on((*deletePlan).commit)},
	// One step: nothing points at the backends the op freed nor at the
	// entries keyed by the service ID once the master and slots are gone.
	{name: StepDeleteBackendsRevNAT, send: on((*deletePlan).deleteFreedAndRevNAT), retry: mapRetries},
	{name: StepReleaseServiceID, send: on((*deletePlan).releaseServiceIDs)},
}

// deleteFreedAndRevNAT deletes the backends that became free, and beside
// them the services' revNAT entries and what else is keyed by their IDs.
func (p *deletePlan) deleteFreedAndRevNAT(c *Core, o *op) {
	p.deleteFreed(c, o)
	p.deleteRevNAT(c, o)
}

// live yields the frontends that have a service to delete.
func (p *deletePlan) live(yield func(*deleteItem) bool) {
	for i := range p.items {
		if it := &p.items[i]; it.old != nil && it.err == nil && !yield(it) {
			return
		}
	}
}

func (p *deletePlan) deleteServices(c *Core, o *op) {
	var n [2]int
	for it := range p.live {
		n[famIndex(it.old.Family())] += keyCount(it.old)
	}
	var ds [2][]maps.ServiceKey
	for f := range ds {
		if n[f] > 0 {
			ds[f] = c.spares.svcDeletes.take(n[f])
		}
	}
	for it := range p.live {
		f := famIndex(it.old.Family())
		ds[f] = appendAllKeys(ds[f], it.old) // master first
	}
	c.lendServices(o, [2][]maps.ServiceEntry{}, ds)
}

// commit drops the services from the table; their backends that no
// other service uses (nor an op holds) are unbound, their IDs freed (a
// backend services of the op shared, once: by the drop that leaves it
// unbound). The op holds the service IDs until it releases them.
func (p *deletePlan) commit(c *Core, o *op) {
	var n [2]int // the most backends the drops can free
	for it := range p.live {
		n[famIndex(it.old.Family())] += len(it.old.Spec.Backends)
	}
	p.expectFrees(o, n)
	for it := range p.live {
		c.backendsLeft(it.old, nil)
		fam := it.old.Family()
		c.drop(it.old, func(id lb.BackendID) { p.free(o, fam, id) })
		o.svcHolds = append(o.svcHolds, messages.AllocBinding{Key: it.fe, ID: uint64(it.old.ID()), Refs: 1})
	}
	p.committed = true
}

func (p *deletePlan) deleteRevNAT(c *Core, o *op) {
	var rev [2][]uint16
	var md []maps.MemberKey
	var ad []maps.AffinityMatchKey
	var mg maglevs
	var rd []maps.SourceRangeKey
	for it := range p.live {
		f := famIndex(it.old.Family())
		rev[f] = append(rev[f], uint16(it.old.ID()))
		mg.drop(it.old)
		md = append(md, memberKeysNotIn(table.MemberEntries(it.old), nil)...)
		ad = append(ad, table.AffinityMatches(it.old)...)
		rd = append(rd, table.SourceRanges(it.old)...)
	}
	c.applyRevNAT(o, nil, rev)
	c.applyMembers(o, nil, md, nil, ad) // before the service ID can be reused
	c.applyMaglev(o, mg)                // the same
	c.applyRanges(o, nil, rd)           // the same (the master is gone)
}

// releaseServiceIDs lets the freed backend IDs be reused and gives the
// service IDs back: one allocator round trip, the last step.
func (p *deletePlan) releaseServiceIDs(c *Core, o *op) {
	p.reuse(c, o)
	var fes []lb.L3n4Addr
	for it := range p.live {
		fes = append(fes, it.fe)
	}
	c.releaseServices(o, fes)
}

// rollback writes the services back (before the commit, nothing else was
// changed).
func (p *deletePlan) rollback(*Core, *op) []step {
	if p.committed {
		return nil
	}
	return deleteRollbackSteps
}

// deleteRollbackSteps are the steps of a rollback of a delete op (see on).
var deleteRollbackSteps = []step{{name: StepRollbackService, send: on((*deletePlan).rewriteServices), retry: mapRetries}}

func (p *deletePlan) rewriteServices(c *Core, o *op) {
	var ws [2][]maps.ServiceEntry
	for it := range p.live {
		f := famIndex(it.old.Family())
		ws[f] = append(ws[f], table.SlotsAndMaster(it.old)...)
	}
	c.applyServices(o, ws, [2][]maps.ServiceKey{})
}

func (p *deletePlan) finish(c *Core, _ *op, err error) {
	for i := range p.items {
		it := &p.items[i]
		e := err
		if it.err != nil {
			e = it.err
		}
		r := messages.DeleteReply{}
		if e != nil {
			what := it.fe.String()
			if it.want != 0 {
				what = fmt.Sprint(it.want)
			}
			r.Err = fmt.Errorf("delete service %s: %w", what, e)
		} else {
			r.ID = it.old.ID()
		}
		c.deleted(it.to, it.slot, r)
	}
}
