package actorlb

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/maglev"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

const testM = 251

// wantTable builds, with the engine's seed, the table of svc's backends
// (those given, all active) with the IDs the engine gave them.
func wantTable(t *testing.T, e *Engine, m uint32, bs []lb.Backend) []uint32 {
	t.Helper()
	d, err := e.DumpMaps(ctxT(t))
	require.NoError(t, err)
	ids := map[netip.AddrPort]uint32{}
	for _, b := range append(d.Backends4, d.Backends6...) {
		ids[netip.AddrPortFrom(b.Value.Address, b.Value.Port)] = b.ID
	}
	var in []maglev.Backend
	for _, b := range bs {
		id, ok := ids[b.AddrPort()]
		require.True(t, ok, "backend %s has an ID", b.AddrPort())
		in = append(in, maglev.Backend{Addr: b.L3n4Addr, ID: lb.BackendID(id), Weight: b.Weight})
	}
	tab, err := maglev.Build(m, maglev.Seed, in, nil)
	require.NoError(t, err)
	out := make([]uint32, len(tab))
	for i, id := range tab {
		out[i] = uint32(id)
	}
	return out
}

// readTable reads svc id's table from mm (nil if it has none).
func readTable(t *testing.T, mm maps.MaglevMap, id lb.ServiceID) []uint32 {
	t.Helper()
	buf := make([]uint32, mm.TableSize())
	ok, err := mm.Read(uint16(id), buf)
	require.NoError(t, err)
	if !ok {
		return nil
	}
	return buf
}

func tableIDs(t *testing.T, mm maps.MaglevMap) []uint16 {
	t.Helper()
	ids, err := mm.IDs()
	require.NoError(t, err)
	return ids
}

// A maglev service gets exactly the table maglev.Build gives for its
// backends (weights honoured); changing its backends rewrites it, other
// services have none, and deleting the service or switching it to
// another algorithm deletes it.
func TestMaglevServiceGetsItsTable(t *testing.T) {
	e := newEngine(t, "", Config{MaglevTableSize: testM})
	ctx := ctxT(t)
	s := mustService(t, "10.96.0.10:80", "10.0.1.5:8080", "10.0.1.6:8080", "10.0.1.7:8080")
	s.LBAlgorithm = lb.LBAlgMaglev
	s.Backends[1].Weight = 300
	id, _, err := e.Upsert(ctx, s)
	require.NoError(t, err)
	other, _, err := e.Upsert(ctx, mustService(t, "10.96.0.11:80", "10.0.1.5:8080"))
	require.NoError(t, err)
	six := mustService(t, "[fd00::10]:443", "[fd00::1:5]:8443", "[fd00::1:6]:8443")
	six.LBAlgorithm = lb.LBAlgMaglev
	id6, _, err := e.Upsert(ctx, six)
	require.NoError(t, err)

	require.Equal(t, wantTable(t, e, testM, s.Backends), readTable(t, e.maps.Maglev4, id))
	require.Equal(t, wantTable(t, e, testM, six.Backends), readTable(t, e.maps.Maglev6, id6))
	require.Equal(t, []uint16{uint16(id)}, tableIDs(t, e.maps.Maglev4), "service %d (random) has no table", other)
	require.Equal(t, []uint16{uint16(id6)}, tableIDs(t, e.maps.Maglev6))

	// A backend leaves, one comes, one goes terminating: the table holds
	// the active ones.
	s.Backends = s.Backends[1:]
	b, err := lb.ParseBackend("10.0.1.8:8080")
	require.NoError(t, err)
	s.Backends = append(s.Backends, b)
	s.Backends[1].State = lb.BackendStateTerminating
	before := e.maps.Maglev4.Counters()
	_, _, err = e.Upsert(ctx, s)
	require.NoError(t, err)
	require.Equal(t, wantTable(t, e, testM, []lb.Backend{s.Backends[0], s.Backends[2]}), readTable(t, e.maps.Maglev4, id))
	require.Equal(t, before.Updated+1, e.maps.Maglev4.Counters().Updated, "one table written")

	// The same backends again: nothing written.
	before = e.maps.Maglev4.Counters()
	_, _, err = e.Upsert(ctx, s)
	require.NoError(t, err)
	require.Equal(t, before, e.maps.Maglev4.Counters(), "an unchanged table is not written")

	// Random now: no table.
	s.LBAlgorithm = lb.LBAlgRandom
	_, _, err = e.Upsert(ctx, s)
	require.NoError(t, err)
	require.Empty(t, tableIDs(t, e.maps.Maglev4))

	require.NoError(t, e.Delete(ctx, id6))
	require.Empty(t, tableIDs(t, e.maps.Maglev6), "deleted with its service")
	require.Equal(t, 0, e.maps.Maglev6.Entries())
}

