package engine

import (
	"slices"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/table"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// queuesKeep is the most keys the queue table may have held and still be
// kept once empty.
const queuesKeep = 1 << 15

// qkey names a queue: that of a frontend, or that of a backend (whose
// state an op writes).
type qkey struct {
	// The port first: the fields then have no padding between them (22
	// bytes), so the key is hashed as one run of memory rather than field
	// by field.
	port       uint16
	addrkey.IP // no pointer: hashed as plain bytes
	proto      lb.L4Type
	scope      lb.Scope
	backend    bool
}

func feQueue(a lb.L3n4Addr) qkey {
	return qkey{IP: addrkey.IPOf(a.Addr), port: a.Port, proto: a.Protocol, scope: a.Scope}
}

func beQueue(a lb.L3n4Addr) qkey {
	k := feQueue(a)
	k.backend = true
	return k
}

// l3n4 returns the address the queue is for.
func (k qkey) l3n4() lb.L3n4Addr {
	return lb.L3n4Addr{Addr: k.Addr(), Port: k.port, Protocol: k.proto, Scope: k.scope}
}

// queue is the ops waiting on one key: the one running (or about to) and
// those behind it. Most queues hold one op, which needs no allocation.
type queue struct {
	head *op
	rest *[]*op // nil: none behind head (the entry is 16 bytes)
}

// behind returns the ops behind the head, in order.
func (q queue) behind() []*op {
	if q.rest == nil {
		return nil
	}
	return *q.rest
}

// last is the op that entered the queue last (nil: no queue).
func (q queue) last() *op {
	if r := q.behind(); len(r) > 0 {
		return r[len(r)-1]
	}
	return q.head
}

// all yields the ops of the queue in order.
func (q queue) all(yield func(*op) bool) {
	if !yield(q.head) {
		return
	}
	for _, o := range q.behind() {
		if !yield(o) {
			return
		}
	}
}

// opKeys are the queues of an op on fe writing backends bs (validated, so
// without duplicates).
func opKeys(fe lb.L3n4Addr, bs []lb.Backend) []qkey {
	return appendOpKeys(make([]qkey, 0, 1+len(bs)), fe, bs)
}

// appendOpKeys appends the queue keys of fe and bs to keys.
func appendOpKeys(keys []qkey, fe lb.L3n4Addr, bs []lb.Backend) []qkey {
	keys = append(keys, feQueue(fe))
	for _, b := range bs {
		keys = append(keys, beQueue(table.BackendKey(b)))
	}
	return keys
}

// dequeue takes a completed op out of its queues (it heads each) and
// begins the ops it was the last to block. While no op waits behind
// another (the common case: ops on keys of their own), each of o's
// queues holds o alone and leaves the table without being looked up.
func (c *Core) dequeue(o *op) {
	if c.behind == 0 {
		// Last key first: an op's keys come in runs of addresses, whose
		// slots in the queue table are runs too (queueTable.home), and a
		// delete moves back the entries after it up to an empty slot.
		// Taken first to last, each key of a run had the rest of the run
		// to look at (and move back) after it; last to first, the slot
		// after each is mostly empty already.
		for _, k := range slices.Backward(o.keys) {
			c.queues.del(k)
		}
		c.queuesEmptied()
		return
	}
	for _, k := range o.keys {
		q := c.queues.get(k)
		rest := q.behind()
		if len(rest) == 0 {
			c.queues.del(k)
			c.queuesEmptied()
			continue
		}
		h := rest[0]
		q.head = h
		if rest = rest[1:]; len(rest) == 0 {
			q.rest = nil
		} else {
			*q.rest = rest
		}
		c.queues.set(k, q)
		c.behind--
		h.blocked--
		if h.blocked == 0 {
			c.beginOrWait(h)
		}
	}
}

// queuesEmptied gives the queue table a new map once it is empty, if it
// has held more than queuesKeep keys: Go maps never shrink, and a burst
// (a large Sync queues an op per service and backend) would keep its
// table for good. Up to queuesKeep keys it is kept, so that bursts of
// batches do not grow it again each time.
func (c *Core) queuesEmptied() {
	if c.queues.len() == 0 && c.queuesPeak > queuesKeep {
		c.queues = queueTable{}
		c.queuesPeak = 0
	}
}
