package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorlb/actorlb/messages"
)

// checks runs a map owner's drift checks (MapReconcile) one at a time
// without holding the owner: a check begins in the owner, its dump is
// read on a goroutine of its own while the owner goes on with its
// mailbox, and when the dump comes back (checkRead) the owner compares it
// a step at a time, a message each (checkStep: see driftCheck), its other
// messages between two steps, then finishes it. Before, the owner read and
// compared its map in the handling of the request, and every write sent
// to it waited: an upsert beside a drift check of 10k services of 10
// backends took 45 ms at the median.
//
// The requests that come while a check is in flight are answered by the
// next one, begun when it finishes: a check answers only requests that
// came before it began.
type checks struct {
	run     *checkRun   // in flight, if any
	waiting []checkWait // came while run was in flight
	reading sync.WaitGroup
}

// checkRun is a check in flight and the requests it answers.
type checkRun struct {
	c     driftCheck
	waits []checkWait
}

type checkWait struct {
	to    *actor.PID
	reqID uint64
}

// checkRead tells the owner that run's dump is read, and checkStep that
// run has more to compare. A run the owner does not know (a restarted
// owner's predecessor's) is dropped: the supervisor sends again what a
// failed owner owed.
type (
	checkRead struct{ run *checkRun }
	checkStep struct{ run *checkRun }
)

// receive handles the messages of the owner's drift checks (MapReconcile,
// checkRead, checkStep; begin begins a check), and waits for a dump being
// read when the owner stops or restarts, so that no dump reads the map
// once the owner is gone. It ignores any other message.
func (k *checks) receive(ctx actor.Context, msg any, begin func(actor.Context) driftCheck) {
	switch m := msg.(type) {
	case *messages.MapReconcile:
		k.ask(ctx, m.ReqID, begin)
	case *checkRead:
		k.read(ctx, m, begin)
	case *checkStep:
		k.step(ctx, m, begin)
	case *actor.Restarting, *actor.Stopping:
		k.wait()
	}
}

// ask takes a MapReconcile: it begins a check (begin) unless one is in
// flight.
func (k *checks) ask(ctx actor.Context, reqID uint64, begin func(actor.Context) driftCheck) {
	k.waiting = append(k.waiting, checkWait{ctx.Sender(), reqID})
	if k.run == nil {
		k.start(ctx, begin)
	}
}

// start begins a check answering the requests waiting.
func (k *checks) start(ctx actor.Context, begin func(actor.Context) driftCheck) {
	run := &checkRun{c: begin(ctx), waits: k.waiting}
	k.run, k.waiting = run, nil
	self, root := ctx.Self(), ctx.ActorSystem().Root
	k.reading.Go(func() {
		run.c.read()
		root.Send(self, &checkRead{run: run})
	})
}

// read takes the dump of the run in flight and makes its first step.
func (k *checks) read(ctx actor.Context, m *checkRead, begin func(actor.Context) driftCheck) {
	if m.run != k.run {
		return
	}
	m.run.c.readDone()
	k.step(ctx, &checkStep{run: m.run}, begin)
}

// step makes the next step of the run in flight, then another message,
// or, once all is compared, finishes it, answers its requests, and begins
// the next check if requests came meanwhile.
func (k *checks) step(ctx actor.Context, m *checkStep, begin func(actor.Context) driftCheck) {
	if m.run != k.run {
		return
	}
	if m.run.c.step(stepEntries) == 0 {
		ctx.Send(ctx.Self(), m)
		// A step is CPU work, and the next one is due at once: the
		// goroutine gives its processor to those waiting for one (on two
		// cores the owners of both large maps would keep both processors
		// until the runtime's 10 ms time slice ran out).
		runtime.Gosched()
		return
	}
	k.run = nil
	drifts := m.run.c.finish()
	for _, w := range m.run.waits {
		ctx.Send(w.to, &messages.MapReconciled{ReqID: w.reqID, Maps: drifts})
	}
	if len(k.waiting) > 0 {
		k.start(ctx, begin)
	}
}

// wait returns once no dump is being read.
func (k *checks) wait() { k.reading.Wait() }
