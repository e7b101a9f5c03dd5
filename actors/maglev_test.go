package actors

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

const ownerM = 251

// ownerFixture is a Maglev owner on in-memory maps, counting the map
// calls by kind.
type ownerFixture struct {
	o     *maglevOwner
	lbm   *maps.LBMaps
	calls map[maps.Op]*atomic.Int64
}

func newOwnerFixture(t *testing.T) *ownerFixture {
	t.Helper()
	f := &ownerFixture{calls: map[maps.Op]*atomic.Int64{}}
	for _, op := range []maps.Op{maps.OpUpdate, maps.OpDelete, maps.OpDump, maps.OpLookup} {
		f.calls[op] = &atomic.Int64{}
	}
	lbm, err := maps.Open(maps.Config{InMemory: true, MaglevTableSize: ownerM, Fault: func(name string, op maps.Op, _ uint64, _ int) error {
		if name == maps.Maglev4Name || name == maps.Maglev6Name {
			f.calls[op].Add(1)
		}
		return nil
	}})
	require.NoError(t, err)
	t.Cleanup(func() { lbm.Close() })
	f.lbm = lbm
	f.o = newMaglevOwner(lbm.Maglev4, lbm.Maglev6, nil)
	require.NoError(t, f.o.load())
	return f
}

// counts returns the calls since the last counts: writes, reads.
func (f *ownerFixture) counts() (writes, reads int64) {
	return f.calls[maps.OpUpdate].Swap(0), f.calls[maps.OpLookup].Swap(0)
}

func inputs(id lb.ServiceID, fam maps.Family, bs ...string) messages.MaglevTable {
	t := messages.MaglevTable{ID: id, Family: fam}
	for i, b := range bs {
		be, err := lb.ParseBackend(b)
		if err != nil {
			panic(err)
		}
		t.Backends = append(t.Backends, maglev.Backend{Addr: be.L3n4Addr, ID: lb.BackendID(i + 1), Weight: 100})
	}
	return t
}

func (f *ownerFixture) table(t *testing.T, fam maps.Family, id lb.ServiceID) []uint32 {
	t.Helper()
	buf := make([]uint32, ownerM)
	ok, err := f.lbm.Maglev(fam).Read(uint16(id), buf)
	require.NoError(t, err)
	if !ok {
		return nil
	}
	return buf
}

func built(t *testing.T, in messages.MaglevTable) []uint32 {
	t.Helper()
	tab, err := maglev.Build(ownerM, maglev.Seed, in.Backends, nil)
	require.NoError(t, err)
	out := make([]uint32, len(tab))
	for i, v := range tab {
		out[i] = uint32(v)
	}
	return out
}

// The owner writes a table once: the same inputs again are skipped
// without reading the map; other inputs giving the same table (a backend
// of weight 0 added) are not written either.
func TestMaglevOwnerWritesOnlyChangedTables(t *testing.T) {
	f := newOwnerFixture(t)
	a := inputs(7, maps.IPv4, "10.0.1.1:80", "10.0.1.2:80")
	rep := f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a}})
	require.NoError(t, rep.Err)
	require.Equal(t, 1, rep.Written)
	require.Equal(t, built(t, a), f.table(t, maps.IPv4, 7))
	f.counts()

	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a}})
	require.Equal(t, &messages.MaglevApplied{}, rep)
	w, r := f.counts()
	require.Zero(t, w)
	require.Zero(t, r, "known inputs: the map is not read")

	zero := a
	zero.Backends = append(append([]maglev.Backend(nil), a.Backends...), maglev.Backend{Addr: lb.L3n4Addr{Addr: a.Backends[0].Addr.Addr, Port: 81}, ID: 9})
	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{zero}})
	require.Zero(t, rep.Written, "a backend of weight 0 changes no entry")
	w, _ = f.counts()
	require.Zero(t, w)

	b := inputs(7, maps.IPv4, "10.0.1.1:80", "10.0.1.3:80")
	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{b}, Deletes6: []lb.ServiceID{7}})
	require.Equal(t, 1, rep.Written)
	require.Zero(t, rep.Deleted, "lb6_maglev has no table 7")
	require.Equal(t, built(t, b), f.table(t, maps.IPv4, 7))
	require.Equal(t, 1, f.lbm.Maglev4.Entries())

	rep = f.apply(&messages.MaglevApply{Deletes4: []lb.ServiceID{7}})
	require.Equal(t, 1, rep.Deleted)
	require.Nil(t, f.table(t, maps.IPv4, 7))
	require.Zero(t, f.lbm.Maglev4.Entries())

	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{{ID: 8, Family: maps.IPv4, Backends: []maglev.Backend{{ID: 1, Weight: 1}}}}})
	require.ErrorIs(t, rep.Err, maglev.ErrInvalidBackend, "a backend without address")
}

