package engine

import (
	"fmt"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
)

// Intake: a large UpsertBatch or Sync that comes while single-service
// calls are about (the bulk lane is throttled) is taken in intakeChunk
// services at a time: each chunk is validated, cut into runs and put in
// its queues in one Step, the next one in a later Step (TakeIn, which the
// actor steps when HasIntake reports work, after the messages that came
// meanwhile). So a single call waits behind one chunk of the supervisor's
// own work, not behind a whole call's: validating a hundred services and
// queueing their 1,100 keys took one Step of 0.45 ms p50, 1.6 ms p99, and
// a Sync of 10,000 services one of 135 ms (measured).
//
// A Sync is checked whole when it comes (every service valid, of the
// sync's source, no frontend or ID twice: 0.2 µs a service) and its stale
// frontends are found then; its upserts are taken in by chunks, and the
// deletes of the stale frontends start after the last chunk, as they
// follow the upserts when the Sync is taken in whole.
//
// Calls taken in are in arrival order among themselves; a single call
// that comes meanwhile may go ahead of the rest of a large call, as it
// may go ahead of a large call that came just after it: calls of
// different callers have no order, and a caller waits for its call's
// answer. A Sync is the exception: what it finds stale depends on every
// call before it, so the calls still being taken in when a Sync comes are
// taken in whole first (drainIntake).

// intakeChunk is the number of services of a call taken in per Step.
const intakeChunk = 16

// intakeCall is a call being taken in: svcs[next:] are still to go.
type intakeCall struct {
	svcs  []*lb.Service
	next  int
	w     *waiter
	lane  *bulkLane
	valid func(int, *lb.Service) bool // nil: checked when the call came (a Sync)
	// then starts what follows the last chunk (a Sync's deletes); abort
	// answers it with an error instead, when the core stops first. Both
	// nil for an UpsertBatch.
	then  func()
	abort func(error)
}

// TakeIn tells the core to take in the next chunk of the calls it is
// taking in (HasIntake).
type TakeIn struct{}

// HasIntake reports whether calls are being taken in: step TakeIn{}
// later, after the messages that came meanwhile.
func (c *Core) HasIntake() bool { return len(c.intake) > 0 }

// takeIn takes in the next chunk of the oldest call being taken in.
func (c *Core) takeIn() {
	if len(c.intake) == 0 {
		return
	}
	ic := c.intake[0]
	end := min(ic.next+intakeChunk, len(ic.svcs))
	c.startUpserts(ic.svcs[ic.next:end], ic.next, ic.w, ic.lane, ic.valid)
	ic.next = end
	if ic.next == len(ic.svcs) {
		c.intake[0] = nil
		c.intake = c.intake[1:]
		if len(c.intake) == 0 {
			c.intake = nil
		}
		if ic.then != nil {
			ic.then()
		}
	}
}

// drainIntake takes in the rest of every call being taken in, in order.
func (c *Core) drainIntake() {
	for len(c.intake) > 0 {
		c.takeIn()
	}
}

// abortIntake answers the services not yet taken in with err, in the
// words upsertPlan.answer gives those aborted in their queues, and what
// would have followed them (a Sync's deletes).
func (c *Core) abortIntake(err error) {
	for _, ic := range c.intake {
		for i := ic.next; i < len(ic.svcs); i++ {
			c.upserted(ic.w, i, messages.UpsertReply{Err: fmt.Errorf("upsert service %s: %w", ic.svcs[i].Frontend.L3n4Addr, err)})
		}
		if ic.abort != nil {
			ic.abort(err)
		}
	}
	c.intake = nil
}
