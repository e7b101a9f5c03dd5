package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/actorlb/actorlb/internal/table"
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
	keys     []qkey
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
	svcHolds []messages.AllocBinding
	beHolds  []messages.AllocBinding
	// freed backend IDs, held in the allocator until their entries are gone.
	freed []lb.BackendID
	// since is when the op entered its queues, then when its current step
	// began (Stats: time per step).
	since time.Time
}

// queuesKeep is the most keys the queue table may have held and still be
// kept once empty (about 2 MB).
const queuesKeep = 1 << 15

// qkey names a queue: that of a frontend, or that of a backend (whose
// state an op writes).
type qkey struct {
	ip      // no pointer: hashed as plain bytes
	port    uint16
	proto   lb.L4Type
	scope   lb.Scope
	backend bool
}

func feQueue(a lb.L3n4Addr) qkey {
	return qkey{ip: ipOf(a.Addr), port: a.Port, proto: a.Protocol, scope: a.Scope}
}

func beQueue(a lb.L3n4Addr) qkey {
	k := feQueue(a)
	k.backend = true
	return k
}

// l3n4 returns the address the queue is for.
func (k qkey) l3n4() lb.L3n4Addr {
	return lb.L3n4Addr{Addr: k.addr16(), Port: k.port, Protocol: k.proto, Scope: k.scope}
}

// queue is the ops waiting on one key: the one running (or about to) and
// those behind it. Most queues hold one op, which needs no allocation.
type queue struct {
	head *op
	rest []*op
}

// all yields the ops of the queue in order.
func (q queue) all(yield func(*op) bool) {
	if !yield(q.head) {
		return
	}
	for _, o := range q.rest {
		if !yield(o) {
			return
		}
	}
}

// opKeys are the queues of an op on fe writing backends bs (validated, so
// without duplicates).
func opKeys(fe lb.L3n4Addr, bs []lb.Backend) []qkey {
	keys := make([]qkey, 0, 1+len(bs))
	keys = append(keys, feQueue(fe))
	for _, b := range bs {
		keys = append(keys, beQueue(table.BackendKey(b)))
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
	// sent is set once the request has left the outbox: only requests a
	// child has seen are sent again when it fails.
	sent bool
}

// run starts an op: it runs at once unless another op is ahead of it in
// one of its queues. Ops enter all their queues at once, in arrival order,
// so waiting for several queues cannot deadlock.
func (s *Supervisor) run(ctx actor.Context, o *op) {
	o.since = time.Now()
	if n := len(s.queues) + len(o.keys); n > s.queuesPeak {
		s.queuesPeak = n
	}
	for _, k := range o.keys {
		q, busy := s.queues[k]
		if busy {
			q.rest = append(q.rest, o)
			o.blocked++
		} else {
			q.head = o
		}
		s.queues[k] = q
	}
	if o.blocked == 0 {
		s.begin(ctx, o)
	}
}

func (s *Supervisor) begin(ctx actor.Context, o *op) {
	if !o.since.IsZero() {
		o.since = s.timeStep(stepQueued, o.since)
	} else {
		o.since = time.Now()
	}
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
		if o.cur != "" {
			o.since = s.timeStep(o.cur, o.since)
		}
		o.next++
		o.cur = st.name
		o.tries = 0
		st.do(s, ctx, o)
	}
}

func (s *Supervisor) complete(ctx actor.Context, o *op) {
	if o.cur != "" {
		s.timeStep(o.cur, o.since)
	}
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
		q := s.queues[k] // o heads every queue it ran from
		if len(q.rest) == 0 {
			delete(s.queues, k)
			if len(s.queues) == 0 && s.queuesPeak > queuesKeep {
				// Go maps never shrink: a burst (a large Sync queues an op
				// per service and backend) would keep its table for good.
				// Up to queuesKeep keys it is kept, so that bursts of
				// batches do not grow it again each time.
				s.queues = map[qkey]queue{}
				s.queuesPeak = 0
			}
			continue
		}
		h := q.rest[0]
		q.head, q.rest = h, q.rest[1:]
		if len(q.rest) == 0 {
			q.rest = nil
		}
		s.queues[k] = q
		h.blocked--
		if h.blocked == 0 {
			s.begin(ctx, h)
		}
	}
}

