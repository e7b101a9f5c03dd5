package addrkey

import (
	"math/bits"
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
	checkPacking(t, pk.Pack, pk.Unpack, n, gen)
}

// checkPacking is checkPacker with pack in place of the packer's Pack.
func checkPacking[K comparable](t *testing.T, pack func(K) (uint64, bool), unpack func(uint64) K, n int, gen func() (K, bool)) {
	t.Helper()
	seen := map[uint64]K{}
	packed := 0
	for range n {
		k, want := gen()
		p, ok := pack(k)
		require.Equal(t, want, ok, "%v", k)
		if !ok {
			continue
		}
		packed++
		require.Equal(t, k, unpack(p))
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

// IPv4 backends pack (an IPv4-mapped address is the same backend:
// BackendOf makes one key of both); IPv6 ones pack once their /104 prefix
// is learnt, which Pack alone never does.
func TestBackendPackerPacksIPv4AndLearntIPv6Prefixes(t *testing.T) {
	r := testutil.Rand(t)
	pk := NewBackendPacker()
	checkPacker(t, pk, 3000, func() (Backend, bool) {
		a := randomAddr(r)
		k := BackendOf(lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(70000)), Protocol: lb.L4Type(r.IntN(256))})
		return k, a.Unmap().Is4()
	})
	require.Zero(t, pk.Prefixes(), "Pack learns nothing")
	learnAll(t, pk, 3000, func() (Backend, bool) {
		a := randomAddr6(r, 40)
		if r.IntN(3) == 0 { // IPv4 keys share the space
			a = netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), 0, byte(r.IntN(256))})
		}
		return BackendOf(lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(70000)), Protocol: lb.L4Type(r.IntN(256))}), true
	})
	require.Equal(t, 40, pk.Prefixes())
}

// randomAddr6 returns an IPv6 address in one of n /104 prefixes.
func randomAddr6(r interface{ IntN(int) int }, n int) netip.Addr {
	p := r.IntN(n)
	return netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 7: byte(p >> 8), 12: byte(p),
		13: byte(r.IntN(256)), 14: byte(r.IntN(256)), 15: byte(r.IntN(256))})
}

// Every handle the packer can give round-trips, including the last one,
// and a full packer refuses a new prefix for good while it still packs
// the ones it knows.
func TestBackendPackerHandlesAndFullTable(t *testing.T) {
	pk := newBackendPacker(backendHandles) // the whole layout, beyond MaxBackendPrefixes
	keyOf := func(i int, low byte) Backend {
		return BackendOf(lb.L3n4Addr{Addr: netip.AddrFrom16([16]byte{0: 0xfd, 10: byte(i >> 16), 11: byte(i >> 8), 12: byte(i), 15: low}), Port: 443, Protocol: lb.UDP})
	}
	seen := make(map[uint64]int, backendHandles)
	for i := range backendHandles {
		k := keyOf(i, byte(i))
		p, ok := pk.Learn(k)
		require.True(t, ok, "prefix %d", i)
		require.NotZero(t, uint8(p>>24), "an IPv6 key's bits 24-31 are never zero")
		require.Equal(t, k, pk.Unpack(p), "prefix %d", i)
		_, dup := seen[p]
		require.False(t, dup, "prefix %d packs like prefix %d", i, seen[p])
		seen[p] = i
	}
	require.Equal(t, backendHandles, pk.Prefixes())
	extra := keyOf(backendHandles, 7)
	_, ok := pk.Learn(extra)
	require.False(t, ok, "a full packer learns no more")
	_, ok = pk.Pack(extra)
	require.False(t, ok)
	_, ok = pk.Learn(extra)
	require.False(t, ok, "refused for good")
	p, ok := pk.Pack(keyOf(12345, 99))
	require.True(t, ok, "known prefixes still pack")
	require.Equal(t, keyOf(12345, 99), pk.Unpack(p))
}

// A packedmap.Map with a BackendPacker behaves as a plain map whatever the
// order of its IPv4 and IPv6 keys, also once the packer is full (a small
// one here) and keys of new prefixes are kept whole.
func TestBackendPackerInAMapMatchesAPlainMap(t *testing.T) {
	r := testutil.Rand(t)
	m := packedmap.New[Backend, int](0, newBackendPacker(5))
	want := map[Backend]int{}
	var keys []Backend
	for range 300 {
		a := randomAddr6(r, 12)
		if r.IntN(3) == 0 {
			a = randomAddr(r)
		}
		keys = append(keys, BackendOf(lb.L3n4Addr{Addr: a, Port: uint16(r.IntN(3)), Protocol: lb.TCP}))
	}
	for step := range 5000 {
		k := keys[r.IntN(len(keys))]
		switch r.IntN(3) {
		case 0:
			m.Set(k, step)
			want[k] = step
		case 1:
			m.Delete(k)
			delete(want, k)
		}
		v, ok := m.Get(k)
		w, wok := want[k]
		require.Equal(t, wok, ok, "step %d", step)
		require.Equal(t, w, v, "step %d", step)
		require.Equal(t, len(want), m.Len())
	}
	got := map[Backend]int{}
	for k, v := range m.All {
		got[k] = v
	}
	require.Equal(t, want, got)
}

