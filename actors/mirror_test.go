package actors

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// checkForm checks the mirror values of one address form: every address
// in back comes back exactly; every address in other holds nothing the
// map could hold (it never equals the value of any address in back).
func checkForm[A ipForm](t *testing.T, of func(netip.Addr) A, back, other []netip.Addr) {
	t.Helper()
	held := map[backendVal[A]]bool{}
	for _, a := range back {
		be := maps.BackendEntry{ID: 7, Value: maps.BackendValue{Address: a, Port: 8080, Proto: 6, State: 2, ClusterID: 3, Zone: 4}}
		k, v := splitBackend(of)(be)
		require.Equal(t, be, joinBackend(k, v), "%s", a)
		rn := maps.RevNATEntry{ID: 9, Value: maps.RevNATValue{Address: a, Port: 80}}
		k2, v2 := splitRevNAT(of)(rn)
		require.Equal(t, rn, joinRevNAT(k2, v2), "%s", a)
		_, zero := splitBackend(of)(maps.BackendEntry{Value: maps.BackendValue{Address: a}})
		held[zero] = true
	}
	for _, a := range other {
		_, v := splitBackend(of)(maps.BackendEntry{Value: maps.BackendValue{Address: a}})
		require.False(t, held[v], "%s", a)
	}
}

// The compact mirror values give back exactly what went in: any address
// in the full form, any IPv4 address in the IPv4 maps' form (where the
// other addresses never look like one the map holds).
func TestCompactValuesRoundTrip(t *testing.T) {
	v4 := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255")}
	v6 := []netip.Addr{{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::")}
	checkForm(t, addrkey.IPOf, append(v4, v6...), nil)
	checkForm(t, addrkey.IP4Of, v4, []netip.Addr{{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::")})

	// In the full form IPv4 and IPv4-mapped addresses stay different; in
	// the IPv4 form they are one (the IPv4 map holds 4 bytes).
	_, a := splitBackend(addrkey.IPOf)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.0.1")}})
	_, b := splitBackend(addrkey.IPOf)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")}})
	require.NotEqual(t, a, b)
	_, a4 := splitBackend(addrkey.IP4Of)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.0.1")}})
	_, b4 := splitBackend(addrkey.IP4Of)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")}})
	require.Equal(t, a4, b4)

	// The sizes the memory figures rely on.
	require.Equal(t, uintptr(24), unsafe.Sizeof(backendVal[addrkey.IP]{}))
	require.Equal(t, uintptr(12), unsafe.Sizeof(backendVal[addrkey.IP4]{}))
	require.Equal(t, uintptr(8), unsafe.Sizeof(revNATVal[addrkey.IP4]{}))
}