// stepQueued names the time an op waits behind others in Stats.Steps.
const stepQueued = "wait in queue"

// timeStep adds the time since t to the step's figures and returns now.
func (s *Supervisor) timeStep(name string, t time.Time) time.Time {
	now := time.Now()
	st := s.steps[name]
	if st == nil {
		if s.steps == nil {
			s.steps = map[string]*messages.StepTiming{}
		}
		st = &messages.StepTiming{}
		s.steps[name] = st
	}
	st.Count++
	st.Total += now.Sub(t)
	return now
}

// request sends msg to a child for op o; onReply runs on the reply. The
// message goes to the child's outbox, sent when the supervisor has handled
// the messages now in its mailbox: the requests of all the ops those
// messages advance go to each child as one Batch.
func (s *Supervisor) request(ctx actor.Context, o *op, child string, reqID uint64, msg any, onReply func(reply any) error) {
	o.pending++
	p := &pendingReq{op: o, child: child, msg: msg, onReply: onReply}
	s.reqs.set(reqID, p)
	s.enqueue(ctx, p)
}

// enqueue puts p in its child's outbox. Every request goes this way, first
// sends and resends alike, so that a child gets them in the order they were
// made (after a crash: the allocator's fresh snapshot first, see
// restoreFirst).
func (s *Supervisor) enqueue(ctx actor.Context, p *pendingReq) {
	p.sent = false
	if s.outbox == nil {
		s.outbox = map[string][]*pendingReq{}
	}
	s.outbox[p.child] = append(s.outbox[p.child], p)
	if !s.outboxFlush {
		s.outboxFlush = true
		ctx.Send(ctx.Self(), &sendOutbox{})
	}
}

// sendOutbox tells the supervisor to send its outbox.
type sendOutbox struct{}

// flushOutbox sends every child its queued requests, in the order they
// were made: one bare message, or one Batch.
func (s *Supervisor) flushOutbox(ctx actor.Context) {
	s.outboxFlush = false
	for _, child := range Children {
		ps := s.outbox[child]
		if len(ps) == 0 {
			continue
		}
		s.requestsSent += uint64(len(ps))
		s.childMessages++
		if len(ps) == 1 {
			ps[0].sent = true
			ctx.Request(s.children[child], ps[0].msg)
		} else {
			msgs := make([]any, len(ps))
			for i, p := range ps {
				p.sent = true
				msgs[i] = p.msg
			}
			ctx.Request(s.children[child], &messages.Batch{Msgs: msgs})
		}
		// The array is kept for the next flush, emptied: requests it still
		// pointed to would keep their ops and messages from the collector.
		clear(ps)
		s.outbox[child] = ps[:0]
		if cap(ps) > scratchMax {
			s.outbox[child] = nil
		}
	}
}

func (s *Supervisor) newReqID() uint64 {
	return s.reqs.reserve()
}

// onReply handles a child's reply to request id.
func (s *Supervisor) onReply(ctx actor.Context, id uint64, reply any) {
	p, ok := s.reqs.get(id)
	if !ok {
		return // a duplicate reply to a request that was resent
	}
	s.reqs.del(id)
	o := p.op
	o.pending--
	if p.onReply != nil {
		o.fail(p.onReply(reply))
	}
	s.advance(ctx, o)
}

// failRequest answers a pending request with err (the child could not).
func (s *Supervisor) failRequest(ctx actor.Context, id uint64, err error) {
	p, ok := s.reqs.get(id)
	if !ok {
		return
	}
	s.reqs.del(id)
	p.op.pending--
	p.op.fail(err)
	s.advance(ctx, p.op)
}

// onReplies handles the replies of one envelope in order.
func (s *Supervisor) onReplies(ctx actor.Context, m *messages.Replies) {
	for _, r := range m.Msgs {
		if id, ok := replyID(r); ok {
			s.onReply(ctx, id, r)
		}
	}
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
