package actors

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// ownerRounds sends the owner at pid rounds of requests, as many as
// requests(round) returns, all at once (so that the owner flushes several
// together as well as alone), waits for every answer and then calls
// check.
func ownerRounds(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, rounds int, requests func(round int) []any, check func(round int)) {
	t.Helper()
	for round := range rounds {
		var fs []*actor.Future
		for _, r := range requests(round) {
			fs = append(fs, sys.Root.RequestFuture(pid, r, 10*time.Second))
		}
		for i, f := range fs {
			res, err := f.Result()
			require.NoError(t, err, "round %d request %d", round, i)
			require.NoError(t, res.(*messages.MapApplied).Err, "round %d request %d", round, i)
		}
		check(round)
	}
}

// A backend map's owner keeps the buffers it merges a flush's requests in
// for the next flush: whatever the sizes before, a flush writes and
// deletes exactly its requests' entries (the map equals a model after
// every round, with flushes that merge, flushes of one request, and
// requests larger than the kept buffers).
func TestMapOwnerFlushesWriteExactlyTheirRequestsEntries(t *testing.T) {
	lb := openMaps(t)
	rng := testutil.Rand(t)
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(newBackendMapActor(lb.Backend4)))
	model := map[uint32]maps.BackendEntry{}
	type req = messages.MapApply[maps.BackendEntry, uint32]
	ownerRounds(t, sys, pid, 40, func(round int) []any {
		// Requests in flight together touch distinct IDs (the supervisor
		// orders the others), and a request names an ID once: request j
		// of a round owns IDs j*span+1...
		n, span := 1+rng.IntN(8), 1+rng.IntN(700)
		if round%10 == 9 {
			n, span = 1, scratchMax+1+rng.IntN(2000) // larger than the kept buffers
		}
		var out []any
		for j := range n {
			r := &req{ReqID: uint64(round*100 + j)}
			seen := map[uint32]bool{} // a request names a key once, as the supervisor's do
			for range rng.IntN(span + 1) {
				id := uint32(j*span + 1 + rng.IntN(span))
				if seen[id] {
					continue
				}
				seen[id] = true
				if rng.IntN(4) == 0 {
					r.Deletes = append(r.Deletes, id)
					continue
				}
				e := be(id, fmt.Sprintf("10.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256)))
				r.Writes = append(r.Writes, e)
			}
			// The owner writes then deletes.
			for _, e := range r.Writes {
				model[e.ID] = e
			}
			for _, id := range r.Deletes {
				delete(model, id)
			}
			out = append(out, r)
		}
		return out
	}, func(round int) {
		got, err := lb.Backend4.Dump()
		require.NoError(t, err)
		want := make([]maps.BackendEntry, 0, len(model))
		for _, e := range model {
			want = append(want, e)
		}
		byID := func(a, b maps.BackendEntry) int { return cmp.Compare(a.ID, b.ID) }
		slices.SortFunc(want, byID)
		slices.SortFunc(got, byID)
		require.Equal(t, want, got, "round %d", round)
	})
}

// The revNAT owner splits each flush's writes by family into buffers it
// keeps too: both maps equal a model after every round.
func TestRevNATOwnerFlushesWriteExactlyTheirRequestsEntries(t *testing.T) {
	lb := openMaps(t)
	rng := testutil.Rand(t)
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(newRevNATActor(lb.RevNAT4, lb.RevNAT6)))
	model := [2]map[uint16]maps.RevNATEntry{{}, {}}
	ownerRounds(t, sys, pid, 40, func(round int) []any {
		n, span := 1+rng.IntN(8), 1+rng.IntN(500)
		if round%10 == 9 {
			n, span = 1, scratchMax+1+rng.IntN(2000)
		}
		var out []any
		for j := range n {
			r := &messages.RevNATApply{ReqID: uint64(round*100 + j)}
			var dels [2][]uint16
			seen := map[uint16]bool{} // a request names a key once, as the supervisor's do
			for range rng.IntN(span + 1) {
				id := uint16(j*span + 1 + rng.IntN(span))
				if seen[id] {
					continue
				}
				seen[id] = true
				fam := rng.IntN(2)
				if rng.IntN(4) == 0 {
					dels[fam] = append(dels[fam], id)
					continue
				}
				addr := netip.AddrFrom4([4]byte{10, 96, byte(id >> 8), byte(id)})
				if fam == 1 {
					addr = netip.AddrFrom16([16]byte{0xfd, 14: byte(id >> 8), 15: byte(id)})
				}
				e := maps.RevNATEntry{ID: id, Value: maps.RevNATValue{Address: addr, Port: uint16(1 + rng.IntN(65535))}}
				r.Writes = append(r.Writes, e)
			}
			r.Deletes4, r.Deletes6 = dels[0], dels[1]
			for _, e := range r.Writes {
				fam := 0
				if e.Value.Address.Is6() {
					fam = 1
				}
				model[fam][e.ID] = e
			}
			for fam := range dels {
				for _, id := range dels[fam] {
					delete(model[fam], id)
				}
			}
			out = append(out, r)
		}
		return out
	}, func(round int) {
		for fam, m := range []maps.RevNATMap{lb.RevNAT4, lb.RevNAT6} {
			got, err := m.Dump()
			require.NoError(t, err)
			want := make([]maps.RevNATEntry, 0, len(model[fam]))
			for _, e := range model[fam] {
				want = append(want, e)
			}
			byID := func(a, b maps.RevNATEntry) int { return cmp.Compare(a.ID, b.ID) }
			slices.SortFunc(want, byID)
			slices.SortFunc(got, byID)
			require.Equal(t, want, got, "round %d, %s", round, m.Name())
		}
	})
}