// A table the owner did not write (loaded: a restart of the owner) is
// read and compared before it is written: equal, nothing is written.
// Sync compares every table and deletes those not listed.
func TestMaglevOwnerChecksWhatItDidNotWrite(t *testing.T) {
	f := newOwnerFixture(t)
	a := inputs(7, maps.IPv4, "10.0.1.1:80", "10.0.1.2:80")
	b := inputs(8, maps.IPv6, "[fd00::1]:80")
	require.NoError(t, f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a, b}}).Err)
	require.NoError(t, f.lbm.Maglev4.Write(9, make([]uint32, ownerM))) // a stray table

	f.o = newMaglevOwner(f.lbm.Maglev4, f.lbm.Maglev6, nil) // restarted
	require.NoError(t, f.o.load())
	f.counts()
	rep := f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a}})
	require.Zero(t, rep.Written)
	w, r := f.counts()
	require.Zero(t, w)
	require.Equal(t, int64(1), r, "read once to compare")

	bad := make([]uint32, ownerM)
	require.NoError(t, f.lbm.Maglev6.Write(8, bad))
	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a, b}, Sync: true})
	require.NoError(t, rep.Err)
	require.Equal(t, &messages.MaglevApplied{Written: 1, Deleted: 1, Repairs: 2}, rep, "table 8 rewritten, stray 9 deleted")
	require.Equal(t, built(t, b), f.table(t, maps.IPv6, 8))
	require.Nil(t, f.table(t, maps.IPv4, 9))
}

// Reconcile repairs a table changed or removed under the owner, from the
// core's inputs when they are those it wrote the table from, and deletes
// tables it never wrote. Other inputs mean an operation is in flight:
// the table is left to it.
func TestMaglevOwnerReconcile(t *testing.T) {
	f := newOwnerFixture(t)
	a := inputs(7, maps.IPv4, "10.0.1.1:80", "10.0.1.2:80")
	c := inputs(5, maps.IPv4, "10.0.1.4:80")
	b := inputs(8, maps.IPv6, "[fd00::1]:80")
	require.NoError(t, f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{a, b, c}}).Err)
	none := f.o.reconcile([]messages.MaglevTable{a, b, c})
	require.Equal(t, []messages.Drift{{Map: maps.Maglev4Name}, {Map: maps.Maglev6Name}}, none)

	require.NoError(t, f.lbm.Maglev4.Write(7, make([]uint32, ownerM)))
	require.NoError(t, f.lbm.Maglev4.Write(5, make([]uint32, ownerM)))
	require.NoError(t, f.lbm.Maglev6.Delete([]uint16{8}))
	require.NoError(t, f.lbm.Maglev6.Write(3, make([]uint32, ownerM)))
	inFlight := inputs(5, maps.IPv4, "10.0.1.4:80", "10.0.1.5:80")
	ds := f.o.reconcile([]messages.MaglevTable{a, b, inFlight})
	require.Equal(t, []messages.Drift{
		{Map: maps.Maglev4Name, Changed: 1},
		{Map: maps.Maglev6Name, Missing: 1, Extra: 1},
	}, ds)
	require.Equal(t, built(t, a), f.table(t, maps.IPv4, 7))
	require.Equal(t, built(t, b), f.table(t, maps.IPv6, 8))
	require.Nil(t, f.table(t, maps.IPv6, 3))
	require.Equal(t, make([]uint32, ownerM), f.table(t, maps.IPv4, 5), "in flight: left to the operation")

	// A restarted owner knows no content: it records a table equal to the
	// core's and leaves the others.
	f.o = newMaglevOwner(f.lbm.Maglev4, f.lbm.Maglev6, nil)
	require.NoError(t, f.o.load())
	ds = f.o.reconcile([]messages.MaglevTable{a, b, c})
	require.Equal(t, []messages.Drift{{Map: maps.Maglev4Name}, {Map: maps.Maglev6Name}}, ds)
	require.NotZero(t, f.o.fams[0].tables[7].in, "table 7 recorded")
	require.Zero(t, f.o.fams[0].tables[5].in, "table 5 differs from the core's: unknown still")
}