// A backend's state changed through another service rewrites the table
// of every maglev service that shares it.
func TestMaglevTableFollowsASharedBackendsState(t *testing.T) {
	e := newEngine(t, "", Config{MaglevTableSize: testM})
	ctx := ctxT(t)
	a := mustService(t, "10.96.0.10:80", "10.0.1.5:8080", "10.0.1.6:8080")
	a.LBAlgorithm = lb.LBAlgMaglev
	id, _, err := e.Upsert(ctx, a)
	require.NoError(t, err)
	b := mustService(t, "10.96.0.11:80", "10.0.1.5:8080", "10.0.1.6:8080")
	b.Backends[1].State = lb.BackendStateQuarantined
	_, _, err = e.Upsert(ctx, b)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return equalU32(wantTable(t, e, testM, a.Backends[:1]), readTable(t, e.maps.Maglev4, id))
	}, 5*time.Second, 10*time.Millisecond, "the refresh rewrites the table without 10.0.1.6")
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A restart restores the tables with zero writes when nothing changed,
// repairs a table tampered with in its inner map, writes one missing,
// and deletes tables of services that are gone or no longer maglev.
func TestMaglevRestartRestoresAndRepairs(t *testing.T) {
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{MaglevTableSize: testM})
	ctx := ctxT(t)
	var ids []lb.ServiceID
	var svcs []*lb.Service
	for i, fe := range []string{"10.96.0.10:80", "10.96.0.11:80", "10.96.0.12:80"} {
		s := mustService(t, fe, "10.0.1.5:8080", "10.0.2.6:8080")
		s.Backends[0].Weight = uint16(50 * (i + 1))
		s.LBAlgorithm = lb.LBAlgMaglev
		id, _, err := e.Upsert(ctx, s)
		require.NoError(t, err)
		ids, svcs = append(ids, id), append(svcs, s)
	}
	want := wantTable(t, e, testM, svcs[0].Backends)
	require.NoError(t, e.Close())

	e = newEngine(t, root, Config{MaglevTableSize: testM})
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Restore.Repairs)
	require.Zero(t, st.Restore.Writes)
	require.Zero(t, st.MapWrites(), "nothing changed: no map written")
	require.Equal(t, want, readTable(t, e.maps.Maglev4, ids[0]))
	require.NoError(t, e.Close())

	// Tamper: one inner map's entries, one table removed, a table for a
	// service that does not exist, and a service switched to random by
	// rewriting its master.
	lbm, err := maps.Open(maps.Config{Root: root, MaglevTableSize: testM})
	require.NoError(t, err)
	master, ok, err := lbm.Service4.Lookup(maps.ServiceKey{Address: svcs[2].Frontend.Addr, Port: 80, Proto: 6})
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint32(lb.LBAlgMaglev), master.Value.BackendID>>24)
	master.Value.BackendID = 0
	require.NoError(t, lbm.Service4.Update([]maps.ServiceEntry{master}))
	require.NoError(t, lbm.Close())
	outer, err := ebpf.LoadPinnedMap(filepath.Join(root, maps.Maglev4Name), nil)
	require.NoError(t, err)
	var inner *ebpf.Map
	require.NoError(t, outer.Lookup(maps.MarshalRevNATKey(uint16(ids[0])), &inner))
	bad := make([]uint32, testM)
	bad[7] = 999
	require.NoError(t, inner.Put(uint32(0), bad))
	inner.Close()
	require.NoError(t, outer.Delete(maps.MarshalRevNATKey(uint16(ids[1]))))
	stray, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4 * testM, MaxEntries: 1})
	require.NoError(t, err)
	require.NoError(t, outer.Put(maps.MarshalRevNATKey(4000), stray))
	stray.Close()
	outer.Close()

	// verify sees each of them in the pinned maps.
	d, err := verify.DumpPinned(root)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d))
	readers, closeReaders, err := verify.OpenPinnedMaglev(root)
	require.NoError(t, err)
	vs, err := verify.CheckMaglev(d, readers)
	closeReaders()
	require.NoError(t, err)
	var kinds []string
	for _, v := range vs {
		require.Equal(t, 7, v.Invariant())
		kinds = append(kinds, fmt.Sprintf("%s %d", v.Kind, v.ServiceID))
	}
	require.Equal(t, []string{ // sorted by kind, then service
		fmt.Sprintf("maglev-missing %d", ids[1]),
		fmt.Sprintf("maglev-stray %d", ids[2]),
		"maglev-stray 4000",
		fmt.Sprintf("maglev-wrong %d", ids[0]),
	}, kinds, "%v", vs)

	e = newEngine(t, root, Config{MaglevTableSize: testM})
	st, err = e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"maglev-table": 4}, st.Restore.RepairsByKind)
	require.Equal(t, 4, st.Restore.Writes, "two tables written, two deleted")
	require.Equal(t, uint64(4), st.MapWrites(), "and nothing else")
	require.Equal(t, want, readTable(t, e.maps.Maglev4, ids[0]))
	require.Equal(t, wantTable(t, e, testM, svcs[1].Backends), readTable(t, e.maps.Maglev4, ids[1]))
	require.ElementsMatch(t, []uint16{uint16(ids[0]), uint16(ids[1])}, tableIDs(t, e.maps.Maglev4),
		"no table for the service that is random now, nor for the stray ID")
	d, err = verify.Dump(e.maps)
	require.NoError(t, err)
	vs, err = verify.CheckMaglev(d, [2]verify.MaglevReader{e.maps.Maglev4, e.maps.Maglev6})
	require.NoError(t, err)
	require.Empty(t, vs, "repaired")
}

