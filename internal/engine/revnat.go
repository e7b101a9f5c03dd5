package engine

import (
	"fmt"

	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// Standalone revNAT entries: added with RevNATAdd, without a service.

// revNATAddPlan reserves the entry's ID in the allocator (unless the entry
// exists and is re-pointed), then writes it.
type revNATAddPlan struct {
	call  messages.Call
	id    lb.ServiceID
	addr  lb.L3n4Addr
	known bool // re-pointing an existing standalone entry
}

func (c *Core) revNATAdd(m *messages.RevNATAdd) {
	e := m.Entry
	addr := lb.L3n4Addr{Addr: e.Address.Addr, Port: e.Address.Port}
	switch {
	case e.ID == 0:
		c.answer(m, messages.RevNATReply{Err: fmt.Errorf("add revNAT: invalid id \"0\": service ID must be between 1 and 65535")})
		return
	case !addr.Addr.IsValid() || addr.Addr.Zone() != "" || addr.Port == 0:
		c.answer(m, messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: invalid address %q: want IP:PORT with a port between 1 and 65535", e.ID, addr.AddrPort())})
		return
	}
	if s := c.services.stored(e.ID); s != nil {
		c.answer(m, messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: %w %s", e.ID, ErrRevNATOwned, s.frontend())})
		return
	}
	if cur, ok := c.standalone[e.ID]; ok && cur == addr {
		c.answer(m, messages.RevNATReply{Entries: []messages.RevNAT{{ID: e.ID, Address: addr}}})
		return
	}
	c.begin(&op{plan: &revNATAddPlan{call: m, id: e.ID, addr: addr}})
}

func (p *revNATAddPlan) start(c *Core, _ *op) []step {
	_, p.known = c.standalone[p.id]
	return revNATAddSteps
}

// revNATAddSteps are the steps of a revNATAdd op (see on).
var revNATAddSteps = []step{
	{name: StepReserveID, send: on((*revNATAddPlan).reserve)},
	{name: StepWriteRevNAT, send: on((*revNATAddPlan).write)},
}

func (p *revNATAddPlan) reserve(c *Core, o *op) {
	if p.known {
		return
	}
	c.afterLease(o, func() { // the refill may bring p.id
		c.unlease(o, p.id)
		c.request(o, ChildAllocator, 0, replyErr, &messages.AllocReserve{ReqID: c.reqID(), Key: p.addr, ID: p.id})
	})
}

func (p *revNATAddPlan) write(c *Core, o *op) {
	c.applyRevNAT(o, []maps.RevNATEntry{{ID: uint16(p.id), Value: maps.RevNATValue{Address: p.addr.Addr, Port: p.addr.Port}}}, [2][]uint16{})
}

func (p *revNATAddPlan) rollback(*Core, *op) []step { return nil }

func (p *revNATAddPlan) finish(c *Core, _ *op, err error) {
	if err != nil {
		c.answer(p.call, messages.RevNATReply{Err: fmt.Errorf("add revNAT %d: %w", p.id, err)})
		return
	}
	c.standalone[p.id] = p.addr
	c.answer(p.call, messages.RevNATReply{Entries: []messages.RevNAT{{ID: p.id, Address: p.addr}}})
}

// revNATDeletePlan deletes a standalone entry, then frees its ID.
type revNATDeletePlan struct {
	id   lb.ServiceID
	addr lb.L3n4Addr
	to   *waiter
}

// revNATDelete deletes the standalone entry of sid; to gets the outcome.
func (c *Core) revNATDelete(sid lb.ServiceID, to *waiter) {
	if s := c.services.stored(sid); s != nil {
		c.revNATDone(to, fmt.Errorf("delete revNAT %d: %w %s (delete the service)", sid, ErrRevNATOwned, s.frontend()))
		return
	}
	addr, ok := c.standalone[sid]
	if !ok {
		c.revNATDone(to, fmt.Errorf("delete revNAT %d: %w", sid, ErrRevNATNotFound))
		return
	}
	c.begin(&op{plan: &revNATDeletePlan{id: sid, addr: addr, to: to}})
}

func (p *revNATDeletePlan) start(*Core, *op) []step {
	return revNATDeleteSteps
}

// revNATDeleteSteps are the steps of a revNATDelete op (see on).
var revNATDeleteSteps = []step{
	{name: StepDeleteRevNAT, send: on((*revNATDeletePlan).delete), retry: mapRetries},
	{name: StepReleaseID, send: on((*revNATDeletePlan).release)},
}

func (p *revNATDeletePlan) delete(c *Core, o *op) {
	var ds [2][]uint16
	fi := famIndex(table.FamilyOf(p.addr))
	ds[fi] = []uint16{uint16(p.id)}
	c.applyRevNAT(o, nil, ds)
}

func (p *revNATDeletePlan) release(c *Core, o *op) {
	delete(c.standalone, p.id)
	c.request(o, ChildAllocator, 0, replyErr, &messages.AllocDrop{ReqID: c.reqID(), Key: p.addr})
}

func (p *revNATDeletePlan) rollback(*Core, *op) []step { return nil }

func (p *revNATDeletePlan) finish(c *Core, _ *op, err error) {
	if err != nil {
		err = fmt.Errorf("delete revNAT %d: %w", p.id, err)
	}
	c.revNATDone(p.to, err)
}
