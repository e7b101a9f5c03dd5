package actorlb

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/actorlb/actorlb/actors"
	"github.com/actorlb/actorlb/internal/enginetest"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// copiesPool.take gives the engine services of its own: equal to the
// caller's, sharing no memory with them, each copy's slices capped at
// their length (an append to one never writes into the next), nil slices
// kept nil and a nil service an empty one; in three arrays (services,
// backends, source ranges) and the slice of pointers, whatever the
// number of services, where a copy each took two allocations a service.
func TestTakenCopiesCopyDeeplyInFourAllocations(t *testing.T) {
	svcs := []*lb.Service{
		mustService(t, "10.96.0.1:80", "10.1.0.1:8080", "10.1.0.2:8080"),
		nil,
		mustService(t, "10.96.0.2:80"), // no backend
		mustService(t, "10.96.0.3:443", "10.1.0.3:8443"),
	}
	svcs[3].SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	svcs[0].SourceRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}
	orig := make([]*lb.Service, len(svcs))
	for i, s := range svcs {
		orig[i] = s.DeepCopy()
	}

	var pool copiesPool
	cp := pool.take(svcs).services
	require.Len(t, cp, len(svcs))
	for i, s := range svcs {
		if s == nil {
			require.Equal(t, &lb.Service{}, cp[i], "a nil service becomes an empty one (validation names it)")
			continue
		}
		require.Equal(t, s, cp[i], "service %d copied", i)
		require.NotSame(t, s, cp[i])
		require.Equal(t, s.Backends == nil, cp[i].Backends == nil, "service %d: nil backends stay nil", i)
		require.Equal(t, s.SourceRanges == nil, cp[i].SourceRanges == nil, "service %d: nil ranges stay nil", i)
		require.Equal(t, len(cp[i].Backends), cap(cp[i].Backends), "service %d: backends capped", i)
		require.Equal(t, len(cp[i].SourceRanges), cap(cp[i].SourceRanges), "service %d: ranges capped", i)
	}
	// What the engine does to its copies reaches neither the caller's
	// services nor the other copies.
	slices.Reverse(cp[0].Backends)
	cp[0].Backends[0].Port = 1
	cp[0].Backends = append(cp[0].Backends, cp[3].Backends[0])
	cp[0].SourceRanges[0] = netip.MustParsePrefix("10.0.0.0/8")
	cp[0].SourceRanges = append(cp[0].SourceRanges, netip.MustParsePrefix("10.0.0.0/16"))
	cp[3].Frontend.Port = 1
	for i := range svcs {
		require.Equal(t, orig[i], svcs[i], "the caller's service %d untouched", i)
	}
	require.Equal(t, orig[3].Backends, cp[3].Backends, "the next copy's backends untouched")
	require.Equal(t, orig[3].SourceRanges, cp[3].SourceRanges, "the next copy's ranges untouched")

	big := make([]*lb.Service, 100)
	for i := range big {
		big[i] = mustService(t, "10.96.1.1:80", "10.1.1.1:80", "10.1.1.2:80", "10.1.1.3:80")
		big[i].SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	}
	require.LessOrEqual(t, testing.AllocsPerRun(10, func() { pool.take(big) }), 5.0, "100 services in four allocations (and their holder)")
}

