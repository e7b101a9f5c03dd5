package actorlb

import (
	"context"
	"sync"
	"time"
)

// gate tells the edge whether the supervisor serves. It is the edge's own
// state (the actors only call setUp, setDown and fail), guarded by its own
// mutex: no actor state is shared.
type gate struct {
	mu   sync.Mutex
	up   bool
	err  error         // restore failed: calls fail with it until the next up
	upCh chan struct{} // closed when the supervisor serves again
	down chan struct{} // closed when the serving incarnation goes down
}

func newGate() *gate { return &gate{upCh: make(chan struct{})} }

func (g *gate) setUp() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = nil
	if !g.up {
		g.up = true
		g.down = make(chan struct{})
		close(g.upCh)
	}
}

func (g *gate) setDown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.up {
		g.up = false
		close(g.down)
		g.upCh = make(chan struct{})
	}
}

func (g *gate) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = err
	if !g.up {
		close(g.upCh) // wake the waiters; they read err
		g.upCh = make(chan struct{})
	}
}

// wait blocks until the supervisor serves and returns the channel that is
// closed when that incarnation goes down. It gives up with ctx's error
// when ctx is done, or with context.DeadlineExceeded when timeout fires
// (nil: never).
func (g *gate) wait(ctx context.Context, timeout <-chan time.Time) (<-chan struct{}, error) {
	for {
		g.mu.Lock()
		if g.up {
			d := g.down
			g.mu.Unlock()
			return d, nil
		}
		if g.err != nil {
			err := g.err
			g.mu.Unlock()
			return nil, err
		}
		ch := g.upCh
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout:
			return nil, context.DeadlineExceeded
		}
	}
}
