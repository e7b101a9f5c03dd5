package actors

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
)

// The revNAT mirrors' index is the paged index under 16-bit service IDs:
// it behaves as a Go map over the whole ID space, its ends included, and
// yields each entry under the ID it was set with.
func TestRevNATIndexMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	x := newRevNATIndex[revNATVal[addrkey.IP4]](0)
	ids := []uint16{0, 1, 63, 64, 65535, 65534, 65472}
	for range 300 {
		ids = append(ids, uint16(r.IntN(1<<16)))
	}
	for from := 100; from < 400; from++ { // a run, as new services get
		ids = append(ids, uint16(from))
	}
	n := 0
	testutil.MatchesAMap(t, r, 3000, 500, ids, func() revNATVal[addrkey.IP4] {
		n++
		return revNATVal[addrkey.IP4]{port: uint16(r.IntN(1 << 16)), addr: addrkey.IP4Of(netip.AddrFrom4([4]byte{10, 0, byte(n >> 8), byte(n)}))}
	}, testutil.MapUnderTest[uint16, revNATVal[addrkey.IP4]]{Get: x.get, Set: x.set, Delete: x.del, Len: x.len, All: x.all})
}