// copiesPool.take copies what lb.Service.DeepCopy copies, field by field:
// every field of a service that refers to memory (a slice, map, pointer,
// interface, channel or function, at any depth of its structs; netip's
// addresses are values) is one it copies. A field added to lb.Service
// that refers to memory fails this until take copies it too, so
// that the engine's copy never shares the caller's memory.
func TestCopiesCopyEveryFieldThatRefersToMemory(t *testing.T) {
	copied := map[string]bool{"Backends": true, "SourceRanges": true}
	values := map[reflect.Type]bool{reflect.TypeFor[netip.Addr](): true, reflect.TypeFor[netip.Prefix](): true}
	root := "lb.Service"
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		if values[ty] {
			return
		}
		switch ty.Kind() {
		case reflect.Struct:
			for f := range ty.Fields() {
				p := f.Name
				if path != "" {
					p = path + "." + f.Name
				}
				walk(p, f.Type)
			}
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			require.True(t, copied[path], "%s.%s (%s) refers to memory and copiesPool.take does not copy it", root, path, ty)
		case reflect.Array:
			walk(path+"[]", ty.Elem())
		}
	}
	walk("", reflect.TypeFor[lb.Service]())
	for _, elem := range []reflect.Type{reflect.TypeFor[lb.Backend](), reflect.TypeFor[netip.Prefix]()} {
		root, copied = elem.String(), map[string]bool{}
		walk("", elem) // the elements copied: values through and through
	}
}

// Copies given back serve the next call in their arrays, each copy as
// deep and capped as in new arrays, with no allocation once the pool
// holds arrays large enough. (The race detector's sync.Pool drops some of
// what it is given: there only the copies are checked.)
func TestGivenBackCopiesServeTheNextCallInTheirArrays(t *testing.T) {
	var pool copiesPool
	big := make([]*lb.Service, 100)
	for i := range big {
		big[i] = mustService(t, fmt.Sprintf("10.96.2.%d:80", i), "10.1.2.1:80", "10.1.2.2:80", "10.1.2.3:80")
		big[i].SourceRanges = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
	}
	first := pool.take(big)
	specs0, bes0 := &first.specs[0], &first.bes[0]
	pool.release(first)
	require.EqualValues(t, 1, pool.released.Load())

	small := []*lb.Service{mustService(t, "10.96.3.1:80", "10.1.3.1:80"), nil, mustService(t, "10.96.3.2:80", "10.1.3.2:80", "10.1.3.3:80")}
	next := pool.take(small)
	for i, s := range small {
		if s == nil {
			require.Equal(t, &lb.Service{}, next.services[i])
			continue
		}
		require.Equal(t, s, next.services[i], "service %d copied", i)
		require.NotSame(t, s, next.services[i])
		require.Equal(t, len(s.Backends), cap(next.services[i].Backends), "service %d: backends capped", i)
	}
	require.Nil(t, next.services[0].SourceRanges, "no ranges: none from the earlier call")
	if raceEnabled {
		return
	}
	require.Same(t, specs0, &next.specs[0], "the services' array served again")
	require.Same(t, bes0, &next.bes[0], "the backends' array served again")
	pool.release(next)
	require.Zero(t, testing.AllocsPerRun(10, func() { pool.release(pool.take(big)) }), "copies in arrays given back allocate nothing")
}

// Arrays past the kept sizes go to the collector, not to the next call.
func TestLargeCopiesAreLeftToTheCollector(t *testing.T) {
	for _, tc := range []struct {
		name           string
		services, each int
	}{
		{"services", copiesKeptServices + 1, 0},
		{"backends", 2, copiesKeptBackends/2 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool copiesPool
			svcs := make([]*lb.Service, tc.services)
			for i := range svcs {
				svcs[i] = &lb.Service{Backends: make([]lb.Backend, tc.each)}
			}
			pool.release(pool.take(svcs))
			require.EqualValues(t, 1, pool.released.Load())
			next := pool.take([]*lb.Service{{Backends: make([]lb.Backend, 1)}})
			require.Less(t, cap(next.specs), copiesKeptServices, "a new array for the services")
			require.Less(t, cap(next.bes), copiesKeptBackends, "a new array for the backends")
		})
	}
}

