package actors

import (
	"errors"
	"testing"
	"time"

	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// batcherProbe is an owner that only batches: it answers every request,
// and after each flush reports the requests its batcher's kept arrays
// still point to.
type batcherProbe struct {
	b       batcher[*messages.ServiceApply]
	failAll bool // applyAll fails: each request is applied alone
	flushes chan<- flushSeen
}

// flushSeen is what a batcherProbe saw of one flush.
type flushSeen struct {
	size, left int // requests flushed; requests the kept arrays still point to
}

func (p *batcherProbe) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.ServiceApply:
		p.b.add(ctx, m)
	case *flushMsg:
		p.b.flushing = false
		n := len(p.b.buf)
		p.b.flush(ctx, func(reqs []*messages.ServiceApply) error {
			if p.failAll {
				return errInjected
			}
			return nil
		}, func(r *messages.ServiceApply) *messages.MapApplied {
			return &messages.MapApplied{ReqID: r.ReqID}
		}, func(r *messages.ServiceApply) uint64 { return r.ReqID })
		left := 0
		for _, q := range p.b.buf[:cap(p.b.buf)] {
			if q.req != nil || q.sender != nil {
				left++
			}
		}
		for _, r := range p.b.reqs[:cap(p.b.reqs)] {
			if r != nil {
				left++
			}
		}
		p.flushes <- flushSeen{size: n, left: left}
	}
}

var errInjected = errors.New("injected")

// A batcher keeps its arrays from one flush to the next, but no request
// in them: once a flush has answered its requests (merged, alone, or
// alone after a merged write failed), the arrays point to none of them,
// and every request got its own answer.
func TestABatcherKeepsItsArraysButNoAnsweredRequest(t *testing.T) {
	for _, failAll := range []bool{false, true} {
		sys := actor.NewActorSystem()
		t.Cleanup(sys.Shutdown)
		flushes := make(chan flushSeen, 1000)
		pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &batcherProbe{failAll: failAll, flushes: flushes}
		}))
		merged := 0
		for round := range 20 {
			var fs []*actor.Future
			for j := range 1 + round%5 {
				id := uint64(round*10 + j + 1)
				fs = append(fs, sys.Root.RequestFuture(pid, &messages.ServiceApply{ReqID: id}, 10*time.Second))
			}
			for j, f := range fs {
				res, err := f.Result()
				require.NoError(t, err)
				require.Equal(t, uint64(round*10+j+1), res.(*messages.MapApplied).ReqID)
			}
		}
		require.NoError(t, sys.Root.PoisonFuture(pid).Wait()) // every flush reported
		for len(flushes) > 0 {
			f := <-flushes
			require.Zero(t, f.left, "requests still referenced after a flush of %d (failAll %v)", f.size, failAll)
			if f.size > 1 {
				merged++
			}
		}
		require.NotZero(t, merged, "no flush merged requests: the test did not exercise it")
	}
}
