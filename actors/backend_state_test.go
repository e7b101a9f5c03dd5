package actors

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// The backend index behaves exactly as one map[backendKey]users, for IPv4,
// IPv4-mapped and IPv6 backends alike.
func TestUserIndexMatchesMap(t *testing.T) {
	r := testutil.Rand(t)
	addrs := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::"),
		netip.MustParseAddr("::a00:1"), // 10.0.0.1 in the last four bytes, not IPv4-mapped
	}
	key := func() backendKey {
		return compactKey(lb.L3n4Addr{Addr: addrs[r.IntN(len(addrs))], Port: uint16(80 + r.IntN(2)), Protocol: lb.L4Type(r.IntN(2) + 1)})
	}
	x, want := newUserIndex(0), map[backendKey]users{}
	for range 5000 {
		k := key()
		switch r.IntN(3) {
		case 0:
			u := users{one: lb.ServiceID(r.IntN(5) + 1), extra: uint16(r.IntN(2)), state: lb.BackendState(r.IntN(3)), id: lb.BackendID(r.IntN(100))}
			x.set(k, u)
			want[k] = u
		case 1:
			x.del(k)
			delete(want, k)
		}
		u, ok := x.get(k)
		w, wok := want[k]
		require.Equal(t, wok, ok)
		require.Equal(t, w, u)
		require.Equal(t, len(want), x.len())
	}
	got := map[backendKey]users{}
	for k, u := range x.all {
		got[k] = u
	}
	require.True(t, maps.Equal(want, got), "all yields every entry once")
	require.NotEmpty(t, x.v4)
	require.NotEmpty(t, x.v6)
	for k := range got {
		if k4, ok := k.short(); ok {
			require.Equal(t, k, k4.long())
		}
	}
}
