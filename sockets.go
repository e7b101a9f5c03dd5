package actorlb

import (
	"sync"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// SocketTarget is a backend that stopped taking new connections of a
// service: connected UDP sockets that reached it through that service's
// frontend should be closed, so that their clients reconnect elsewhere.
type SocketTarget struct {
	Service lb.ServiceID
	Backend lb.L3n4Addr
}

// SocketTerminator closes the connected UDP sockets of targets and
// returns how many it closed. The agent's terminator is the socket-LB
// datapath's (bpf.TerminateUDPSocketsOf); a library user without a
// datapath leaves Config.SocketTerminator nil.
type SocketTerminator func(targets []SocketTarget) (int, error)

// socketQueueMax bounds the targets waiting for the terminator; beyond it
// targets are dropped and counted (Stats.SocketTargetsDropped).
const socketQueueMax = 65536

// socketWorker runs the terminator off the engine's goroutines: the engine
// hands it targets without blocking (add), one goroutine calls the
// terminator with everything queued since its last call.
type socketWorker struct {
	term SocketTerminator

	mu      sync.Mutex
	queue   []SocketTarget
	wake    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	// Totals, under mu.
	terminated, dropped, failures uint64
	lastErr                       error
}

func newSocketWorker(term SocketTerminator) *socketWorker {
	w := &socketWorker{term: term, wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go w.run()
	return w
}

// add queues the backends that left service; it never blocks.
func (w *socketWorker) add(service lb.ServiceID, backends []lb.L3n4Addr) {
	w.mu.Lock()
	for _, b := range backends {
		if len(w.queue) >= socketQueueMax {
			w.dropped++
			continue
		}
		w.queue = append(w.queue, SocketTarget{Service: service, Backend: b})
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *socketWorker) run() {
	defer close(w.stopped)
	for {
		select {
		case <-w.done:
			return
		case <-w.wake:
		}
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		n, err := w.term(batch)
		w.mu.Lock()
		w.terminated += uint64(max(n, 0))
		if err != nil {
			w.failures++
			w.lastErr = err
		}
		w.mu.Unlock()
	}
}

// stop ends the worker; targets still queued are dropped (the engine is
// closing: its sockets' clients outlive it either way).
func (w *socketWorker) stop() {
	close(w.done)
	<-w.stopped
}

func (w *socketWorker) stats() (terminated, dropped, failures uint64, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terminated, w.dropped, w.failures, w.lastErr
}
