package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
)

// plan is what an operation does, as data: its fields record what it
// read from the table, acquired and wrote; its methods compute its steps
// from them. The interpreter (advance) runs the steps.
type plan interface {
	// start checks the plan against the table when its op heads all its
	// queues and returns its steps (none: nothing to do, or it failed:
	// then start has recorded why).
	start(c *Core, o *op) []step
	// rollback returns the steps that undo what the op may have written,
	// computed from what it recorded (none: nothing to undo).
	rollback(c *Core, o *op) []step
	// finish answers the op's callers: err is the op's failure, if any.
	finish(c *Core, o *op, err error)
}

// step is one stage of an operation: send sends its requests (through
// Core.request); the op moves on when all are answered.
type step struct {
	name string
	send func(c *Core, o *op)
	// retry is how often the step runs again after a transient failure
	// (map writes are idempotent; a full map is not transient).
	retry int
}

// mapRetries is the retry count of steps that write maps.
const mapRetries = 3

func transient(err error) bool {
	return !errors.Is(err, maps.ErrMapFull) && !errors.Is(err, maps.ErrFamily)
}

// op is one operation: a plan and the state of its run.
//
// Lifecycle: run puts it in its queues; when it heads all of them, begin
// asks the plan for its steps; advance runs them in order, each once all
// replies of the previous one are in, retrying a transient failure; on
// the first failure that stays it runs the plan's rollback steps instead;
// complete answers the callers (plan.finish) and lets the next op of
// each queue begin.
type op struct {
	plan plan
	// keys are the queues the op waits in: its frontends and the backends
	// whose state it writes. It runs when it heads all of them, so ops on
	// one frontend, and ops writing one backend, apply in arrival order.
	keys    []qkey
	runKeys bool // keys' array is the pool's (a large call's run): given back when complete
	blocked int  // queues where another op is ahead
	// lane is the bulk lane of the large call the op is a chunk of (nil:
	// it begins as soon as it heads its queues); bulk the services it
	// counts against the bulk budget while in flight.
	lane *bulkLane
	bulk int

	steps   []step // the plan's steps, or its rollback's once rolling
	next    int    // index of the next step to run
	cur     string // name of the step running
	pending int    // requests of the current step not yet answered
	stepErr error  // first error of the current step
	tries   int    // retries of the current step
	err     error  // the op's failure
	rolling bool   // running the rollback steps
	rbErr   error  // failures of the rollback
	done    bool

	// service IDs the op has taken from the allocator and not yet given
	// back or put in the table: counted when a restarted allocator is
	// restored (the backends an op holds are in the backend index).
	svcHolds []messages.AllocBinding
	// freed backend IDs the op unbound: in use in the allocator until their
	// entries are gone.
	freed []uint32
	// since is when the op entered its queues, then when its current step
	// began (Stats: time per step).
	since time.Time
}

// fail records the first error of the op's current step.
func (o *op) fail(err error) {
	if err != nil && o.stepErr == nil {
		o.stepErr = err
	}
}

// queuesPresize is the number of queue keys from which an op that finds
// the queues empty gets a new queue map of its size.
const queuesPresize = 1024

// run starts an op: it begins at once unless another op is ahead of it in
// one of its queues. Ops enter all their queues at once, in arrival order,
// so waiting for several queues cannot deadlock.
func (c *Core) run(o *op) {
	c.presizeQueues(len(o.keys))
	for _, k := range o.keys {
		c.enter(o, k, c.queues.get(k))
	}
	c.entered(o)
}

// presizeQueues gives empty queues a map for n keys at once when n is
// large and more than the table has held: a large op into empty queues
// (a batch on an idle engine), rather than grown by doubling through
// every size.
func (c *Core) presizeQueues(n int) {
	if c.queues.len() == 0 && n >= queuesPresize && n > c.queuesPeak {
		c.queues = newQueueTable(n)
		c.queuesPeak = 0
	}
}

// enter puts o last in the queue of k, q as looked up.
func (c *Core) enter(o *op, k qkey, q queue) {
	if q.head != nil {
		if q.rest == nil {
			q.rest = &[]*op{o}
		} else {
			*q.rest = append(*q.rest, o)
		}
		o.blocked++
		c.behind++
	} else {
		q.head = o
	}
	c.queues.set(k, q)
}

// entered begins o, which has entered all its queues, unless it waits in
// one of them.
func (c *Core) entered(o *op) {
	o.since = c.now()
	if n := c.queues.len(); n > c.queuesPeak {
		c.queuesPeak = n
	}
	if o.blocked == 0 {
		c.beginOrWait(o)
	}
}

// begin runs an op that heads its queues (or has none).
func (c *Core) begin(o *op) {
	if !o.since.IsZero() {
		o.since = c.timeStep(StepQueued, o.since)
	} else {
		o.since = c.now()
	}
	c.inflight++
	if o.lane != nil {
		o.bulk = o.weight()
		c.bulkBusy += o.bulk
	}
	o.steps = o.plan.start(c, o)
	c.advance(o)
}

