package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorlb/actorlb/messages"
)

// checks runs a map owner's drift checks (MapReconcile) one at a time
// without holding the owner: a check begins in the owner, its dump is
// read on a goroutine of its own while the owner goes on with its
// mailbox, and the owner finishes it when the dump comes back (checkRead:
// see driftCheck). Before, the owner read its map in the handling of the
// request, and every write sent to it waited: an upsert beside a drift
// check of 10k services of 10 backends took 45 ms at the median.
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

// checkRead tells the owner that run's dump is read. A run the owner does
// not know (a restarted owner's predecessor's) is dropped: the supervisor
// sends again what a failed owner owed.
type checkRead struct{ run *checkRun }

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

// read finishes the run whose dump is read, answers its requests, and
// begins the next check if requests came meanwhile.
func (k *checks) read(ctx actor.Context, m *checkRead, begin func(actor.Context) driftCheck) {
	if m.run != k.run {
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
