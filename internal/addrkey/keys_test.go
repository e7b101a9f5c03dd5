package addrkey

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/packedmap"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// checkPacker packs n keys made by gen, which also says whether each
// should pack: a packed key must come back unchanged and no two may pack
// alike (what packedmap needs to behave as a plain map).
func checkPacker[K comparable](t *testing.T, pk packedmap.Packer[K], n int, gen func() (K, bool)) {
	t.Helper()
	seen := map[uint64]K{}
	packed := 0
	for range n {
		k, want := gen()
		p, ok := pk.Pack(k)
		require.Equal(t, want, ok, "%v", k)
		if !ok {
			continue
		}
		packed++
		require.Equal(t, k, pk.Unpack(p))
		if prev, dup := seen[p]; dup {
			require.Equal(t, prev, k, "two keys packed the same")
		}
		seen[p] = k
	}
	require.NotZero(t, packed)
}

// randomAddr returns an IPv4, IPv4-mapped IPv6 or IPv6 address, few
// enough that keys repeat.
func randomAddr(r interface{ IntN(int) int }) netip.Addr {
	v4 := netip.AddrFrom4([4]byte{10, byte(r.IntN(3)), byte(r.IntN(256)), byte(r.IntN(256))})
	switch r.IntN(4) {
	case 0, 1:
		return v4
	case 2:
		return netip.AddrFrom16(v4.As16()) // IPv4-mapped
	}
	return netip.AddrFrom16([16]byte{0: 0xfd, 12: 10, 14: byte(r.IntN(256)), 15: byte(r.IntN(256))})
}

// Only IPv4 backends pack (an IPv4-mapped address is the same backend:
// BackendOf makes one key of both).
func TestBackendPacker(t *testing.T) {
	r := testutil.Rand(t)
	checkPacker(t, BackendPacker{}, 3000, func() (Backend, bool) {
		a := randomAddr(r)
		k := BackendOf(lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(70000)), Protocol: lb.L4Type(r.IntN(256))})
		return k, a.Unmap().Is4()
	})
}

// Only plain IPv4 frontends pack: an IPv4-mapped one is another key.
func TestFrontendPacker(t *testing.T) {
	r := testutil.Rand(t)
	checkPacker(t, FrontendPacker{}, 3000, func() (lb.L3n4Addr, bool) {
		a := randomAddr(r)
		return lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(70000)), Protocol: lb.L4Type(r.IntN(256)), Scope: lb.Scope(r.IntN(256))}, a.Is4()
	})
}

// The service mirror's frontend indexes pack for IPv4 frontends.
func TestServiceKeyPacker(t *testing.T) {
	r := testutil.Rand(t)
	checkPacker(t, ServiceKeyPacker{}, 3000, func() (ServiceKey, bool) {
		a := randomAddr(r)
		k := maps.ServiceKey{Address: a, Port: uint16(r.IntN(70000)), Slot: uint16(r.IntN(5)), Proto: uint8(r.IntN(256)), Scope: uint8(r.IntN(256))}
		return ServiceKeyOf(k), a.Is4()
	})
}
