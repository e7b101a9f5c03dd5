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
	"unsafe"

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

// The revNAT owner merges a flush's requests into an array it keeps for
// the next flush, sized at once for their writes (grown by appends, the
// merge of four requests of a thousand writes passed scratchMax and was
// made again on every flush), and hands writes of one family to that
// family's mirror as they are, without splitting them into a copy.
func TestRevNATOwnerKeepsItsMergeArrayAndSplitsOnlyMixedWrites(t *testing.T) {
	// Each round's four requests reach the owner while it writes a gate
	// request (held in the map's fault hook), so that one flush merges
	// them.
	held, release := make(chan struct{}), make(chan struct{})
	lb := openFaultyMaps(t, func(name string, op maps.Op, _ uint64, entries int) error {
		if name == maps.RevNAT4Name && op == maps.OpUpdate && entries == 1 {
			held <- struct{}{}
			<-release
		}
		return nil
	})
	owner := newRevNATActor(lb.RevNAT4, lb.RevNAT6)().(*revNATActor)
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return owner }))
	const per = 1000 // four requests: 4,000 writes, within scratchMax
	round := func(r int, v6 bool) {
		t.Helper()
		gate := sys.Root.RequestFuture(pid, &messages.RevNATApply{ReqID: uint64(r * 10), Writes: []maps.RevNATEntry{{
			ID: 60000, Value: maps.RevNATValue{Address: netip.MustParseAddr("10.97.0.1"), Port: uint16(r + 1)},
		}}}, 10*time.Second)
		<-held
		fs := []*actor.Future{gate}
		for j := range 4 {
			req := &messages.RevNATApply{ReqID: uint64(r*10 + j + 1)}
			for i := range per {
				id := uint16(j*per + i + 1)
				addr := netip.AddrFrom4([4]byte{10, 96, byte(id >> 8), byte(id)})
				if v6 && i%2 == 1 {
					addr = netip.AddrFrom16([16]byte{0xfd, 14: byte(id >> 8), 15: byte(id)})
				}
				req.Writes = append(req.Writes, maps.RevNATEntry{ID: id, Value: maps.RevNATValue{Address: addr, Port: uint16(r + 1)}})
			}
			fs = append(fs, sys.Root.RequestFuture(pid, req, 10*time.Second))
		}
		release <- struct{}{}
		for i, f := range fs {
			res, err := f.Result()
			require.NoError(t, err, "round %d request %d", r, i)
			require.NoError(t, res.(*messages.MapApplied).Err, "round %d request %d", r, i)
		}
	}
	round(0, false)
	require.Nil(t, owner.w4, "IPv4 writes alone are not split into a copy")
	require.Nil(t, owner.w6)
	require.GreaterOrEqual(t, cap(owner.ws), 4*per, "the merge of four requests is kept")
	merged := unsafe.SliceData(owner.ws[:1])
	for r := 1; r < 4; r++ {
		round(r, false)
		require.Equal(t, merged, unsafe.SliceData(owner.ws[:1]), "round %d: the flush merges into the kept array", r)
		require.Nil(t, owner.w4, "round %d", r)
	}
	got, err := lb.RevNAT4.Dump()
	require.NoError(t, err)
	require.Len(t, got, 4*per+1)
	for _, e := range got {
		require.EqualValues(t, 4, e.Value.Port, "every entry has the last round's value")
	}
	// Mixed families: every other write IPv6 (its ID goes to the IPv6
	// map; the IPv4 map keeps what it had).
	round(4, true)
	v4, err := lb.RevNAT4.Dump()
	require.NoError(t, err)
	v6, err := lb.RevNAT6.Dump()
	require.NoError(t, err)
	require.Len(t, v4, 4*per+1)
	require.Len(t, v6, 2*per, "the IPv6 half went to the IPv6 map")
	for _, e := range v6 {
		require.True(t, e.Value.Address.Is6())
		require.EqualValues(t, 5, e.Value.Port)
	}
	changed := 0
	for _, e := range v4 {
		if e.Value.Port == 5 {
			changed++
		}
	}
	require.Equal(t, 2*per+1, changed, "the IPv4 half and the gate took round 4's value")
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
