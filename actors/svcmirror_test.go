package actors

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

func openMemory(tb testing.TB, fault maps.FaultFunc) *maps.LBMaps {
	tb.Helper()
	m, err := maps.Open(maps.Config{InMemory: true, Fault: fault})
	require.NoError(tb, err)
	tb.Cleanup(func() { m.Close() })
	return m
}

func sortedEntries(es []maps.ServiceEntry) []maps.ServiceEntry {
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b maps.ServiceEntry) int {
		if c := a.Key.Address.Compare(b.Key.Address); c != 0 {
			return c
		}
		return int(a.Key.Port)<<24 + int(a.Key.Proto)<<16 + int(a.Key.Scope)<<8 + int(a.Key.Slot) -
			(int(b.Key.Port)<<24 + int(b.Key.Proto)<<16 + int(b.Key.Scope)<<8 + int(b.Key.Slot))
	})
	return es
}

// requireEntriesReported checks that the entry count a map's owner
// reported (maps.Map.Entries) is what the map holds.
func requireEntriesReported(t *testing.T, m maps.ServiceMap) {
	t.Helper()
	es, err := m.Dump()
	require.NoError(t, err)
	require.Equal(t, len(es), m.Entries(), "entries reported for %s", m.Name())
}

// The per-frontend service mirror behaves exactly as the generic mirror
// (the reference): same writes and deletes reach the map, same dump, also
// with holes, repeated keys, failed writes, reloads and v4/v6 frontends.
// Both report their map's entry count after every load and apply.
func TestSvcMirrorMatchesGenericMirror(t *testing.T) {
	r := testutil.Rand(t)
	var calls uint64
	armed := false // off while the seed entries are written
	fault := func(name string, op maps.Op, n uint64, entries int) error {
		calls++
		if armed && (op == maps.OpUpdate || op == maps.OpDelete) && r.IntN(20) == 0 {
			return syscall.EBUSY
		}
		return nil
	}
	for _, fam := range []maps.Family{maps.IPv4, maps.IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			armed = false
			a, b := openMemory(t, fault), openMemory(t, nil)
			got := newSvcMirror(a.Services(fam))
			want := newMirror[maps.ServiceEntry, maps.ServiceKey, maps.ServiceValue](b.Services(fam),
				func(e maps.ServiceEntry) (maps.ServiceKey, maps.ServiceValue) { return e.Key, e.Value },
				func(k maps.ServiceKey, v maps.ServiceValue) maps.ServiceEntry {
					return maps.ServiceEntry{Key: k, Value: v}
				})
			// Entries written before the mirrors load count too.
			seed := []maps.ServiceEntry{{Key: maps.ServiceKey{Address: addrs0(fam), Port: 443, Proto: 6}, Value: maps.ServiceValue{RevNATIndex: 1}}}
			require.NoError(t, a.Services(fam).Update(seed))
			require.NoError(t, b.Services(fam).Update(seed))
			require.NoError(t, got.load())
			require.NoError(t, want.load())
			requireEntriesReported(t, a.Services(fam))
			requireEntriesReported(t, b.Services(fam))
			armed = true
			addrs := []netip.Addr{netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.96.0.2")}
			if fam == maps.IPv6 {
				addrs = []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")}
			}
			key := func() maps.ServiceKey {
				return maps.ServiceKey{Address: addrs[r.IntN(len(addrs))], Port: uint16(80 + r.IntN(2)), Slot: uint16(r.IntN(12)), Proto: 6, Scope: uint8(r.IntN(2))}
			}
			// Mostly what the table writes (a backend ID and the service
			// ID), which the service mirror keeps compact; else one field
			// that makes the frontend whole.
			value := func() maps.ServiceValue {
				v := maps.ServiceValue{BackendID: uint32(1 + r.IntN(3)), RevNATIndex: 1}
				switch r.IntN(40) {
				case 0:
					v.BackendID = 0
				case 1:
					v.RevNATIndex = 2
				case 2:
					v.Flags = 4
				case 3:
					v.Flags2 = 1
				case 4:
					v.Count = 3
				case 5:
					v.QCount = 1
				}
				return v
			}
			var compactSeen, wholeSeen int
			for range 2000 {
				var ws []maps.ServiceEntry
				var ds []maps.ServiceKey
				for range r.IntN(8) {
					ws = append(ws, maps.ServiceEntry{Key: key(), Value: value()})
				}
				for range r.IntN(6) {
					ds = append(ds, key())
				}
				w, d, err := got.apply(ws, ds)
				if err != nil {
					require.True(t, errors.Is(err, syscall.EBUSY), "%v", err)
					// The reference applies what reached the faulty map.
					es, err := a.Services(fam).Dump()
					require.NoError(t, err)
					require.NoError(t, b.Services(fam).Delete(keysOf(want.dump().Slice())))
					require.NoError(t, b.Services(fam).Update(es))
					require.NoError(t, want.load())
					requireEntriesReported(t, a.Services(fam))
					requireEntriesReported(t, b.Services(fam))
					continue
				}
				w2, d2, err := want.apply(ws, ds)
				require.NoError(t, err)
				require.Equal(t, w2, w, "written")
				require.Equal(t, d2, d, "deleted")
				require.Equal(t, sortedEntries(want.dump().Slice()), sortedEntries(got.dump().Slice()))
				compactSeen += got.compact.Len()
				wholeSeen += got.whole.Len()
				requireEntriesReported(t, a.Services(fam))
				requireEntriesReported(t, b.Services(fam))
			}
			es, err := a.Services(fam).Dump()
			require.NoError(t, err)
			require.Equal(t, sortedEntries(es), sortedEntries(got.dump().Slice()), "mirror equals its map")
			require.NotZero(t, compactSeen, "frontends held compact")
			require.NotZero(t, wholeSeen, "frontends held whole")
		})
	}
	require.NotZero(t, calls)
}