// An UpsertBatch or SyncSource answered on its first attempt gives its
// copies back; one sent again after a supervisor crash, or given up, does
// not (a copy of its message may still be read). The services of the
// earlier calls stay as they were sent while later calls reuse the arrays
// their copies were in: the engine keeps nothing of them past the answer.
func TestBatchCopiesAreGivenBackOnlyWhenAnsweredOnTheirFirstSend(t *testing.T) {
	var armed, crashed atomic.Bool
	crashFirstBatch := func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(*messages.UpsertBatch); ok && armed.Load() && crashed.CompareAndSwap(false, true) {
				panic("injected supervisor crash before the batch is handled")
			}
			next(c, env)
		}
	}
	e := newEngine(t, "", Config{hooks: enginetest.Hooks{SupervisorMiddleware: []actor.ReceiverMiddleware{crashFirstBatch}}})
	ctx := ctxT(t)
	set := func(third int) []*lb.Service {
		svcs := make([]*lb.Service, 20)
		for i := range svcs {
			s := mustService(t, fmt.Sprintf("10.96.%d.%d:80", third, i+1),
				fmt.Sprintf("10.%d.%d.3:8080", third, i), fmt.Sprintf("10.%d.%d.1:8080", third, i), fmt.Sprintf("10.%d.%d.2:8080", third, i))
			switch i % 3 {
			case 1:
				s.LBAlgorithm = lb.LBAlgMaglev
			case 2:
				s.Type = lb.SVCTypeLoadBalancer
				s.SourceRanges = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("192.0.%d.0/24", i))}
			}
			svcs[i] = s
		}
		return svcs
	}
	var want []*lb.Service
	upsert := func(svcs []*lb.Service) {
		t.Helper()
		rs, err := e.UpsertBatch(ctx, svcs)
		require.NoError(t, err)
		for i, r := range rs {
			require.NoError(t, r.Err, "service %d", i)
			svcs[i].Frontend.ID = r.ID
		}
		want = append(want, svcs...)
	}

	upsert(set(1))
	require.EqualValues(t, 1, e.copies.released.Load(), "answered on its first send: given back")
	upsert(set(2)) // most often in the arrays of the first call's copies
	require.EqualValues(t, 2, e.copies.released.Load())
	synced := append(set(1), set(2)...)
	_, err := e.SyncSource(ctx, lb.SourceAPI, synced)
	require.NoError(t, err)
	require.EqualValues(t, 3, e.copies.released.Load(), "a sync answered on its first send: given back")

	armed.Store(true)
	upsert(set(3)) // the supervisor crashes on it, the façade sends it again
	require.True(t, crashed.Load())
	require.EqualValues(t, 3, e.copies.released.Load(), "sent again: left to the collector")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	late := set(4)
	_, err = e.UpsertBatch(cancelled, late) // may still be sent, and applied after the call returned
	require.ErrorIs(t, err, context.Canceled)
	require.EqualValues(t, 3, e.copies.released.Load(), "given up: left to the collector")
	want = append(want, late...)

	settle(t, e)
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.ActorRestarts[actors.SupervisorName])
	got, err := e.List(ctx)
	require.NoError(t, err)
	byFrontend := map[lb.L3n4Addr]*lb.Service{}
	for _, s := range got {
		byFrontend[s.Frontend.L3n4Addr] = s
	}
	require.GreaterOrEqual(t, len(got), len(want)-len(late))
	for _, s := range want {
		g := byFrontend[s.Frontend.L3n4Addr]
		if g == nil && slices.Contains(late, s) {
			continue // the given-up call was not sent
		}
		require.NotNil(t, g, "service %s", s.Frontend.L3n4Addr)
		if s.Frontend.ID != 0 {
			require.Equal(t, s.Frontend.ID, g.Frontend.ID)
		}
		require.ElementsMatch(t, s.Backends, g.Backends, "service %s's backends as sent", s.Frontend.L3n4Addr)
		require.Equal(t, s.LBAlgorithm, g.LBAlgorithm)
		require.Equal(t, s.Type, g.Type)
		require.Equal(t, s.SourceRanges, g.SourceRanges)
	}
	checkInvariants(t, e)
}
