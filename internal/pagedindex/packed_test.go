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
	m := NewPacked[lb.L3n4Addr, uint32](0, addrkey.NewFrontendPacker(), runs)
	m.Reserve(len(keys))
	testutil.MatchesAMap(t, r, 20000, 2000, keys, r.Uint32, testutil.MapUnderTest[lb.L3n4Addr, uint32]{Get: m.Get, Set: m.Set, Delete: m.Delete, Len: m.Len, All: m.All})
	require.NotEmpty(t, m.runs.pages, "runs of addresses were paged")
	require.NotEmpty(t, m.small, "IPv6 frontends of learnt prefixes were kept packed, out of runs")
	require.NotEmpty(t, m.full, "IPv6 frontends of unlearnt prefixes were kept whole")
}
