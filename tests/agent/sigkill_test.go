package agent_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb/api"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// killWorkload puts and deletes services 1..n over REST until the agent
// dies. It returns the acknowledged state and the one operation whose
// answer was lost with the process (nil if none).
type killWorkload struct {
	mu      sync.Mutex
	model   map[lb.ServiceID][]string // acknowledged: service -> sorted backends (nil: absent)
	pending *pendingOp
	acked   int
	cut     [2]int // operations cut short: [not applied, applied]
}

type pendingOp struct {
	id   lb.ServiceID
	next []string // nil: a delete
}

func backendsOf(s *api.Service) []string {
	var out []string
	for _, b := range s.Spec.BackendAddresses {
		out = append(out, fmt.Sprintf("%s:%d", b.IP, b.Port))
	}
	slices.Sort(out)
	return out
}

func (w *killWorkload) run(c *api.Client, rng *rand.Rand, n int) {
	for range 100_000 { // bounded; ends when the agent is killed
		id := lb.ServiceID(rng.IntN(n) + 1)
		op := &pendingOp{id: id}
		var spec *api.ServiceSpec
		if rng.IntN(4) > 0 {
			spec = &api.ServiceSpec{ID: int64(id), FrontendAddress: &api.FrontendAddress{IP: fmt.Sprintf("10.96.9.%d", id), Port: 80}}
			for _, i := range rng.Perm(16)[:1+rng.IntN(8)] {
				b := api.BackendAddress{IP: fmt.Sprintf("10.1.9.%d", i+1), Port: 8080}
				spec.BackendAddresses = append(spec.BackendAddresses, b)
				op.next = append(op.next, fmt.Sprintf("%s:%d", b.IP, b.Port))
			}
			slices.Sort(op.next)
		}
		w.mu.Lock()
		w.pending = op
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if spec != nil {
			_, _, err = c.PutService(ctx, id, spec)
		} else {
			err = c.DeleteService(ctx, id)
			if errors.Is(err, api.ErrNotFound) {
				err = nil
			}
		}
		cancel()
		if err != nil {
			return // the agent is gone: op stays pending
		}
		w.mu.Lock()
		w.model[id] = op.next
		w.pending = nil
		w.acked++
		w.mu.Unlock()
	}
}

// Scenario (b) of the chaos issue: 20 rounds of SIGKILL of the agent at a
// random moment of a REST workload; after each restart the services equal
// every acknowledged operation (the one cut short is either applied or
// not) and the pinned maps hold invariants 1-4.
func TestAgentSurvivesSIGKILL(t *testing.T) {
	rng := testutil.Rand(t)
	root := testutil.PinDir(t)
	w := &killWorkload{model: map[lb.ServiceID][]string{}}
	const services = 20
	for round := range 20 {
		a := launch(t, root, shortDir(t)+"/s.sock")
		a.waitReady(t)
		check(t, a, w, round)

		var wg sync.WaitGroup
		wg.Add(1)
		clientRng := rand.New(rand.NewPCG(rng.Uint64(), uint64(round)))
		go func() {
			defer wg.Done()
			w.run(a.client, clientRng, services)
		}()
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		require.NoError(t, a.cmd.Process.Kill())
		<-a.done
		a.stopped = true
		wg.Wait()
		a.client.Close()
		require.NotContains(t, a.stderr.String(), "DATA RACE")
		if round == 19 {
			a = launch(t, root, shortDir(t)+"/s.sock")
			a.waitReady(t)
			check(t, a, w, round+1)
			a.stop(t)
		}
	}
	t.Logf("20 SIGKILLs: %d operations acknowledged, %d cut short (%d applied, %d not); %d services at the end",
		w.acked, w.cut[0]+w.cut[1], w.cut[1], w.cut[0], len(w.model))
	require.Positive(t, w.acked)
}

// check compares the restored agent with the model and the pinned maps
// with the invariants; it settles the pending operation.
func check(t *testing.T, a *agent, w *killWorkload, round int) *api.Status {
	t.Helper()
	ctx := ctxT(t)
	list, err := a.client.ListServices(ctx)
	require.NoError(t, err)
	got := map[lb.ServiceID][]string{}
	for _, s := range list {
		got[lb.ServiceID(s.Spec.ID)] = backendsOf(s)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	want := maps.Clone(w.model)
	for id, bs := range want {
		if bs == nil {
			delete(want, id)
		}
	}
	if p := w.pending; p != nil {
		// The operation cut short: applied or not, nothing in between.
		applied := maps.Clone(want)
		if p.next == nil {
			delete(applied, p.id)
		} else {
			applied[p.id] = p.next
		}
		if equalModel(got, applied) && !equalModel(applied, want) {
			want = applied
			w.cut[1]++
		} else {
			w.cut[0]++
		}
		w.model = maps.Clone(want)
		w.pending = nil
	}
	require.Equal(t, want, got, "round %d: services after restart", round)
	d, err := verify.DumpPinned(a.root)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d), "round %d: invariants on the pinned maps", round)
	st, err := a.client.Health(ctx)
	require.NoError(t, err)
	return st
}

func equalModel(a, b map[lb.ServiceID][]string) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]string])
}