// The periodic reconcile repairs a table whose entries were changed
// under the engine, without a restart, and counts it.
func TestMaglevReconcileRepairsATamperedTable(t *testing.T) {
	root := testutil.PinDir(t)
	e := newEngine(t, root, Config{MaglevTableSize: testM, ReconcileInterval: -1})
	ctx := ctxT(t)
	s := mustService(t, "10.96.0.10:80", "10.0.1.5:8080", "10.0.2.6:8080")
	s.LBAlgorithm = lb.LBAlgMaglev
	id, _, err := e.Upsert(ctx, s)
	require.NoError(t, err)
	want := readTable(t, e.maps.Maglev4, id)

	ds, err := e.Reconcile(ctx)
	require.NoError(t, err)
	for _, d := range ds {
		require.Zero(t, d.Repairs(), "%s: nothing drifted", d.Map)
	}

	outer, err := ebpf.LoadPinnedMap(filepath.Join(root, maps.Maglev4Name), nil)
	require.NoError(t, err)
	defer outer.Close()
	var inner *ebpf.Map
	require.NoError(t, outer.Lookup(maps.MarshalRevNATKey(uint16(id)), &inner))
	require.NoError(t, inner.Put(uint32(0), make([]uint32, testM)))
	inner.Close()

	ds, err = e.Reconcile(ctx)
	require.NoError(t, err)
	got := map[string]int{}
	for _, d := range ds {
		got[d.Map] = d.Repairs()
	}
	require.Equal(t, 1, got[maps.Maglev4Name])
	require.Equal(t, want, readTable(t, e.maps.Maglev4, id))
}

// The table size is checked before anything is opened.
func TestMaglevTableSizeMustBeAPrime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := New(ctx, Config{InMemory: true, MaglevTableSize: 1000})
	require.ErrorIs(t, err, maglev.ErrInvalidTableSize)
	require.ErrorContains(t, err, "new engine: MaglevTableSize: invalid maglev table size: table size 1000: want a prime in [251, 131071]")
}
