package actors

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

func TestDiffEntriesWritesMissingAndChangedThenDeletesExtra(t *testing.T) {
	type e struct{ k, v int }
	key := func(x e) int { return x.k }
	for _, tc := range []struct {
		name      string
		got, want []e
		writes    []e
		deletes   []int
		miss, chg int
		extra     int
	}{
		{name: "equal", got: []e{{1, 1}, {2, 2}}, want: []e{{2, 2}, {1, 1}}},
		{name: "missing", got: []e{{1, 1}}, want: []e{{1, 1}, {2, 2}}, writes: []e{{2, 2}}, miss: 1},
		{name: "changed", got: []e{{1, 9}}, want: []e{{1, 1}}, writes: []e{{1, 1}}, chg: 1},
		{name: "extra", got: []e{{1, 1}, {3, 3}}, want: []e{{1, 1}}, deletes: []int{3}, extra: 1},
		{name: "repeated key in the dump counts once", got: []e{{3, 3}, {3, 3}}, deletes: []int{3}, extra: 1},
		{name: "all kinds, writes in wanted order", got: []e{{1, 9}, {4, 4}}, want: []e{{2, 2}, {1, 1}, {3, 3}},
			writes: []e{{2, 2}, {1, 1}, {3, 3}}, deletes: []int{4}, miss: 2, chg: 1, extra: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, ds, d := diffEntries(tc.got, tc.want, key)
			require.Equal(t, tc.writes, ws)
			slices.Sort(ds)
			require.Equal(t, tc.deletes, ds)
			require.Equal(t, messages.Drift{Missing: tc.miss, Changed: tc.chg, Extra: tc.extra}, d)
		})
	}
}

// openMaps opens the six maps for t: real pinned maps when privileged,
// in-memory ones otherwise.
func openMaps(t *testing.T) *maps.LBMaps {
	t.Helper()
	return openFaultyMaps(t, nil)
}

// openFaultyMaps is openMaps with fault consulted before every map call.
func openFaultyMaps(t *testing.T, fault maps.FaultFunc) *maps.LBMaps {
	t.Helper()
	cfg := maps.Config{InMemory: true}
	if testutil.KernelMaps(t) {
		cfg = maps.Config{Root: testutil.PinDir(t)}
	}
	cfg.Fault = fault
	lb, err := maps.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { lb.Close() })
	return lb
}

func be(id uint32, addr string) maps.BackendEntry {
	return maps.BackendEntry{ID: id, Value: maps.BackendValue{Address: netip.MustParseAddr(addr), Port: 8080, Proto: 6}}
}

func TestReconcileRepairsEntriesChangedBehindTheOwnersBack(t *testing.T) {
	lb := openMaps(t)
	m := lb.Backend4
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2"), be(3, "10.0.0.3")}, nil)
	require.NoError(t, err)

	// A neighbour deletes one, rewrites one and adds one.
	require.NoError(t, m.Delete([]uint32{1}))
	require.NoError(t, m.Update([]maps.BackendEntry{be(2, "10.9.9.9"), be(7, "10.0.0.7")}))

	d := mr.reconcile()
	require.NoError(t, d.Err)
	wantPin := maps.PinOK
	if m.PinPath() == "" {
		wantPin = maps.PinNone
	}
	require.Equal(t, messages.Drift{Map: maps.Backend4Name, Pin: wantPin, Missing: 1, Changed: 1, Extra: 1}, d)
	got, err := m.Dump()
	require.NoError(t, err)
	require.ElementsMatch(t, []maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2"), be(3, "10.0.0.3")}, got)

	// Nothing left to repair, and the mirror still skips unchanged writes.
	require.Equal(t, 0, mr.reconcile().Repairs())
	w, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1")}, nil)
	require.NoError(t, err)
	require.Zero(t, w)
}

func TestReconcileRepinsARemovedPin(t *testing.T) {
	testutil.Privileged(t)
	lb := openMaps(t)
	mr := newSvcMirror(lb.Service4)
	require.NoError(t, mr.load())
	e := maps.ServiceEntry{Key: maps.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Proto: 6}, Value: maps.ServiceValue{Count: 1, RevNATIndex: 1}}
	_, _, err := mr.apply([]maps.ServiceEntry{e}, nil)
	require.NoError(t, err)
	require.NoError(t, os.Remove(lb.Service4.PinPath()))

	d := mr.reconcile()
	require.NoError(t, d.Err)
	require.Equal(t, maps.PinMissing, d.Pin)
	require.Equal(t, 1, d.Repairs())
	st, err := lb.Service4.CheckPin()
	require.NoError(t, err)
	require.Equal(t, maps.PinOK, st)
}

