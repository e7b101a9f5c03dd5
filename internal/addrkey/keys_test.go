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

// A run key is an IPv4 key's packed form (its packer's) rotated, so that
// its address's last byte is lowest: the keys given consecutive addresses
// of one port get consecutive run keys; each comes back to the key it was
// made from, and an IPv6 key has none (an IPv4-mapped backend is its IPv4
// address's key; an IPv4-mapped frontend or service key is not IPv4).
func TestRunKeysAreInAddressOrderAndComeBack(t *testing.T) {
	r := testutil.Rand(t)
	type kind struct {
		name string
		// run and pack give the run key and the packed form of the key
		// made of addr, port, proto and scope; back checks that run comes
		// back to that key.
		run  func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool)
		pack func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool)
		back func(t *testing.T, run uint64, a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope)
	}
	bp, fp, sp := NewBackendPacker(), NewFrontendPacker(), NewServiceKeyPacker()
	be := func(a netip.Addr, port uint16, proto lb.L4Type) Backend {
		return BackendOf(lb.L3n4Addr{Addr: a, Port: port, Protocol: proto})
	}
	sk := func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) ServiceKey {
		return ServiceKeyOf(maps.ServiceKey{Address: a, Port: port, Proto: uint8(proto), Scope: uint8(scope)})
	}
	for _, k := range []kind{{
		name: "backends",
		run: func(a netip.Addr, port uint16, proto lb.L4Type, _ lb.Scope) (uint64, bool) {
			return BackendRun(be(a, port, proto))
		},
		pack: func(a netip.Addr, port uint16, proto lb.L4Type, _ lb.Scope) (uint64, bool) {
			return bp.Learn(be(a, port, proto))
		},
		back: func(t *testing.T, run uint64, a netip.Addr, port uint16, proto lb.L4Type, _ lb.Scope) {
			require.Equal(t, be(a, port, proto), BackendFromRun(run))
		},
	}, {
		name: "frontends",
		run: func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool) {
			return FrontendRun(lb.L3n4Addr{Addr: a, Port: port, Protocol: proto, Scope: scope})
		},
		pack: func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool) {
			return fp.Learn(lb.L3n4Addr{Addr: a, Port: port, Protocol: proto, Scope: scope})
		},
		back: func(t *testing.T, run uint64, a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) {
			require.Equal(t, lb.L3n4Addr{Addr: a, Port: port, Protocol: proto, Scope: scope}, FrontendFromRun(run))
		},
	}, {
		name: "service keys",
		run: func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool) {
			return ServiceKeyRun(sk(a, port, proto, scope))
		},
		pack: func(a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) (uint64, bool) {
			return sp.Learn(sk(a, port, proto, scope))
		},
		back: func(t *testing.T, run uint64, a netip.Addr, port uint16, proto lb.L4Type, scope lb.Scope) {
			require.Equal(t, sk(a, port, proto, scope), ServiceKeyFromRun(run))
		},
	}} {
		t.Run(k.name, func(t *testing.T) {
			for range 2000 {
				b := [4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(255))}
				a := netip.AddrFrom4(b)
				port, proto, scope := uint16(r.IntN(1<<16)), lb.L4Type(r.IntN(256)), lb.Scope(r.IntN(2))
				run, ok := k.run(a, port, proto, scope)
				require.True(t, ok, "%s", a)
				k.back(t, run, a, port, proto, scope)
				p, ok := k.pack(a, port, proto, scope)
				require.True(t, ok)
				require.Equal(t, bits.RotateLeft64(p, 32), run, "the packer's form, rotated: %s", a)
				require.Equal(t, uint64(b[0])<<24|uint64(b[1])<<16|uint64(b[2])<<8|uint64(b[3]), run&0xffffffff, "the address lowest: %s", a)
				b[3]++
				next, ok := k.run(netip.AddrFrom4(b), port, proto, scope)
				require.True(t, ok)
				require.Equal(t, run+1, next, "the next address's key follows %s's", a)
				mapped, ok := k.run(netip.AddrFrom16(netip.AddrFrom4(b).As16()), port, proto, scope)
				if k.name == "backends" {
					require.True(t, ok, "an IPv4-mapped backend is its IPv4 address's key")
					require.Equal(t, next, mapped)
				} else {
					require.False(t, ok, "an IPv4-mapped frontend is an IPv6 one")
				}
				_, ok = k.run(a, port, proto, 2)
				if k.name != "backends" {
					require.False(t, ok, "a frontend of scope 2 is not packed")
				}
			}
			for i := range 300 { // past the first 255 backend handles: a high byte in the field
				a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 11: byte(i >> 8), 12: byte(i), 15: 1})
				_, ok := k.run(a, 80, lb.TCP, 0)
				require.False(t, ok, "an IPv6 key is not kept in runs")
			}
		})
	}
}

func TestIPV4IsTheAddressAsANumberForIPv4Alone(t *testing.T) {
	for _, c := range []struct {
		addr string
		want uint32
		ok   bool
	}{
		{"10.1.2.3", 0x0a010203, true},
		{"255.255.255.255", 0xffffffff, true},
		{"0.0.0.0", 0, true},
		{"::ffff:10.1.2.3", 0, false}, // an IPv4-mapped IPv6 address stays IPv6
		{"2001:db8::1", 0, false},
	} {
		got, ok := IPOf(netip.MustParseAddr(c.addr)).V4()
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%s: V4() = %#x, %v; want %#x, %v", c.addr, got, ok, c.want, c.ok)
		}
	}
	if _, ok := (IP{}).V4(); ok {
		t.Error("the zero IP is IPv4")
	}
}