// A map owner answers writes while its map is read for a drift check: the
// dump runs beside the owner, which finishes the check when it is read.
// The dump here waits (a fault hook) until the write sent after the check
// is answered; before, the owner read its map in the handling of the
// check, and the write waited behind it.
func TestAMapOwnerWritesWhileItsMapIsReadForADriftCheck(t *testing.T) {
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var armed atomic.Bool // not the load at the owner's start
	lb, err := maps.Open(maps.Config{InMemory: true, Fault: func(name string, op maps.Op, _ uint64, _ int) error {
		if name == maps.Backend4Name && op == maps.OpDump && armed.Load() {
			once.Do(func() {
				close(reading)
				<-release
			})
		}
		return nil
	}})
	require.NoError(t, err)
	t.Cleanup(func() { lb.Close() })
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(newBackendMapActor(lb.Backend4)))
	type req = messages.MapApply[maps.BackendEntry, uint32]
	first := sys.Root.RequestFuture(pid, &req{ReqID: 1, Writes: []maps.BackendEntry{be(1, "10.0.0.1")}}, 10*time.Second)
	res, err := first.Result()
	require.NoError(t, err)
	require.NoError(t, res.(*messages.MapApplied).Err)
	// Someone else changes backend 1.
	require.NoError(t, lb.Backend4.Update([]maps.BackendEntry{be(1, "10.9.9.9")}))

	armed.Store(true)
	check := sys.Root.RequestFuture(pid, &messages.MapReconcile{ReqID: 2}, 10*time.Second)
	<-reading
	write := sys.Root.RequestFuture(pid, &req{ReqID: 3, Writes: []maps.BackendEntry{be(2, "10.0.0.2")}}, 10*time.Second)
	res, err = write.Result()
	require.NoError(t, err, "the write is answered while the map is read")
	require.NoError(t, res.(*messages.MapApplied).Err)
	close(release)
	res, err = check.Result()
	require.NoError(t, err)
	ds := res.(*messages.MapReconciled).Maps
	require.Len(t, ds, 1)
	require.Equal(t, 1, ds[0].Changed, "backend 1 repaired; backend 2, written meanwhile, left out: %+v", ds[0])
	require.Zero(t, ds[0].Missing+ds[0].Extra)
	got, err := lb.Backend4.Dump()
	require.NoError(t, err)
	require.ElementsMatch(t, []maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2")}, got)
}
