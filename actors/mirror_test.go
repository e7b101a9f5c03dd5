package actors

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// The compact mirror values give back exactly what went in.
func TestCompactValuesRoundTrip(t *testing.T) {
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::")} {
		be := maps.BackendEntry{ID: 7, Value: maps.BackendValue{Address: a, Port: 8080, Proto: 6, State: 2, ClusterID: 3, Zone: 4}}
		k, v := splitBackend(be)
		require.Equal(t, be, joinBackend(k, v), "%s", a)
		rn := maps.RevNATEntry{ID: 9, Value: maps.RevNATValue{Address: a, Port: 80}}
		k2, v2 := splitRevNAT(rn)
		require.Equal(t, rn, joinRevNAT(k2, v2), "%s", a)
	}
	// Different addresses stay different.
	_, a := splitBackend(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.0.1")}})
	_, b := splitBackend(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")}})
	require.NotEqual(t, a, b)
}

// The IPv4 backend and revNAT mirrors' values give back every value the
// IPv4 maps can hold; an address they cannot hold never equals a value
// they hold.
func TestVal4(t *testing.T) {
	for _, a := range []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255")} {
		be := maps.BackendEntry{ID: 7, Value: maps.BackendValue{Address: a, Port: 8080, Proto: 6, State: 2, ClusterID: 3, Zone: 4}}
		k, v := splitBackend4(be)
		require.Equal(t, be, joinBackend4(k, v), "%s", a)
		rn := maps.RevNATEntry{ID: 9, Value: maps.RevNATValue{Address: a, Port: 80}}
		k2, v2 := splitRevNAT4(rn)
		require.Equal(t, rn, joinRevNAT4(k2, v2), "%s", a)
		// An IPv4-mapped address is the same IPv4 address.
		_, mapped := splitBackend4(maps.BackendEntry{ID: 7, Value: maps.BackendValue{Address: netip.AddrFrom16(a.As16()), Port: 8080, Proto: 6, State: 2, ClusterID: 3, Zone: 4}})
		require.Equal(t, v, mapped, "%s", a)
	}
	_, zero := splitBackend4(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("0.0.0.0")}})
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::")} {
		_, v := splitBackend4(maps.BackendEntry{Value: maps.BackendValue{Address: a}})
		require.True(t, v.bad, "%s", a)
		require.NotEqual(t, zero, v, "%s", a)
		_, rv := splitRevNAT4(maps.RevNATEntry{Value: maps.RevNATValue{Address: a}})
		_, rzero := splitRevNAT4(maps.RevNATEntry{Value: maps.RevNATValue{Address: netip.MustParseAddr("0.0.0.0")}})
		require.NotEqual(t, rzero, rv, "%s", a)
	}
}
