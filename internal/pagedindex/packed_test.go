package pagedindex

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// A Packed map behaves as one Go map whatever its keys: IPv4 frontends in
// runs of addresses (paged) and far apart (loose), IPv6 ones of a few
// prefixes (packed once learnt, in a map) and of more prefixes than the
// packer learns (kept whole), through sets, rewrites, deletes and a
// Reserve.
func TestPackedMatchesAMap(t *testing.T) {
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
	runs := Runs{Of: addrkey.FrontendRun, Back: addrkey.FrontendFromRun}
	m, want := NewPacked[lb.L3n4Addr, uint32](0, addrkey.NewFrontendPacker(), runs), map[lb.L3n4Addr]uint32{}
	m.Reserve(len(keys))
	for step := range 20000 {
		k := keys[r.IntN(len(keys))]
		if r.IntN(3) == 0 {
			m.Delete(k)
			delete(want, k)
		} else {
			v := r.Uint32()
			m.Set(k, v)
			want[k] = v
		}
		got, ok := m.Get(k)
		w, wok := want[k]
		require.Equal(t, wok, ok, "step %d: %s", step, k)
		require.Equal(t, w, got, "step %d: %s", step, k)
		if step%2000 == 1999 {
			require.Equal(t, len(want), m.Len(), "step %d", step)
			all := map[lb.L3n4Addr]uint32{}
			for k, v := range m.All {
				_, dup := all[k]
				require.False(t, dup, "step %d: %s yielded twice", step, k)
				all[k] = v
			}
			require.Equal(t, want, all, "step %d", step)
		}
	}
	require.NotEmpty(t, m.runs.pages, "runs of addresses were paged")
	require.NotEmpty(t, m.small, "IPv6 frontends of learnt prefixes were kept packed, out of runs")
	require.NotEmpty(t, m.full, "IPv6 frontends of unlearnt prefixes were kept whole")
}
