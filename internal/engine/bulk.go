package engine

// The bulk lane: bounded head-of-line delay behind large calls.
//
// A large call (UpsertBatch, DeleteBatch or Sync of more than one
// service) is cut into chunks of at most Config.BulkChunk services, each
// its own op. Every chunk enters its queues on arrival, as any op does, so
// the order of ops on one frontend or one backend is arrival order. But a
// chunk that heads its queues begins only while the bulk ops begun and
// not complete hold fewer than Config.BulkChunk × Config.BulkInFlight
// services; the others wait here, in the core, not as requests in the
// children's mailboxes. Calls of one service begin at once, so a single
// Upsert's requests reach each child behind at most that many services of
// bulk work, whatever the size of the batches queued.
//
// Admission is round-robin over the calls with chunks waiting: a small
// batch arriving behind a large sync waits for one chunk of each other
// call, not for the whole sync.

// Bulk lane defaults, chosen by measuring (tests/bench: the p99 of a
// single Upsert while eight callers keep UpsertBatch calls in flight,
// against the batched throughput).
const (
	defaultBulkChunk    = 64
	defaultBulkInFlight = 4
)

// bulkLane is the waiting chunks of one large call, in order.
type bulkLane struct {
	ops []*op
}

// newLane returns the bulk lane of a call of n services (nil: one
// service, it begins at once).
func newLane(n int) *bulkLane {
	if n <= 1 {
		return nil
	}
	return &bulkLane{}
}

// beginOrWait begins o, which heads all its queues, or, when it is a bulk op
// and the bulk budget is spent, lets it wait for admission.
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

// admit begins waiting bulk ops, one per call in turn, while the bulk
// ops in flight hold fewer services than the budget. It is not reentrant:
// an op that completes inside begin makes room that the running loop uses.
func (c *Core) admit() {
	if c.admitting {
		return
	}
	c.admitting = true
	for len(c.bulkRing) > 0 && c.bulkBusy < c.bulkBudget {
		l := c.bulkRing[0]
		c.bulkRing[0] = nil
		c.bulkRing = c.bulkRing[1:]
		o := l.ops[0]
		l.ops[0] = nil
		l.ops = l.ops[1:]
		if len(l.ops) > 0 {
			c.bulkRing = append(c.bulkRing, l)
		} else {
			l.ops = nil
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
