package pagedindex

import (
	"math/bits"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// A Packed map behaves as one Go map whatever its keys: IPv4 addresses in
// runs (paged) and far apart (loose), IPv6 ones of a few prefixes (packed
// once learnt, in the map of the rest) and, for frontends, of more
// prefixes than the packer learns (kept whole there), through sets,
// rewrites, deletes and a Reserve; for the frontend packer and the
// backend one, whose packed forms tell IPv4 keys apart differently.
func TestPackedMatchesAMap(t *testing.T) {
	t.Run("frontends", func(t *testing.T) {
		r := testutil.Rand(t)
		var keys []lb.L3n4Addr
		for n := range 4 { // runs, as a cluster's service addresses
			for i := range 150 {
				keys = append(keys, lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 96, byte(n), byte(i)}), Port: 80, Protocol: lb.TCP})
			}
		}
		for i := range 300 {
			keys = append(keys,
				lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{192, 0, byte(r.IntN(256)), byte(r.IntN(256))}), Port: uint16(r.IntN(1 << 16)), Protocol: lb.UDP, Scope: lb.Scope(r.IntN(2))},
				lb.L3n4Addr{Addr: netip.AddrFrom16([16]byte{0xfd, 0, 11: byte(i % 100), 15: byte(r.IntN(256))}), Port: 443, Protocol: lb.TCP})
		}
		testPackedMatchesAMap(t, keys, Runs[lb.L3n4Addr]{Of: addrkey.FrontendRun, Back: addrkey.FrontendFromRun}, addrkey.NewFrontendPacker(), true)
	})
	t.Run("backends", func(t *testing.T) {
		r := testutil.Rand(t)
		var keys []addrkey.Backend
		for _, a := range testutil.BackendAddrs(r, 4, 150, 300) {
			keys = append(keys, addrkey.BackendOf(lb.L3n4Addr{Addr: a.Addr(), Port: a.Port(), Protocol: lb.TCP}))
		}
		testPackedMatchesAMap(t, keys, Runs[addrkey.Backend]{Of: addrkey.BackendRun, Back: addrkey.BackendFromRun}, addrkey.NewBackendPacker(), false)
	})
}

// testPackedMatchesAMap checks a Packed map of runs and pk over keys
// against a Go map, then that its keys in runs are paged, the others
// packed (and some kept whole, if wantWhole) in the map of the rest.
func testPackedMatchesAMap[K comparable](t *testing.T, keys []K, runs Runs[K], pk packedmap.Packer[K], wantWhole bool) {
	t.Helper()
	r := testutil.Rand(t)
	m := NewPacked[K, uint32](0, runs, pk)
	m.Reserve(len(keys), len(keys))
	testutil.MatchesAMap(t, r, 20000, 2000, keys, r.Uint32, testutil.MapUnderTest[K, uint32]{Get: m.Get, Set: m.Set, Delete: m.Delete, Len: m.Len, All: m.All})
	require.NotEmpty(t, m.runs.pages, "runs of addresses were paged")
	packed, whole := 0, 0
	for k := range m.rest.All {
		_, inRuns := runs.Of(k)
		require.False(t, inRuns, "%v: a key in runs kept in the map of the rest", k)
		if _, ok := pk.Pack(k); ok {
			packed++
		} else {
			whole++
		}
	}
	require.NotZero(t, packed, "IPv6 keys of learnt prefixes were kept packed, out of runs")
	if wantWhole {
		require.NotZero(t, whole, "IPv6 keys of unlearnt prefixes were kept whole")
	}
}

// SetSeq sets what Set would one key after the other: backends in runs
// (as a node's pods, more than one chunk of them) go to pages holding
// promoteAt entries or more, the stragglers between runs stay loose, IPv6
// ones go to the map of the rest, a key yielded twice keeps its last
// value, and the map then behaves as a Go map through deletes.
func TestPackedSetSeqSetsWhatSetWould(t *testing.T) {
	r := testutil.Rand(t)
	type pair struct {
		k addrkey.Backend
		v uint32
	}
	var seq []pair
	add := func(a netip.Addr, port uint16) {
		seq = append(seq, pair{addrkey.BackendOf(lb.L3n4Addr{Addr: a, Port: port, Protocol: lb.TCP}), r.Uint32()})
	}
	for range 40 {
		from := r.IntN(1 << 14)
		for i := from; i < from+r.IntN(100); i++ {
			add(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 8080)
		}
		add(netip.AddrFrom4([4]byte{192, 0, byte(r.IntN(256)), byte(r.IntN(256))}), uint16(r.IntN(1<<16))) // a straggler
		add(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(r.IntN(256))}), 80)
	}
	seq = append(seq, pair{seq[0].k, r.Uint32()}) // set twice
	require.Greater(t, len(seq), setChunk, "more than one chunk")
	m := NewPacked[addrkey.Backend, uint32](0, Runs[addrkey.Backend]{Of: addrkey.BackendRun, Back: addrkey.BackendFromRun}, addrkey.NewBackendPacker())
	m.SetSeq(func(yield func(addrkey.Backend, uint32) bool) {
		for _, p := range seq {
			if !yield(p.k, p.v) {
				return
			}
		}
	})
	want := map[addrkey.Backend]uint32{}
	for _, p := range seq {
		want[p.k] = p.v
	}
	require.NotEmpty(t, m.runs.pages, "runs were paged")
	for no, p := range m.runs.pages {
		require.GreaterOrEqual(t, bits.OnesCount64(p.used), promoteAt, "page %#x", no)
	}
	require.NotEmpty(t, m.runs.loose, "stragglers were held loose")
	require.NotZero(t, m.rest.Len(), "IPv6 keys in the map of the rest")
	check := func() {
		t.Helper()
		require.Equal(t, len(want), m.Len())
		got := map[addrkey.Backend]uint32{}
		for k, v := range m.All {
			got[k] = v
		}
		require.Equal(t, want, got)
		for _, p := range seq {
			g, ok := m.Get(p.k)
			w, wok := want[p.k]
			require.Equal(t, wok, ok, "%v", p.k)
			require.Equal(t, w, g, "%v", p.k)
		}
	}
	check()
	for i, p := range seq {
		if i%2 == 0 {
			m.Delete(p.k)
			delete(want, p.k)
		}
	}
	check()
}
