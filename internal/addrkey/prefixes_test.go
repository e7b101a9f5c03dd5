package addrkey

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// Addresses come back whole from their handle while in use; a prefix's
// handle is freed with its last use and reused; the table never holds
// more prefixes than it may, and refuses IPv4 addresses.
func TestPrefixes104CountsUsesAndReusesHandles(t *testing.T) {
	r := testutil.Rand(t)
	tab := newPrefixes104(8)
	type use struct {
		h   uint16
		low [3]byte
		ip  IP
	}
	var live []use
	perPrefix := map[prefix104]int{}
	for step := range 5000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(live))
			u := live[i]
			live = append(live[:i], live[i+1:]...)
			tab.Release(u.h)
			perPrefix[prefix104(u.ip.addr[:13])]--
			if perPrefix[prefix104(u.ip.addr[:13])] == 0 {
				delete(perPrefix, prefix104(u.ip.addr[:13]))
			}
		} else {
			ip := IPOf(randomAddr6(r, 12))
			h, low, ok := tab.Acquire(ip)
			_, known := perPrefix[prefix104(ip.addr[:13])]
			require.Equal(t, known || len(perPrefix) < 8, ok, "step %d", step)
			if ok {
				live = append(live, use{h, low, ip})
				perPrefix[prefix104(ip.addr[:13])]++
			}
		}
		require.Equal(t, len(perPrefix), tab.Len(), "step %d", step)
		for _, u := range live {
			require.Equal(t, u.ip, tab.IP(u.h, u.low), "step %d", step)
		}
	}
	_, _, ok := tab.Acquire(IPOf(netip.MustParseAddr("10.0.0.1")))
	require.False(t, ok, "IPv4 is not an IPv6 prefix")
}
