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
	work    chan func()
	workers int
	once    sync.Once
}

var _ actor.Dispatcher = (*Dispatcher)(nil)

// NewDispatcher starts workers goroutines; Close stops them.
func NewDispatcher(workers int) *Dispatcher {
	d := &Dispatcher{work: make(chan func()), workers: workers}
	for range workers {
		go d.worker()
	}
	return d
}

// worker runs the runs it receives until it receives nil (Close). It
// waits on the one channel, not on a second one for Close: a receive
// costs less than a select, and a worker waits once per run (measured on
// the single-call path: the select was 4% of the CPU).
func (d *Dispatcher) worker() {
	for fn := <-d.work; fn != nil; fn = <-d.work {
		fn()
	}
}

// Schedule runs fn on an idle worker, or on a goroutine of its own if no
// worker is idle (or after Close). A nil fn is nothing to run.
func (d *Dispatcher) Schedule(fn func()) {
	if fn == nil {
		return
	}
	select {
	case d.work <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (d *Dispatcher) Throughput() int { return Throughput }

// Close lets each worker end once it has finished the run it is in: a
// goroutine of its own hands each worker a nil, so Close does not wait
// for them. A run scheduled meanwhile may still go to a worker that has
// not had its nil yet. It is safe to call more than once.
func (d *Dispatcher) Close() {
	d.once.Do(func() {
		go func() {
			for range d.workers {
				d.work <- nil
			}
		}()
	})
}
