package engine

import (
	"fmt"
	"slices"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// Intake: a large UpsertBatch, Sync or DeleteBatch that comes while
// single-service calls are about (the bulk lane is throttled) is taken in
// intakeChunk services (frontends, for a DeleteBatch) at a time: each
// chunk is validated, cut into runs and put in its queues in one Step,
// the next one in a later Step (TakeIn, which the actor steps when
// HasIntake reports work, after the messages that came meanwhile; the
// next chunk is due once the call's lane has nothing waiting for
// admission). So a single call waits behind one chunk of the supervisor's
// own work, not behind a whole call's: validating a hundred services and
// queueing their 1,100 keys took one Step of 0.45 ms p50, 1.6 ms p99, and
// a Sync of 10,000 services one of 135 ms (measured).
//
// With no single call about, an UpsertBatch, Sync or DeleteBatch of more
// than largeCall services (frontends) is taken in largeChunk at a time
// the same way: the first chunk's requests go out (its op is urgent)
// before the next chunk is taken in, so that the children write its
// entries while the supervisor takes in the rest, where a call taken in
// whole left them idle until all of it was planned (one UpsertBatch of
// 10,000 services of ten backends: 84–102k services/s against 68–72k;
// one DeleteBatch of them 104–149k against 69–90k, measured).
//
// A Sync is checked whole when it comes (every service valid, of the
// sync's source, no frontend or ID twice: 0.2 µs a service) and its stale
// frontends are found then; its upserts are taken in by chunks, and the
// deletes of the stale frontends start after the last chunk, as they
// follow the upserts when the Sync is taken in whole. The deletes are
// runs, one op each, as a DeleteBatch's, taken in by chunks the same way
// when there are many (takeInDeletes). So a single Upsert of a
// frontend the Sync found stale, if it comes while the Sync is being
// taken in (its upserts or its deletes), may go ahead of that frontend's
// delete, and the Sync then deletes it: a Sync deletes what was stale
// when it came, and calls of different callers have no order.
//
// Calls taken in are in arrival order among themselves; a single call
// that comes meanwhile may go ahead of the rest of a large call, as it
// may go ahead of a large call that came just after it: calls of
// different callers have no order, and a caller waits for its call's
// answer. A Sync is the exception: what it finds stale depends on every
// call before it, so the calls still being taken in when a Sync comes are
// taken in whole first (drainIntake).

// intakeChunk is the number of services of a call taken in per Step
// while the lane is throttled.
const intakeChunk = 16

// largeChunk is the number of services of a large UpsertBatch or Sync
// (frontends of a DeleteBatch; more than largeCall) taken in per Step
// while the lane is not throttled: the children write a chunk's entries
// while the supervisor takes in the next, where a call taken in whole
// kept them idle until all of it was planned.
const (
	largeChunk = 512
	largeCall  = 1024
)

// chunkOf is the number of items of a call of n in lane (nil: a single
// service) taken in per Step, 0 for all at once: intakeChunk while single
// calls are about, largeChunk for a large call otherwise.
func (c *Core) chunkOf(lane *bulkLane, n int) int {
	switch {
	case lane == nil:
		return 0
	case c.throttled():
		if n > intakeChunk {
			return intakeChunk
		}
	case n > largeCall:
		return largeChunk
	}
	return 0
}

// intakeCall is a call being taken in: its items [next, n) are still to
// go (services of an UpsertBatch or Sync, frontends of a DeleteBatch).
type intakeCall struct {
	n, next int
	chunk   int // items a Step
	lane    *bulkLane
	// take takes in items [from, to), in order.
	take func(from, to int)
	// then starts what follows the last chunk (a Sync's deletes; nil:
	// nothing).
	then func()
	// abort answers items [from, n), and what would have followed them,
	// with err: the core stops first.
	abort func(from int, err error)
}

// TakeIn tells the core to take in the next chunk of the calls it is
// taking in (HasIntake).
type TakeIn struct{}

// HasIntake reports whether a chunk is due to be taken in: step TakeIn{}
// later, after the messages that came meanwhile. A call being taken in
// has its next chunk due once nothing of it waits for admission in its
// bulk lane: the intake keeps just ahead of admission, so its work is
// spread over the time the call's chunks take to run, not done first.
// After a Step that admits the rest, HasIntake reports true again.
func (c *Core) HasIntake() bool { return c.dueIntake() >= 0 }

// due reports whether the next chunk of ic is due: nothing of it waits
// for admission.
func (ic *intakeCall) due() bool { return ic.lane == nil || len(ic.lane.ops) == 0 }

// dueIntake is the index of the oldest call whose next chunk is due, -1
// if none. Each call keeps its own pace: a small batch that comes behind
// a large sync is taken in while the sync's chunks run, and its chunks
// are admitted in turn with the sync's (bulk.go).
func (c *Core) dueIntake() int {
	for i, ic := range c.intake {
		if ic.due() {
			return i
		}
	}
	return -1
}

// takeIn takes in the next chunk of the oldest call whose chunk is due
// (none: a TakeIn that comes when nothing is due does nothing).
func (c *Core) takeIn() {
	if i := c.dueIntake(); i >= 0 {
		c.takeInFrom(i)
	}
}

// takeInFrom takes in the next chunk of call i of the intake.
func (c *Core) takeInFrom(i int) {
	ic := c.intake[i]
	end := min(ic.next+ic.chunk, ic.n)
	ic.take(ic.next, end)
	ic.next = end
	if ic.next == ic.n {
		c.intake = slices.Delete(c.intake, i, i+1)
		if len(c.intake) == 0 {
			c.intake = nil
		}
		if ic.then != nil {
			ic.then()
		}
	}
}

// addIntake queues ic behind the calls being taken in and takes in its
// first chunk at once: a call that comes while another waits for
// admission does not wait for the rest of that one (dueIntake).
func (c *Core) addIntake(ic *intakeCall) {
	c.intake = append(c.intake, ic)
	c.takeInFrom(len(c.intake) - 1)
}

// drainIntake takes in the rest of every call being taken in, in order.
func (c *Core) drainIntake() {
	for len(c.intake) > 0 {
		c.takeInFrom(0)
	}
}

// abortIntake answers the items not yet taken in with err, and what
// would have followed them (a Sync's deletes).
func (c *Core) abortIntake(err error) {
	for _, ic := range c.intake {
		ic.abort(ic.next, err)
	}
	c.intake = nil
}

// takeInUpserts queues the intake of the upserts of svcs for w in lane
// (valid as for startUpserts), then (nil: nothing) after the last chunk,
// and takes in the first chunk. Services not taken in when the core
// stops are answered in the words upsertPlan.answer gives those aborted
// in their queues; abortThen (nil: nothing) answers what then would have
// started.
func (c *Core) takeInUpserts(svcs []*lb.Service, chunk int, w *waiter, lane *bulkLane, valid func(int, *lb.Service) bool, then func(), abortThen func(error)) {
	c.reserveFor(svcs)
	c.addIntake(&intakeCall{
		n:     len(svcs),
		chunk: chunk,
		lane:  lane,
		take:  func(from, to int) { c.startUpserts(svcs[from:to], from, w, lane, valid) },
		then:  then,
		abort: func(from int, err error) {
			for i := from; i < len(svcs); i++ {
				c.upserted(w, i, messages.UpsertReply{Err: fmt.Errorf("upsert service %s: %w", svcs[i].Frontend.L3n4Addr, err)})
			}
			if abortThen != nil {
				abortThen(err)
			}
		},
	})
}
