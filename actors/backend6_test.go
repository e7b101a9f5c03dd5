package actors

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The IPv6 backend mirror's index behaves exactly as a Go map, whatever
// mix of IPv6 prefixes and addresses it cannot keep small (IPv4, invalid)
// it holds.
func TestBackend6IndexMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	x, want := newBackend6Index(0), map[uint32]backendVal[addrkey.IP]{}
	val := func() backendVal[addrkey.IP] {
		var a netip.Addr
		switch r.IntN(6) {
		case 0:
			a = netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))})
		case 1:
			a = netip.Addr{}
		default:
			a = netip.AddrFrom16([16]byte{0: 0xfd, 12: byte(r.IntN(5)), 13: byte(r.IntN(3)), 15: byte(r.IntN(3))})
		}
		return backendVal[addrkey.IP]{port: uint16(r.IntN(3)), cluster: uint16(r.IntN(2)), proto: 6, state: uint8(r.IntN(2)), zone: uint8(r.IntN(2)), addr: addrkey.IPOf(a)}
	}
	for step := range 20000 {
		k := uint32(r.IntN(64))
		switch r.IntN(3) {
		case 0, 1:
			v := val()
			x.set(k, v)
			want[k] = v
		case 2:
			x.del(k)
			delete(want, k)
		}
		got, ok := x.get(k)
		w, wok := want[k]
		require.Equal(t, wok, ok, "step %d", step)
		require.Equal(t, w, got, "step %d", step)
		require.Equal(t, len(want), x.len(), "step %d", step)
	}
	all := map[uint32]backendVal[addrkey.IP]{}
	for k, v := range x.all {
		all[k] = v
	}
	require.Equal(t, want, all)
	b6 := x.(*backend6Index)
	require.NotZero(t, b6.small.len(), "IPv6 values are kept small")
	require.NotEmpty(t, b6.full, "the others whole")
	prefixes := map[[13]byte]bool{}
	for _, v := range want {
		if a := v.addr.Addr(); a.Is6() && !a.Is4In6() {
			prefixes[[13]byte(a.AsSlice()[:13])] = true
		}
	}
	require.Equal(t, len(prefixes), b6.pre.Len(), "a prefix is held while a value uses it, no longer")
}