// Before it learns, a FrontendPacker packs plain IPv4 frontends of scope 0
// or 1 only (an IPv4-mapped one is another key); then IPv6 frontends of
// learnt /96 prefixes too, up to MaxFrontendPrefixes of them, never a
// zoned one.
func TestFrontendPackerPacksIPv4AndLearntIPv6Prefixes(t *testing.T) {
	r := testutil.Rand(t)
	pk := NewFrontendPacker()
	gen := func() lb.L3n4Addr {
		return lb.L3n4Addr{Addr: randomAddr(r), Port: uint16(r.IntN(70000)), Protocol: lb.L4Type(r.IntN(256)), Scope: lb.Scope(r.IntN(3))}
	}
	checkPacker(t, pk, 3000, func() (lb.L3n4Addr, bool) {
		a := gen()
		return a, a.Addr.Is4() && a.Scope < 2
	})
	learnAll(t, pk, 3000, func() (lb.L3n4Addr, bool) {
		a := gen()
		if r.IntN(2) == 0 {
			a.Addr = randomAddr96(r, MaxFrontendPrefixes-4) // with randomAddr's: at most MaxFrontendPrefixes
		}
		return a, a.Scope < 2
	})
	_, ok := pk.Learn(lb.L3n4Addr{Addr: netip.MustParseAddr("fe80::1%eth0"), Port: 80, Protocol: lb.TCP})
	require.False(t, ok, "a zone is not packed")
	for i := 0; pk.Prefixes() < MaxFrontendPrefixes; i++ {
		_, ok := pk.Learn(lb.L3n4Addr{Addr: netip.AddrFrom16([16]byte{0: 0x20, 1: 1, 5: byte(i >> 8), 6: byte(i)}), Port: 80})
		require.True(t, ok)
	}
	full := lb.L3n4Addr{Addr: netip.MustParseAddr("2001:2::9"), Port: 80, Protocol: lb.TCP}
	_, ok = pk.Learn(full)
	require.False(t, ok, "a full packer learns no more")
	_, ok = pk.Pack(full)
	require.False(t, ok)
}

// The service mirror's frontend index packs as FrontendPacker does.
func TestServiceKeyPackerPacksIPv4AndLearntIPv6Prefixes(t *testing.T) {
	r := testutil.Rand(t)
	pk := NewServiceKeyPacker()
	gen := func() ServiceKey {
		return ServiceKeyOf(maps.ServiceKey{Address: randomAddr(r), Port: uint16(r.IntN(70000)), Slot: uint16(r.IntN(5)), Proto: uint8(r.IntN(256)), Scope: uint8(r.IntN(3))})
	}
	checkPacker(t, pk, 3000, func() (ServiceKey, bool) {
		k := gen()
		return k, k.kind == 4 && k.scope < 2
	})
	learnAll(t, pk, 3000, func() (ServiceKey, bool) {
		k := gen()
		if r.IntN(2) == 0 {
			k.IP = IPOf(randomAddr96(r, MaxFrontendPrefixes-4))
		}
		return k, k.scope < 2
	})
}

// randomAddr96 returns an IPv6 address in one of n /96 prefixes.
func randomAddr96(r interface{ IntN(int) int }, n int) netip.Addr {
	p := r.IntN(n)
	return netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x96, 10: byte(p >> 8), 11: byte(p),
		12: byte(r.IntN(256)), 13: byte(r.IntN(256)), 14: byte(r.IntN(256)), 15: byte(r.IntN(256))})
}

// learnAll learns n keys made by gen, which also says whether each
// should pack: a packed key must pack again by Pack, alike, come back
// unchanged, and no two may pack alike.
func learnAll[K comparable](t *testing.T, pk interface {
	packedmap.Packer[K]
	Learn(K) (uint64, bool)
}, n int, gen func() (K, bool)) {
	t.Helper()
	checkPacking(t, func(k K) (uint64, bool) {
		p, ok := pk.Learn(k)
		if ok {
			again, packs := pk.Pack(k)
			require.True(t, packs, "%v: learnt, Pack must pack it", k)
			require.Equal(t, p, again)
		}
		return p, ok
	}, pk.Unpack, n, gen)
}

