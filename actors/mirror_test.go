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
