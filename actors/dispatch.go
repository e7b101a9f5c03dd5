package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// Throughput is how many messages a mailbox handles before its goroutine
// yields to others (protoactor's default).
const Throughput = 300

// Dispatcher runs mailboxes on a few long-lived goroutines (workers)
// instead of a new goroutine per mailbox run, protoactor's default.
//
// Why: a mailbox runs each time it turns from empty to busy, which with
// single calls happens several times per call in each actor. A new
// goroutine starts with a small stack, and the engine's paths (the core's
// Step, a map owner's batch through cilium/ebpf) outgrow it: the runtime
// then copies the stack, once or twice per run. A worker keeps its grown
// stack from run to run.
//
// Schedule never blocks: when no worker is idle, the run gets a goroutine
// of its own, as with the default dispatcher. A mailbox still runs on one
// goroutine at a time (the mailbox sees to that), in the same order.
type Dispatcher struct {
	work chan func()
	stop chan struct{}
	once sync.Once
}

var _ actor.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher starts workers goroutines; Close stops them.
func NewDispatcher(workers int) *Dispatcher {
	d := &Dispatcher{work: make(chan func()), stop: make(chan struct{})}
	for range workers {
		go d.worker()
	}
	return d
}

func (d *Dispatcher) worker() {
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.stop:
			return
		}
	}
}

// Schedule runs fn on an idle worker, or on a goroutine of its own if no
// worker is idle (or after Close).
func (d *Dispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (d *Dispatcher) Throughput() int { return Throughput }

// Close lets each worker end once it has finished the run it is in. It
// does not wait for them. It is safe to call more than once.
func (d *Dispatcher) Close() { d.once.Do(func() { close(d.stop) }) }