// The owner keeps per table 16 bytes of state in a map (its
// maglevFamily.tables), not the table: that map's heap per service,
// measured for 10,000 maglev services.
func TestMaglevOwnerMemoryPerService(t *testing.T) {
	const n = 10000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tables := make(map[lb.ServiceID]maglevState)
	for i := range n {
		tables[lb.ServiceID(i+1)] = maglevState{in: uint64(i + 1), sum: uint64(i)}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("maglev owner state: %.1f bytes per maglev service (%d services; a table would be %d bytes at M=%d)", per, n, 4*maglev.DefaultTableSize, maglev.DefaultTableSize)
	require.Less(t, per, 100.0)
	runtime.KeepAlive(tables)
}

// apply applies r as the actor does (applyAll: the tables staged new join
// the maps at the end).
func (f *ownerFixture) apply(r *messages.MaglevApply) *messages.MaglevApplied {
	return f.o.applyAll([]*messages.MaglevApply{r})[0]
}

// The tables a flush lost fail only the requests that wrote them: of
// three requests in one flush into a map of three tables, the one whose
// new table the kernel refused fails with ErrMapFull (its written count
// taken back, the table's state unknown), the others succeed. A request
// of more new tables than maglevFlushEvery is written whole (flushed on
// the way).
func TestMaglevOwnerFailsOnlyTheRequestsAFlushLost(t *testing.T) {
	lbm, err := maps.Open(maps.Config{Root: testutil.PinDir(t), MaglevTableSize: ownerM, MaxEntries: maps.Sizes{RevNAT: 3}})
	require.NoError(t, err)
	t.Cleanup(func() { lbm.Close() })
	o := newMaglevOwner(lbm.Maglev4, lbm.Maglev6, nil)
	require.NoError(t, o.load())
	be := "10.0.0.1:80/TCP"
	reps := o.applyAll([]*messages.MaglevApply{
		{Writes: []messages.MaglevTable{inputs(1, maps.IPv4, be), inputs(2, maps.IPv4, be)}},
		{Writes: []messages.MaglevTable{inputs(3, maps.IPv4, be), inputs(9, maps.IPv6, "[2001:db8::1]:80/TCP")}},
		{Writes: []messages.MaglevTable{inputs(4, maps.IPv4, be)}},
	})
	require.NoError(t, reps[0].Err)
	require.Equal(t, 2, reps[0].Written)
	require.NoError(t, reps[1].Err)
	require.Equal(t, 2, reps[1].Written)
	require.ErrorIs(t, reps[2].Err, maps.ErrMapFull)
	require.Equal(t, 0, reps[2].Written)
	require.Equal(t, maglevState{}, o.fams[0].tables[4], "lost: unknown, as after a failed write")
	for _, f := range o.fams {
		require.Equal(t, 0, f.m.Staged())
		require.Empty(t, f.staged)
	}
	ids, err := lbm.Maglev4.IDs()
	require.NoError(t, err)
	require.ElementsMatch(t, []uint16{1, 2, 3}, ids)
	ids, err = lbm.Maglev6.IDs()
	require.NoError(t, err)
	require.Equal(t, []uint16{9}, ids)

	big, err := maps.Open(maps.Config{Root: testutil.PinDir(t), MaglevTableSize: ownerM, MaxEntries: maps.Sizes{RevNAT: 1024}})
	require.NoError(t, err)
	t.Cleanup(func() { big.Close() })
	o = newMaglevOwner(big.Maglev4, big.Maglev6, nil)
	require.NoError(t, o.load())
	var many messages.MaglevApply
	for id := range lb.ServiceID(maglevFlushEvery + 44) {
		many.Writes = append(many.Writes, inputs(id+1, maps.IPv4, be))
	}
	rep := o.applyAll([]*messages.MaglevApply{&many})[0]
	require.NoError(t, rep.Err)
	require.Equal(t, maglevFlushEvery+44, rep.Written)
	ids, err = big.Maglev4.IDs()
	require.NoError(t, err)
	require.Len(t, ids, maglevFlushEvery+44)
	require.Equal(t, 0, big.Maglev4.Staged())
}

// A flush of many writes builds their tables ahead on two goroutines and
// writes the tables put would have built: every table in the maps is the
// one of its latest inputs (an ID written twice in one request, some
// inputs unchanged since the last flush, both families, more writes than
// a chunk), with Sync too; a write whose backends are invalid fails its
// request with the same error as when built by put, after the writes
// before it.
func TestMaglevOwnerBuildsAheadTheTablesPutWouldBuild(t *testing.T) {
	f := newOwnerFixture(t)
	var first, second messages.MaglevApply
	want := map[lb.ServiceID]messages.MaglevTable{}
	for i := range 3*prebuildChunk + 5 {
		id := lb.ServiceID(1 + i%(2*prebuildChunk+3)) // some IDs twice
		fam := maps.IPv4
		be := fmt.Sprintf("10.0.%d.%d:80", i%7, 1+i%5)
		if id%3 == 0 {
			fam, be = maps.IPv6, fmt.Sprintf("[2001:db8::%x]:80", 1+i%5)
		}
		in := inputs(id, fam, be, "10.9.9.9:80")
		if fam == maps.IPv6 {
			in = inputs(id, fam, be, "[2001:db8::99]:80")
		}
		first.Writes = append(first.Writes, in)
		want[id] = in
	}
	rep := f.apply(&first)
	require.NoError(t, rep.Err)
	for id, in := range want {
		require.Equal(t, built(t, in), f.table(t, in.Family, id), "service %d", id)
	}
	// Again, half unchanged, half with a backend more, then Sync.
	for i, in := range first.Writes {
		if i%2 == 0 {
			in.Backends = append(slices.Clone(in.Backends), inputs(in.ID, in.Family, map[maps.Family]string{maps.IPv4: "10.8.8.8:80", maps.IPv6: "[2001:db8::88]:80"}[in.Family]).Backends[0])
			in.Backends[len(in.Backends)-1].ID = 77
		}
		second.Writes = append(second.Writes, in)
		want[in.ID] = in
	}
	require.NoError(t, f.apply(&second).Err)
	second.Sync = true
	require.NoError(t, f.apply(&second).Err)
	for id, in := range want {
		require.Equal(t, built(t, in), f.table(t, in.Family, id), "service %d", id)
	}

	bad := inputs(500, maps.IPv4, "10.7.7.7:80", "10.7.7.7:80") // one backend twice
	ok1, ok2 := inputs(501, maps.IPv4, "10.7.7.1:80"), inputs(502, maps.IPv4, "10.7.7.2:80")
	serial := newOwnerFixture(t).apply(&messages.MaglevApply{Writes: []messages.MaglevTable{bad}})
	require.Error(t, serial.Err)
	rep = f.apply(&messages.MaglevApply{Writes: []messages.MaglevTable{ok1, bad, ok2}})
	require.Equal(t, serial.Err.Error(), rep.Err.Error())
	require.Equal(t, 1, rep.Written)
	require.Equal(t, built(t, ok1), f.table(t, maps.IPv4, 501))
	require.Nil(t, f.table(t, maps.IPv4, 502), "not reached")
}

// A table an incarnation staged and did not flush (it failed between the
// two) joins the map when the next incarnation loads: a write done before
// the crash, in the outer map and listed, its content unknown.
func TestMaglevOwnerLoadFlushesWhatAFailedIncarnationStaged(t *testing.T) {
	root := testutil.PinDir(t)
	lbm, err := maps.Open(maps.Config{Root: root, MaglevTableSize: ownerM})
	require.NoError(t, err)
	t.Cleanup(func() { lbm.Close() })
	o := newMaglevOwner(lbm.Maglev4, lbm.Maglev6, nil)
	require.NoError(t, o.load())
	in := inputs(9, maps.IPv4, "10.0.0.1:80/TCP")
	require.NoError(t, o.build(ownerM, in.Backends))
	require.NoError(t, o.writeBuilt(&o.fams[0], 9)) // staged; the incarnation dies here
	require.Equal(t, 1, lbm.Maglev4.Staged())

	o = newMaglevOwner(lbm.Maglev4, lbm.Maglev6, nil)
	require.NoError(t, o.load())
	require.Equal(t, 0, lbm.Maglev4.Staged())
	require.Equal(t, maglevState{}, o.fams[0].tables[9], "listed, content unknown")
	pinned, err := maps.Open(maps.Config{Root: root, MaglevTableSize: ownerM})
	require.NoError(t, err) // another opener sees only the outer map
	t.Cleanup(func() { pinned.Close() })
	ids, err := pinned.Maglev4.IDs()
	require.NoError(t, err)
	require.Equal(t, []uint16{9}, ids)
	buf := make([]uint32, ownerM)
	ok, err := pinned.Maglev4.Read(9, buf)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, built(t, in), buf)
}