func addrs0(fam maps.Family) netip.Addr {
	if fam == maps.IPv6 {
		return netip.MustParseAddr("fd00::9")
	}
	return netip.MustParseAddr("10.96.0.9")
}

func keysOf(es []maps.ServiceEntry) []maps.ServiceKey {
	ks := make([]maps.ServiceKey, len(es))
	for i, e := range es {
		ks[i] = e.Key
	}
	return ks
}

// The entries the table writes (slots of a backend ID and the service ID)
// are held compact, 4 bytes a slot; an entry the compact form cannot hold
// makes its frontend whole, with every entry it had, and a frontend left
// with no entry goes, so that it is compact again when written again.
func TestSvcMirrorHoldsTheTablesEntriesCompact(t *testing.T) {
	m := openMemory(t, nil).Services(maps.IPv4)
	o := newSvcMirror(m)
	require.NoError(t, o.load())
	fe := maps.ServiceKey{Address: netip.MustParseAddr("10.96.0.1"), Port: 80, Proto: 6}
	at := func(slot uint16) maps.ServiceKey { k := fe; k.Slot = slot; return k }
	written := []maps.ServiceEntry{{Key: at(0), Value: maps.ServiceValue{Count: 3, RevNATIndex: 7, Flags: 0x40}}}
	for s := range uint16(3) {
		written = append(written, maps.ServiceEntry{Key: at(s + 1), Value: maps.ServiceValue{BackendID: uint32(10 + s), RevNATIndex: 7}})
	}
	_, _, err := o.apply(written, nil)
	require.NoError(t, err)
	w, ok := o.compact.Get(addrkey.ServiceKeyOf(fe))
	require.True(t, ok, "held compact")
	require.Len(t, w, header+3, "one word a slot after the header")
	require.Zero(t, o.whole.Len())
	require.Equal(t, sortedEntries(written), sortedEntries(o.dump().Slice()))

	odd := maps.ServiceEntry{Key: at(5), Value: maps.ServiceValue{BackendID: 0, RevNATIndex: 7}} // drift's kind of slot
	_, _, err = o.apply([]maps.ServiceEntry{odd}, []maps.ServiceKey{at(2)})
	require.NoError(t, err)
	require.Zero(t, o.compact.Len())
	require.Equal(t, 1, o.whole.Len(), "made whole")
	want := append(slices.Clone(written[:2]), written[3], odd)
	require.Equal(t, sortedEntries(want), sortedEntries(o.dump().Slice()))
	requireEntriesReported(t, m)

	_, _, err = o.apply(nil, keysOf(want))
	require.NoError(t, err)
	require.Zero(t, o.compact.Len()+o.whole.Len(), "an empty frontend goes")
	_, _, err = o.apply(written, nil)
	require.NoError(t, err)
	require.Equal(t, 1, o.compact.Len(), "compact again")
	require.Equal(t, sortedEntries(written), sortedEntries(o.dump().Slice()))
	requireEntriesReported(t, m)
}