// unreadablePin is a map whose pin cannot be checked (the kernel refuses
// to open it for a passing reason) and which counts the repins asked.
type unreadablePin struct {
	maps.Map[maps.BackendEntry, uint32]
	repins int
}

var errPinUnreadable = errors.New("check pin: cannot allocate memory")

func (u *unreadablePin) CheckPin() (maps.PinState, error) { return maps.PinOK, errPinUnreadable }
func (u *unreadablePin) Repin() error                     { u.repins++; return nil }

func TestReconcileOfAPinThatCannotBeCheckedRepairsTheEntriesButNotThePin(t *testing.T) {
	lb := openMaps(t)
	m := &unreadablePin{Map: lb.Backend4}
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1")}, nil)
	require.NoError(t, err)
	require.NoError(t, lb.Backend4.Delete([]uint32{1}))

	d := mr.reconcile()
	require.ErrorIs(t, d.Err, errPinUnreadable)
	require.Equal(t, maps.PinOK, d.Pin, "not counted as a pin repair")
	require.Zero(t, m.repins)
	require.Equal(t, 1, d.Missing, "the entries are reconciled all the same")
	got, err := lb.Backend4.Dump()
	require.NoError(t, err)
	require.Equal(t, []maps.BackendEntry{be(1, "10.0.0.1")}, got)
}

// svcEntries returns the entries of n frontends (from the first) of
// slots slots each, master first, frontend by frontend, in fam.
func svcEntries(fam maps.Family, first, n, slots int) []maps.ServiceEntry {
	var es []maps.ServiceEntry
	for f := first; f < first+n; f++ {
		addr := netip.AddrFrom4([4]byte{10, 96, byte(f >> 8), byte(f)})
		if fam == maps.IPv6 {
			addr = netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 14: byte(f >> 8), 15: byte(f)})
		}
		k := maps.ServiceKey{Address: addr, Port: 80, Proto: 6}
		es = append(es, maps.ServiceEntry{Key: k, Value: maps.ServiceValue{Count: uint16(slots), RevNATIndex: uint16(f + 1)}})
		for s := 1; s <= slots; s++ {
			k.Slot = uint16(s)
			es = append(es, maps.ServiceEntry{Key: k, Value: maps.ServiceValue{BackendID: uint32(f*slots + s), RevNATIndex: uint16(f + 1)}})
		}
	}
	return es
}

// sortedBackends returns es sorted by ID.
func sortedBackends(es []maps.BackendEntry) []maps.BackendEntry {
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b maps.BackendEntry) int { return int(a.ID) - int(b.ID) })
	return es
}