// An IPv4 backend's run key puts its address's last bits lowest: the
// backends a node's range hands out in order, on one port, get
// consecutive keys; the key is the packer's IPv4 form rotated, and comes
// back to the backend it was made from. An IPv6 backend has none.
func TestRun4KeysAreInAddressOrderAndComeBack(t *testing.T) {
	r := testutil.Rand(t)
	pk := NewBackendPacker()
	for range 2000 {
		a := [4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(255))}
		port, proto := uint16(r.IntN(1<<16)), lb.L4Type(r.IntN(256))
		k := BackendOf(lb.L3n4Addr{Addr: netip.AddrFrom4(a), Port: port, Protocol: proto})
		run, ok := k.Run4()
		require.True(t, ok, "%v", k)
		of, ok := Run4Of(lb.L3n4Addr{Addr: netip.AddrFrom4(a), Port: port, Protocol: proto})
		require.True(t, ok)
		require.Equal(t, run, of, "%v", k)
		require.Equal(t, k, FromRun4(run), "%v", k)
		p, ok := pk.Pack(k)
		require.True(t, ok)
		require.Equal(t, run, bits.RotateLeft64(p, 32), "the packer's IPv4 form, rotated: %v", k)
		a[3]++
		next, ok := BackendOf(lb.L3n4Addr{Addr: netip.AddrFrom4(a), Port: port, Protocol: proto}).Run4()
		require.True(t, ok)
		require.Equal(t, run+1, next, "the next address's key follows %v's", k)
		mapped, ok := BackendOf(lb.L3n4Addr{Addr: netip.AddrFrom16(netip.AddrFrom4(a).As16()), Port: port, Protocol: proto}).Run4()
		require.True(t, ok, "an IPv4-mapped address is its IPv4 address's key")
		require.Equal(t, next, mapped)
		mappedOf, ok := Run4Of(lb.L3n4Addr{Addr: netip.AddrFrom16(netip.AddrFrom4(a).As16()), Port: port, Protocol: proto})
		require.True(t, ok)
		require.Equal(t, next, mappedOf)
	}
	v6 := lb.L3n4Addr{Addr: netip.MustParseAddr("2001:db8::1"), Port: 80, Protocol: lb.TCP}
	_, ok := BackendOf(v6).Run4()
	require.False(t, ok, "an IPv6 backend has no run key")
	_, ok = Run4Of(v6)
	require.False(t, ok, "an IPv6 backend has no run key")
}

// FrontendRun gives an IPv4 frontend's packed key in run order (the
// address's last byte lowest: consecutive addresses of one port, scope
// and protocol get consecutive run keys) and back; IPv6 ones have none.
func TestFrontendRunKeysAreInAddressOrderAndComeBack(t *testing.T) {
	r := testutil.Rand(t)
	for _, pk := range []func(lb.L3n4Addr) (uint64, bool){
		NewFrontendPacker().Learn,
		func(a lb.L3n4Addr) (uint64, bool) {
			return NewServiceKeyPacker().Learn(ServiceKeyOf(maps.ServiceKey{Address: a.Addr, Port: a.Port, Proto: uint8(a.Protocol), Scope: uint8(a.Scope)}))
		},
	} {
		for range 1000 {
			a := [4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(255))}
			fe := lb.L3n4Addr{Addr: netip.AddrFrom4(a), Port: uint16(r.IntN(1 << 16)), Protocol: lb.TCP, Scope: lb.Scope(r.IntN(2))}
			p, ok := pk(fe)
			require.True(t, ok)
			run, ok := FrontendRun(p)
			require.True(t, ok, "%s", fe)
			require.Equal(t, p, FrontendFromRun(run), "%s", fe)
			a[3]++
			next := fe
			next.Addr = netip.AddrFrom4(a)
			pn, ok := pk(next)
			require.True(t, ok)
			rn, ok := FrontendRun(pn)
			require.True(t, ok)
			require.Equal(t, run+1, rn, "the next address's key follows %s's", fe)
		}
		p, ok := pk(lb.L3n4Addr{Addr: netip.MustParseAddr("fd96::1"), Port: 80, Protocol: lb.TCP})
		require.True(t, ok)
		_, ok = FrontendRun(p)
		require.False(t, ok, "an IPv6 frontend is not kept in runs")
	}
}