// advance runs steps until one is waiting for replies or the op is done.
func (c *Core) advance(o *op) {
	for !o.done && o.pending == 0 {
		if o.stepErr != nil && c.settle(o) {
			continue
		}
		if o.err != nil && !o.rolling {
			o.rolling = true
			o.steps, o.next = o.plan.rollback(c, o), 0
		}
		if o.next >= len(o.steps) {
			c.complete(o)
			return
		}
		st := o.steps[o.next]
		if o.cur != "" {
			o.since = c.timeStep(o.cur, o.since)
		}
		o.next++
		o.cur = st.name
		o.tries = 0
		st.send(c, o)
	}
}

// settle decides what a failed step means once all its replies are in:
// run it again (transient, retries left) or fail the op (or its rollback).
// It reports whether the step was started again.
func (c *Core) settle(o *op) bool {
	err := o.stepErr
	o.stepErr = nil
	if o.next > 0 && o.next <= len(o.steps) {
		if st := o.steps[o.next-1]; o.tries < st.retry && transient(err) {
			o.tries++
			c.log.WithError(err).WithField("step", o.cur).Debug("retrying step")
			st.send(c, o)
			return true
		}
	}
	err = fmt.Errorf("%s: %w", o.cur, err)
	if o.rolling {
		o.rbErr = errors.Join(o.rbErr, err)
	} else if o.err == nil {
		o.err = err
	}
	return false
}

// complete ends an op: its callers are answered and the next op of each
// of its queues may begin.
func (c *Core) complete(o *op) {
	if o.cur != "" {
		c.timeStep(o.cur, o.since)
	}
	o.done = true
	c.inflight--
	if c.inflight == 0 {
		c.spares.rest() // the large spares no op used since the last rest go (spares.go)
	}
	c.bulkBusy -= o.bulk
	err := o.err
	if err != nil && o.rbErr != nil {
		err = fmt.Errorf("%w; rollback failed: %v", err, o.rbErr)
		c.log.WithError(o.rbErr).Warn("rollback failed; the maps stay half-applied until the next restore repairs them")
	}
	if errors.Is(o.err, maps.ErrMapFull) {
		c.log.WithError(o.err).Warn("a map is full: the operation was rolled back (raise --map-max; the agent migrates the maps at its next start)")
	}
	if sp, ok := o.plan.(splitter); ok && o.err != nil && o.rbErr == nil {
		if subs := sp.split(c, o.err); len(subs) > 0 {
			for _, s := range subs {
				s.lane = o.lane // in flight at once: they count, as o did
			}
			c.handOver(o, subs)
			c.admit()
			return
		}
	}
	o.plan.finish(c, o, err)
	c.dequeue(o)
	c.admit()
	c.ops.completed(o)
}

// splitter is a plan of several independent items that, having failed
// and rolled back cleanly, may be run again as one op per item (so that
// one item does not fail the others: a full map takes those that fit).
type splitter interface {
	// split answers the items that failed alone and returns one op per
	// item left, or none (then the op finishes as it is).
	split(c *Core, err error) []*op
}

// handOver replaces o, which heads its queues, by subs: each takes o's
// place at the head of its own queues (the items of a split op share no
// queue), so nothing queued behind o overtakes them, and begins. Queues of
// o that no sub takes move on as if o had completed.
func (c *Core) handOver(o *op, subs []*op) {
	taken := map[qkey]bool{}
	for _, s := range subs {
		for _, k := range s.keys {
			q := c.queues.get(k)
			q.head = s
			c.queues.set(k, q)
			taken[k] = true
		}
	}
	o.keys = slices.DeleteFunc(o.keys, func(k qkey) bool { return taken[k] })
	c.dequeue(o)
	for _, s := range subs {
		s.since = c.now()
		c.begin(s)
	}
}

// timeStep adds the time since t to the step's figures and returns now.
func (c *Core) timeStep(name string, t time.Time) time.Time {
	now := c.now()
	st := c.steps[name]
	if st == nil {
		if c.steps == nil {
			c.steps = map[string]*messages.StepTiming{}
		}
		st = &messages.StepTiming{}
		c.steps[name] = st
	}
	st.Count++
	st.Total += now.Sub(t)
	return now
}

// abortAll answers every op in flight or queued with err (the core is
// going away; restore will repair what they left).
func (c *Core) abortAll(err error) {
	seen := map[*op]bool{}
	abort := func(o *op) {
		if !seen[o] && !o.done {
			seen[o] = true
			o.done = true
			o.plan.finish(c, o, err)
		}
	}
	for _, p := range c.reqs.all {
		abort(p.op)
	}
	for _, q := range c.queues.all {
		for o := range q.all {
			abort(o)
		}
	}
	c.reqs = pendingTable{}
	c.queues, c.behind = queueTable{}, 0
	c.bulkRing, c.bulkBusy = nil, 0
	c.outbox = [numChildren][]*pendingReq{}
	c.lease = idLease{} // the ops that waited for it are aborted; the next snapshot forgets it
}

// on makes a step's send from a method of plan type P. Step tables are
// package variables built with it once, so starting an op allocates no
// step list and no bound method values.
func on[P plan](f func(P, *Core, *op)) func(*Core, *op) {
	return func(c *Core, o *op) { f(o.plan.(P), c, o) }
}
