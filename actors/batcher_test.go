package actors

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb/maps"
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
		p.b.flush(ctx, func(r *messages.ServiceApply) int { return len(r.Writes) + len(r.Deletes) }, func(reqs []*messages.ServiceApply) error {
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

// batchProbe is an owner that holds the requests it is sent until it has
// want of them, then flushes them together and reports the batches the
// flush applied (if batches is set): each merged batch's request sizes
// (applyAll), or one request's size for a request applied alone
// (applyOne). The apply of the batch that holds request hold (if set)
// waits until release is closed.
type batchProbe struct {
	b       batcher[*messages.ServiceApply]
	want    int
	batches chan<- [][]int
	hold    uint64
	release <-chan struct{}
}

func (p *batchProbe) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*messages.ServiceApply)
	if !ok {
		return
	}
	p.b.buf = append(p.b.buf, queuedReq[*messages.ServiceApply]{ctx.Sender(), m})
	if len(p.b.buf) < p.want {
		return
	}
	size := func(r *messages.ServiceApply) int { return len(r.Writes) + len(r.Deletes) }
	held := func(r *messages.ServiceApply) {
		if p.hold != 0 && r.ReqID == p.hold {
			<-p.release
		}
	}
	var seen [][]int
	p.b.flush(ctx, size, func(reqs []*messages.ServiceApply) error {
		var sizes []int
		for _, r := range reqs {
			held(r)
			sizes = append(sizes, size(r))
		}
		seen = append(seen, sizes)
		return nil
	}, func(r *messages.ServiceApply) *messages.MapApplied {
		held(r)
		seen = append(seen, []int{size(r)})
		return &messages.MapApplied{ReqID: r.ReqID}
	}, func(r *messages.ServiceApply) uint64 { return r.ReqID })
	if p.batches != nil {
		p.batches <- seen
	}
}

// A flush merges consecutive requests while their entries sum to at most
// scratchMax (the arrays it merges and encodes them in are then kept for
// the next flush), and applies a larger request alone, in arrival order;
// every request is answered.
func TestAFlushMergesRequestsUpToTheKeptArraysSize(t *testing.T) {
	sizes := []int{1100, 1100, 1100, 1100, 1100, 1100, 1100, 1100, 10, scratchMax + 1, 5, 7}
	want := [][]int{{1100, 1100, 1100}, {1100, 1100, 1100}, {1100, 1100, 10}, {scratchMax + 1}, {5, 7}}
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	batches := make(chan [][]int, 1)
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &batchProbe{want: len(sizes), batches: batches}
	}))
	var fs []*actor.Future
	for i, n := range sizes {
		r := &messages.ServiceApply{ReqID: uint64(i + 1), Writes: make([]maps.ServiceEntry, n/2), Deletes: make([]maps.ServiceKey, n-n/2)}
		fs = append(fs, sys.Root.RequestFuture(pid, r, 10*time.Second))
	}
	for i, f := range fs {
		res, err := f.Result()
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), res.(*messages.MapApplied).ReqID)
	}
	require.Equal(t, want, <-batches)
}

// A flush of large requests answers each batch as soon as it is applied:
// the first of two large requests is answered while the second is still
// being written. A flush that also holds a small request (a single
// call's) answers all its requests together at the end: the first is not
// answered while the second is being written.
func TestAFlushAnswersEachBatchOnceAppliedOnlyWhenAllItsRequestsAreLarge(t *testing.T) {
	n := scratchMax/2 + 1 // two do not fit one batch
	for _, tc := range []struct {
		name       string
		sizes      []int
		firstEarly bool
	}{
		{"large requests only", []int{n, n}, true},
		{"with a small request", []int{n, n, earlyMin - 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := actor.NewActorSystem()
			t.Cleanup(sys.Shutdown)
			release := make(chan struct{})
			releaseHeld := sync.OnceFunc(func() { close(release) })
			t.Cleanup(releaseHeld)
			pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
				return &batchProbe{want: len(tc.sizes), hold: 2, release: release}
			}))
			var fs []*actor.Future
			for i, size := range tc.sizes {
				wait := 10 * time.Second
				if i == 0 && !tc.firstEarly {
					wait = 300 * time.Millisecond // long enough for an early answer
				}
				fs = append(fs, sys.Root.RequestFuture(pid, &messages.ServiceApply{ReqID: uint64(i + 1), Writes: make([]maps.ServiceEntry, size)}, wait))
			}
			res, err := fs[0].Result() // while the second request's write is held
			if tc.firstEarly {
				require.NoError(t, err, "the first request was not answered while the second was held")
				require.Equal(t, uint64(1), res.(*messages.MapApplied).ReqID)
			} else {
				require.ErrorIs(t, err, actor.ErrTimeout, "the first request was answered while the second was held")
			}
			releaseHeld()
			for i, f := range fs[1:] {
				res, err := f.Result()
				require.NoError(t, err)
				require.Equal(t, uint64(i+2), res.(*messages.MapApplied).ReqID)
			}
		})
	}
}