// A reconcile repairs exactly what drifted, and nothing when nothing did:
// each round drifts the map behind its owner's back (entries deleted,
// values changed, entries added; or nothing), and the reconcile's counts
// are those of the exact comparison (diffEntries) of the map with the
// mirror, after which the map holds what the mirror holds. The service
// mirror (v4 and v6) and the generic one (backends) alike.
func TestReconcileRepairsExactlyWhatDrifted(t *testing.T) {
	r := testutil.Rand(t)
	lb := openMaps(t)
	for _, fam := range []maps.Family{maps.IPv4, maps.IPv6} {
		m := lb.Services(fam)
		mr := newSvcMirror(m)
		require.NoError(t, mr.load())
		_, _, err := mr.apply(svcEntries(fam, 0, 200, 3), nil)
		require.NoError(t, err)
		// Some frontends the mirror holds whole (a slot the compact form
		// cannot hold: flags, a hole).
		whole := svcEntries(fam, 500, 5, 3)
		for i := range whole {
			if whole[i].Key.Slot == 2 {
				whole[i].Value.Flags = 1
			}
		}
		_, _, err = mr.apply(whole, nil)
		require.NoError(t, err)
		require.Equal(t, 5, mr.whole.Len(), "frontends held whole")
		for round := range 30 {
			var dels []maps.ServiceKey
			var ws []maps.ServiceEntry
			if round%3 != 0 { // every third round drifts nothing
				cur := mr.collect()
				for range r.IntN(5) {
					dels = append(dels, cur[r.IntN(len(cur))].Key)
				}
				for range r.IntN(5) {
					e := cur[r.IntN(len(cur))]
					e.Value.BackendID += uint32(1 + r.IntN(100))
					ws = append(ws, e)
				}
				ws = append(ws, svcEntries(fam, 1000+r.IntN(50), r.IntN(2), 1)...)
			}
			require.NoError(t, m.Update(ws))
			require.NoError(t, m.Delete(dels))
			got, err := m.Dump()
			require.NoError(t, err)
			_, _, want := diffEntries(got, mr.collect(), func(e maps.ServiceEntry) maps.ServiceKey { return e.Key })

			d := mr.reconcile()
			require.NoError(t, d.Err)
			require.Equal(t, [3]int{want.Missing, want.Changed, want.Extra}, [3]int{d.Missing, d.Changed, d.Extra}, "%v round %d", fam, round)
			got, err = m.Dump()
			require.NoError(t, err)
			require.Equal(t, sortedEntries(mr.collect()), sortedEntries(got), "%v round %d", fam, round)
		}
	}

	m := lb.Backend4
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	var bes []maps.BackendEntry
	for i := range 300 {
		bes = append(bes, be(uint32(i+1), netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()))
	}
	_, _, err := mr.apply(bes, nil)
	require.NoError(t, err)
	for round := range 30 {
		var dels []uint32
		var ws []maps.BackendEntry
		if round%3 != 0 {
			for range r.IntN(5) {
				dels = append(dels, uint32(1+r.IntN(300)))
			}
			for range r.IntN(5) {
				ws = append(ws, be(uint32(1+r.IntN(300)), "10.9.9.9"))
			}
			for range r.IntN(3) {
				ws = append(ws, be(uint32(1000+r.IntN(50)), "10.8.8.8"))
			}
		}
		require.NoError(t, m.Update(ws))
		require.NoError(t, m.Delete(dels))
		got, err := m.Dump()
		require.NoError(t, err)
		_, _, want := diffEntries(got, mr.collect(), func(e maps.BackendEntry) uint32 { return e.ID })

		d := mr.reconcile()
		require.NoError(t, d.Err)
		require.Equal(t, [3]int{want.Missing, want.Changed, want.Extra}, [3]int{d.Missing, d.Changed, d.Extra}, "round %d", round)
		got, err = m.Dump()
		require.NoError(t, err)
		require.Equal(t, sortedBackends(mr.collect()), sortedBackends(got), "round %d", round)
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A reconcile of a map that did not drift reads the dump as it is against
// the mirror: it allocates the dump's raw chunks and little else, not a
// decoded copy of the dump, a copy of the mirror, and an index of either
// (which took some twelve times the raw dump for 10k services of ten
// backends, every 30 s by default).
func TestReconcileOfAnUndriftedMapCopiesNothing(t *testing.T) {
	lb := openMaps(t)
	const n = 20000

	bm := newMirror(maps.Map[maps.BackendEntry, uint32](lb.Backend4), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, bm.load())
	var bes []maps.BackendEntry
	for i := range n {
		bes = append(bes, be(uint32(i+1), netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()))
	}
	_, _, err := bm.apply(bes, nil)
	require.NoError(t, err)
	var d messages.Drift
	raw := uint64(n * (maps.BackendKeySize + maps.Backend4Size))
	got := allocated(func() { d = bm.reconcile() })
	require.NoError(t, d.Err)
	require.Zero(t, d.Repairs())
	require.Less(t, got, 3*raw, "backends: %d bytes allocated, %d of raw dump", got, raw)

	sm := newSvcMirror(lb.Service4)
	require.NoError(t, sm.load())
	_, _, err = sm.apply(svcEntries(maps.IPv4, 0, n/4, 3), nil)
	require.NoError(t, err)
	raw = uint64(n * (maps.Service4KeySize + maps.ServiceValueSize))
	got = allocated(func() { d = sm.reconcile() })
	require.NoError(t, d.Err)
	require.Zero(t, d.Repairs())
	require.Less(t, got, 3*raw, "services: %d bytes allocated, %d of raw dump", got, raw)
}

// A drift check leaves out the keys its owner writes or deletes while the
// map is read (before or after the dump saw them), compares those it
// writes while the dump is compared with what they held before, and still
// finds and repairs what someone else changed in the keys it did not
// write.
func TestADriftCheckLeavesOutWhatItsOwnerWroteMeanwhile(t *testing.T) {
	for _, when := range []string{"before the dump", "after the dump", "while the dump is compared"} {
		t.Run(when, func(t *testing.T) {
			lb := openMaps(t)
			m := lb.Backend4
			mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
			require.NoError(t, mr.load())
			_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.0.2"), be(3, "10.0.0.3"), be(4, "10.0.0.4")}, nil)
			require.NoError(t, err)
			// Someone else rewrites backend 4 behind the owner's back.
			require.NoError(t, m.Update([]maps.BackendEntry{be(4, "10.9.9.9")}))

			c := mr.beginCheck()
			ownerWrites := func() {
				// A new key, a changed one and a deleted one.
				_, _, err := mr.apply([]maps.BackendEntry{be(5, "10.0.0.5"), be(2, "10.0.2.2")}, []uint32{3})
				require.NoError(t, err)
			}
			switch when {
			case "before the dump":
				ownerWrites()
				c.read()
				c.readDone()
			case "after the dump":
				c.read()
				ownerWrites()
				c.readDone()
			default:
				c.read()
				c.readDone()
				ownerWrites()
			}
			for c.step(1) == 0 { // an entry a step
			}
			ds := c.finish()
			require.Len(t, ds, 1)
			require.NoError(t, ds[0].Err)
			require.Equal(t, 1, ds[0].Changed, "backend 4, which the owner did not write")
			require.Zero(t, ds[0].Missing+ds[0].Extra, "backends 2, 3 and 5 were the owner's writes: %+v", ds[0])
			got, err := m.Dump()
			require.NoError(t, err)
			require.ElementsMatch(t, []maps.BackendEntry{be(1, "10.0.0.1"), be(2, "10.0.2.2"), be(4, "10.0.0.4"), be(5, "10.0.0.5")}, got)
			require.Nil(t, mr.check, "the mirror forgets a finished check")
			require.Zero(t, mr.reconcile().Repairs(), "the next check finds nothing")
		})
	}
}

// Keys the owner writes while the dump is compared are compared with what
// the mirror held before: with nothing drifted, nothing is reported, and
// the check does not fall back to the exact comparison (a write of a key
// compared already, and of one not yet compared, on either side of a
// step).
func TestADriftCheckComparesKeysWrittenDuringItWithWhatTheyHeld(t *testing.T) {
	testutil.Privileged(t) // a dump in several chunks: the kernel's batch lookups
	lb := openMaps(t)
	m := lb.Backend4
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	const n = 3*maps.ChunkLen + 100
	var es []maps.BackendEntry
	for i := range n {
		es = append(es, be(uint32(i+1), fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)))
	}
	_, _, err := mr.apply(es, nil)
	require.NoError(t, err)
	c := mr.beginCheck().(*mapCheck[maps.BackendEntry, uint32])
	c.read()
	c.readDone()
	steps := 0
	for ; c.step(500) == 0; steps++ {
		// Between two steps, rewrite a backend and delete another (by
		// ID: some compared already, some not yet), and add one.
		for j := range 20 {
			id := uint32(steps*20 + j + 1)
			_, _, err := mr.apply([]maps.BackendEntry{be(id, "10.200.1.1"), be(uint32(n+steps*20+j+1), "10.200.2.2")}, []uint32{n - id})
			require.NoError(t, err)
		}
	}
	require.False(t, c.refused, "no entry refused")
	require.GreaterOrEqual(t, steps, 20, "the owner wrote between steps")
	require.Equal(t, c.count, c.accepted)
	ds := c.finish()
	require.Zero(t, ds[0].Repairs())
	require.NoError(t, ds[0].Err)
}

// A mirror read again from its map (after a failed write) while a check
// is in flight is its map then: the check reports no drift.
func TestADriftCheckOfAReloadedMirrorReportsNothing(t *testing.T) {
	lb := openMaps(t)
	m := lb.Backend4
	mr := newMirror(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4])
	require.NoError(t, mr.load())
	_, _, err := mr.apply([]maps.BackendEntry{be(1, "10.0.0.1")}, nil)
	require.NoError(t, err)
	c := mr.beginCheck()
	require.NoError(t, m.Update([]maps.BackendEntry{be(1, "10.9.9.9")})) // drift
	c.read()
	require.NoError(t, mr.load()) // as reloadAfter does
	c.readDone()
	for c.step(stepEntries) == 0 {
	}
	ds := c.finish()
	require.Zero(t, ds[0].Repairs())
	require.NoError(t, ds[0].Err)
}
