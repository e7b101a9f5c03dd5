package engine

import (
	"slices"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// The bulk lane: bounded head-of-line delay behind large calls.
//
// The ops of a large call (UpsertBatch, DeleteBatch or Sync of more than
// one service) are in the call's bulk lane. They enter their queues on
// arrival, as any op does, so the order of ops on one frontend or one
// backend is arrival order. An op of a lane that heads all its queues
// waits here, in the core, until it is admitted; then it begins.
//
// While single-service calls (Upsert, Delete, DeleteByFrontend, a batch
// of one) are about — one was stepped within Config.BulkWindow — the lane
// is throttled:
//   - an op of more than Config.BulkChunk services (a run of services,
//     a run of frontends to delete) is cut when it is admitted: its first
//     BulkChunk services become an op of their own, which takes the op's
//     place at the head of their queues (the services of a run share no
//     queue) and begins; the rest waits, heading the rest of the queues;
//   - an op is admitted only while the bulk ops begun and not complete
//     hold fewer than BulkChunk × BulkInFlight services.
//
// So a single call's requests reach each child behind at most that many
// services of bulk work, not behind every batch queued: the rest waits
// here, not as requests in the children's mailboxes. Admission is
// round-robin over the calls with ops waiting: a small batch behind a
// large sync waits for one chunk of each other call, not for the sync.
//
// With no single-service call about, every op is admitted at once and
// whole, as if there were no lane: a batch or sync on its own keeps the
// throughput of one op per run (one request per child and step). The
// first single call after a quiet BulkWindow may wait behind what was
// admitted then; the next ones wait for at most the budget.
//
// A chunk is an op: a map that refuses its writes fails (and rolls back)
// the services of that chunk, not those of the whole call.

// Bulk lane defaults, chosen by measuring (tests/bench: the latency of a
// single Upsert while eight callers keep UpsertBatch calls of 100
// services in flight, against the batches' own rate meanwhile). In one
// sitting, p99 / batch rate: 16 × 2 8.5–8.7 ms / 15.6–19.0k services/s;
// 8 × 2 5.0–6.7 ms / 15.7–18.9k; 8 × 1 2.6–4.0 ms / 15.9–23.9k; 4 × 1
// 2.6 ms / 12.2–14.2k.
const (
	defaultBulkChunk    = 8
	defaultBulkInFlight = 1
	defaultBulkWindow   = time.Second
)

// bulkLane is the ops of one large call waiting for admission, in order.
type bulkLane struct {
	ops  []*op
	turn uint64 // when it last had an op admitted (0: never)
}

// newLane returns the bulk lane of a call of n services (nil: one
// service, its op begins as soon as it heads its queues).
func newLane(n int) *bulkLane {
	if n <= 1 {
		return nil
	}
	return &bulkLane{}
}

// interactive records that a single-service call came: the bulk lane is
// throttled for Config.BulkWindow.
func (c *Core) interactive() {
	c.lastSingle = c.now()
}

// throttled reports whether a single-service call came within
// Config.BulkWindow.
func (c *Core) throttled() bool {
	return !c.lastSingle.IsZero() && c.now().Sub(c.lastSingle) < c.cfg.BulkWindow
}

// beginOrWait begins o, which heads all its queues, or, when it is an op
// of a bulk lane, lets it wait for admission.
func (c *Core) beginOrWait(o *op) {
	if o.lane == nil {
		c.begin(o)
		return
	}
	if len(o.lane.ops) == 0 {
		c.bulkRing = append(c.bulkRing, o.lane)
	}
	o.lane.ops = append(o.lane.ops, o)
	c.admit()
}

// admit begins waiting bulk ops, one per call in turn, while the budget
// allows (throttled) or all of them. It is not reentrant: an op that
// completes inside begin makes room that the running loop uses.
func (c *Core) admit() {
	if c.admitting || len(c.bulkRing) == 0 {
		return
	}
	c.admitting = true
	for len(c.bulkRing) > 0 {
		throttled := c.throttled()
		if throttled && c.bulkBusy >= c.cfg.BulkChunk*c.cfg.BulkInFlight {
			break
		}
		// The lane that had its last turn longest ago (never first),
		// the oldest of those.
		i := 0
		for j, l := range c.bulkRing {
			if l.turn < c.bulkRing[i].turn {
				i = j
			}
		}
		l := c.bulkRing[i]
		c.turns++
		l.turn = c.turns
		o := l.ops[0]
		if h := c.cut(o, throttled); h != nil {
			o = h // the rest stays first in its lane
		} else {
			l.ops[0] = nil
			l.ops = l.ops[1:]
		}
		if len(l.ops) == 0 {
			l.ops = nil
			c.bulkRing = slices.Delete(c.bulkRing, i, i+1)
		}
		c.begin(o)
	}
	if len(c.bulkRing) == 0 {
		c.bulkRing = nil
	}
	c.admitting = false
}

// weight is the number of services (or frontends) of o: what it counts
// against the bulk budget.
func (o *op) weight() int {
	switch p := o.plan.(type) {
	case *upsertPlan:
		return len(p.items)
	case *deletePlan:
		return len(p.items)
	}
	return 1
}

// cut splits the first Config.BulkChunk services off o, when throttled
// and o is a run of more, and returns them as an op that takes o's place
// at the head of their queues; o, which heads all its queues and has not
// begun, keeps the rest. The services of such an op share no queue (else
// it would be waiting behind itself), so its keys split with them. It
// returns nil when o is to begin whole.
func (c *Core) cut(o *op, throttled bool) *op {
	n := c.cfg.BulkChunk
	if !throttled || o.weight() <= n {
		return nil
	}
	head := &op{lane: o.lane, since: o.since}
	switch p := o.plan.(type) {
	case *upsertPlan:
		nk := 0
		for i := range p.items[:n] {
			nk += itemKeys(p.items[i].spec)
		}
		head.plan = &upsertPlan{items: p.items[:n:n]}
		head.keys = o.keys[:nk:nk]
		p.items, o.keys = p.items[n:], o.keys[nk:]
	case *deletePlan:
		head.plan = &deletePlan{items: p.items[:n:n]}
		head.keys = o.keys[:n:n]
		p.items, o.keys = p.items[n:], o.keys[n:]
	default:
		return nil // weight 1: not reached
	}
	for _, k := range head.keys {
		q := c.queues.get(k)
		q.head = head
		c.queues.set(k, q)
	}
	return head
}

// itemKeys is the number of queue keys upsertOp gives spec
// (appendUpsertKeys).
func itemKeys(spec *lb.Service) int {
	n := 1 + len(spec.Backends)
	if _, ok := otherScope(spec); ok {
		n++
	}
	return n
}