// A frontend written a request at a time stays compact: its master
// alone, then slots of the service's revNAT index (the slots' index is
// taken from the first), then fewer slots (trimmed), then more again
// (grown back within its room, the holes between them absent); every
// request leaves the entries the reference mirror holds.
func TestSvcMirrorKeepsAFrontendWrittenByPartsCompact(t *testing.T) {
	m, ref := openMemory(t, nil).Services(maps.IPv4), openMemory(t, nil).Services(maps.IPv4)
	o := newSvcMirror(m)
	want := newMirror[maps.ServiceEntry, maps.ServiceKey, maps.ServiceValue](ref,
		func(e maps.ServiceEntry) (maps.ServiceKey, maps.ServiceValue) { return e.Key, e.Value },
		func(k maps.ServiceKey, v maps.ServiceValue) maps.ServiceEntry {
			return maps.ServiceEntry{Key: k, Value: v}
		})
	require.NoError(t, o.load())
	require.NoError(t, want.load())
	fe := maps.ServiceKey{Address: netip.MustParseAddr("10.96.0.9"), Port: 443, Proto: 6}
	at := func(slot uint16) maps.ServiceKey { k := fe; k.Slot = slot; return k }
	slot := func(s uint16) maps.ServiceEntry {
		return maps.ServiceEntry{Key: at(s), Value: maps.ServiceValue{BackendID: uint32(100 + s), RevNATIndex: 9}}
	}
	steps := []struct {
		name    string
		writes  []maps.ServiceEntry
		deletes []maps.ServiceKey
		words   int // slots the frontend's words hold
	}{
		{"master alone", []maps.ServiceEntry{{Key: at(0), Value: maps.ServiceValue{Count: 3, RevNATIndex: 9}}}, nil, 0},
		{"its slots", []maps.ServiceEntry{slot(1), slot(2), slot(3)}, nil, 3},
		{"trimmed", nil, []maps.ServiceKey{at(3), at(2)}, 1},
		{"grown back past a hole", []maps.ServiceEntry{slot(3)}, nil, 3},
		{"and further", []maps.ServiceEntry{slot(6), slot(5)}, nil, 6},
	}
	for _, st := range steps {
		_, _, err := o.apply(st.writes, st.deletes)
		require.NoError(t, err, st.name)
		_, _, err = want.apply(st.writes, st.deletes)
		require.NoError(t, err, st.name)
		w, ok := o.compact.Get(addrkey.ServiceKeyOf(fe))
		require.True(t, ok, "%s: held compact", st.name)
		require.Zero(t, o.whole.Len(), "%s: nothing whole", st.name)
		require.Len(t, w, header+st.words, st.name)
		require.Equal(t, sortedEntries(want.dump().Slice()), sortedEntries(o.dump().Slice()), st.name)
		requireEntriesReported(t, m)
	}
}

// discardServices is a service map whose writes and deletes do nothing:
// a benchmark of the mirror times the mirror alone.
type discardServices struct{ maps.ServiceMap }

func (discardServices) Update([]maps.ServiceEntry) error { return nil }
func (discardServices) Delete([]maps.ServiceKey) error   { return nil }

// The mirror's own work per service as requests of new services come, a
// master and slots each (the table's entries), 1,000 services a request
// (as UpsertBatch sends them) into an empty mirror, then the same
// requests again (unchanged: nothing written) and their deletes. Compare
// runs with benchstat.
func BenchmarkSvcMirrorApply(b *testing.B) {
	for _, slots := range []int{1, 10} {
		const n, per = 50_000, 1_000
		reqs := make([][]maps.ServiceEntry, 0, n/per)
		dels := make([][]maps.ServiceKey, 0, n/per)
		for i := range n {
			if i%per == 0 {
				reqs, dels = append(reqs, nil), append(dels, nil)
			}
			k := maps.ServiceKey{Address: netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)}), Port: uint16(80 + i>>16), Proto: 6}
			r := &reqs[len(reqs)-1]
			*r = append(*r, maps.ServiceEntry{Key: k, Value: maps.ServiceValue{Count: uint16(slots), RevNATIndex: uint16(i + 1)}})
			for s := range slots {
				k.Slot = uint16(s + 1)
				*r = append(*r, maps.ServiceEntry{Key: k, Value: maps.ServiceValue{BackendID: uint32(i*slots + s + 1), RevNATIndex: uint16(i + 1)}})
			}
			for _, e := range (*r)[len(*r)-slots-1:] {
				dels[len(dels)-1] = append(dels[len(dels)-1], e.Key)
			}
		}
		m := discardServices{openMemory(b, nil).Services(maps.IPv4)}
		benchMirrorPhases(b, fmt.Sprintf("slots=%d/", slots), func() benchedMirror[maps.ServiceEntry, maps.ServiceKey] {
			return newSvcMirror(m)
		}, reqs, dels, n, "ns/service")
	}
}
