package actors

import (
	"errors"
	"fmt"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
)

// step is one stage of an operation: it sends requests (through
// Supervisor.request) and the operation moves on when all are answered.
type step struct {
	name string
	do   func(s *Supervisor, ctx actor.Context, o *op)
	// retry is how often the step runs again after a transient failure
	// (map writes are idempotent; a full map is not transient).
	retry int
}

// mapRetries is the retry count of steps that write maps.
const mapRetries = 3

func transient(err error) bool {
	return !errors.Is(err, maps.ErrMapFull) && !errors.Is(err, maps.ErrFamily)
}

// op is one operation in flight: a list of steps, the requests of the
// current step still unanswered, and what to run to roll back on failure.
type op struct {
	// keys are the queues the op waits in: its frontend and the backends
	// whose state it writes. It runs when it heads all of them, so ops on
	// one frontend, and ops writing one backend, apply in arrival order.
	keys     []string
	blocked  int                                           // queues where another op is ahead
	start    func(s *Supervisor, ctx actor.Context, o *op) // builds steps when the op reaches the head of its queue
	steps    []step
	next     int
	cur      string
	pending  int
	err      error
	stepErr  error         // first error of the current step
	tries    int           // retries of the current step
	rollback func() []step // steps that undo a failed op; nil: nothing to undo
	rolling  bool
	rbErr    error
	finish   func(s *Supervisor, err error)
	done     bool
	// IDs this op has taken from the allocator and not yet given back or
	// put in the table: counted when a restarted allocator is restored.
	svcHold *messages.AllocBinding
	beHolds []messages.AllocBinding
	// freed backend IDs, held in the allocator until their entries are gone.
	freed []lb.BackendID
}

// feKey and beKey name the queues of a frontend and of a backend.
func feKey(fe lb.L3n4Addr) string { return "fe:" + fe.String() }
func beKey(b lb.L3n4Addr) string  { return "be:" + b.String() }

// opKeys are the queues of an op on fe writing backends bs.
func opKeys(fe lb.L3n4Addr, bs []lb.Backend) []string {
	keys := []string{feKey(fe)}
	seen := map[lb.L3n4Addr]bool{}
	for _, b := range bs {
		k := b.L3n4Addr
		k.Scope = lb.ScopeExternal
		if !seen[k] {
			seen[k] = true
			keys = append(keys, beKey(k))
		}
	}
	return keys
}

// fail records the first error of the op's current step.
func (o *op) fail(err error) {
	if err != nil && o.stepErr == nil {
		o.stepErr = err
	}
}

// settle decides what a failed step means once all its replies are in:
// run it again (transient, retries left) or fail the op (or its rollback).
// It reports whether the step was started again.
func (s *Supervisor) settle(ctx actor.Context, o *op) bool {
	err := o.stepErr
	o.stepErr = nil
	if o.next > 0 && o.next <= len(o.steps) {
		if st := o.steps[o.next-1]; o.tries < st.retry && transient(err) {
			o.tries++
			s.log.WithError(err).WithField("step", o.cur).Debug("retrying step")
			st.do(s, ctx, o)
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

// pendingReq is a request sent to a child and not yet answered.
type pendingReq struct {
	op      *op
	child   string
	msg     any
	tries   int
	onReply func(reply any) error
}

// run starts an op: it runs at once unless another op is ahead of it in
// one of its queues. Ops enter all their queues at once, in arrival order,
// so waiting for several queues cannot deadlock.
func (s *Supervisor) run(ctx actor.Context, o *op) {
	for _, k := range o.keys {
		q := s.queues[k]
		s.queues[k] = append(q, o)
		if len(q) > 0 {
			o.blocked++
		}
	}
	if o.blocked == 0 {
		s.begin(ctx, o)
	}
}

func (s *Supervisor) begin(ctx actor.Context, o *op) {
	s.inflight++
	if o.start != nil {
		o.start(s, ctx, o)
	}
	s.advance(ctx, o)
}

// advance runs steps until one is waiting for replies or the op is done.
func (s *Supervisor) advance(ctx actor.Context, o *op) {
	for !o.done && o.pending == 0 {
		if o.stepErr != nil && s.settle(ctx, o) {
			continue
		}
		if o.err != nil && !o.rolling {
			o.rolling = true
			o.steps, o.next = nil, 0
			if o.rollback != nil {
				o.steps = o.rollback()
			}
		}
		if o.next >= len(o.steps) {
			s.complete(ctx, o)
			return
		}
		st := o.steps[o.next]
		o.next++
		o.cur = st.name
		o.tries = 0
		st.do(s, ctx, o)
	}
}

func (s *Supervisor) complete(ctx actor.Context, o *op) {
	o.done = true
	s.inflight--
	err := o.err
	if err != nil && o.rbErr != nil {
		err = fmt.Errorf("%w; rollback failed: %v", err, o.rbErr)
		s.log.WithError(o.rbErr).Warn("rollback failed; the next restore repairs the maps")
	}
	if o.finish != nil {
		o.finish(s, err)
	}
	for _, k := range o.keys {
		q := s.queues[k][1:] // o heads every queue it ran from
		if len(q) == 0 {
			delete(s.queues, k)
			if len(s.queues) == 0 {
				// Go maps never shrink: a burst (a large Sync queues an op
				// per service and backend) would keep its table for good.
				s.queues = map[string][]*op{}
			}
			continue
		}
		s.queues[k] = q
		h := q[0]
		h.blocked--
		if h.blocked == 0 {
			s.begin(ctx, h)
		}
	}
}

// request sends msg to a child for op o; onReply runs on the reply.
func (s *Supervisor) request(ctx actor.Context, o *op, child string, reqID uint64, msg any, onReply func(reply any) error) {
	o.pending++
	s.reqs[reqID] = &pendingReq{op: o, child: child, msg: msg, onReply: onReply}
	ctx.Request(s.children[child], msg)
}

func (s *Supervisor) newReqID() uint64 {
	s.nextReq++
	return s.nextReq
}

// onReply handles a child's reply to request id.
func (s *Supervisor) onReply(ctx actor.Context, id uint64, reply any) {
	p, ok := s.reqs[id]
	if !ok {
		return // a duplicate reply to a request that was resent
	}
	delete(s.reqs, id)
	o := p.op
	o.pending--
	if p.onReply != nil {
		o.fail(p.onReply(reply))
	}
	s.advance(ctx, o)
}

// failRequest answers a pending request with err (the child could not).
func (s *Supervisor) failRequest(ctx actor.Context, id uint64, err error) {
	p, ok := s.reqs[id]
	if !ok {
		return
	}
	delete(s.reqs, id)
	p.op.pending--
	p.op.fail(err)
	s.advance(ctx, p.op)
}

func replyID(msg any) (uint64, bool) {
	switch m := msg.(type) {
	case *mapAppliedT:
		return m.ReqID, true
	case *svcDumpedT:
		return m.ReqID, true
	case *beDumpedT:
		return m.ReqID, true
	case *revDumpedT:
		return m.ReqID, true
	case *allocAcquiredT:
		return m.ReqID, true
	case *allocReleasedT:
		return m.ReqID, true
	case *allocDoneT:
		return m.ReqID, true
	}
	return 0, false
}
