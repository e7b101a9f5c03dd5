package conntrack

import (
	"encoding"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(tb, err)
	return b
}

var (
	client4  = netip.MustParseAddr("10.0.0.1")
	vip4     = netip.MustParseAddr("10.96.0.10")
	backend4 = netip.MustParseAddr("10.0.1.5")
	nat4     = netip.MustParseAddr("192.168.1.10")
	client6  = netip.MustParseAddr("fd00::1")
	vip6     = netip.MustParseAddr("fd00::a")
	backend6 = netip.MustParseAddr("fd00::5")
	zeros16  = "00000000000000000000000000000000"
	fd00one  = "fd000000000000000000000000000001"
	fd00a    = "fd00000000000000000000000000000a"
	fd00five = "fd000000000000000000000000000005"
	unspec6  = netip.IPv6Unspecified()
	unspec4  = netip.IPv4Unspecified()
)

// Every layout of SPEC17, field by field at its offset: encoded, then
// decoded back to the same value.
func TestLayoutVectorsMatchSPEC17(t *testing.T) {
	type vector struct {
		name string
		v    encoding.BinaryMarshaler
		want string
	}
	var tests []vector
	add := func(name string, v encoding.BinaryMarshaler, want string) {
		tests = append(tests, vector{name, v, want})
	}
	// decode decodes b into a value of v's type.
	decode := func(v encoding.BinaryMarshaler, b []byte) (any, error) {
		switch v.(type) {
		case Key:
			var k Key
			err := k.UnmarshalBinary(b)
			return k, err
		case Entry:
			var e Entry
			err := e.UnmarshalBinary(b)
			return e, err
		default:
			var r RevEntry
			err := r.UnmarshalBinary(b)
			return r, err
		}
	}
	add("ct4_key 10.0.0.1:40000 -> 10.96.0.10:80/TCP",
		Key{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: 6},
		"0a 00 00 01 0a 60 00 0a 9c 40 00 50 06 00 00 00")
	add("ct6_key [fd00::1]:40000 -> [fd00::a]:443/UDP",
		Key{Src: client6, Dst: vip6, SrcPort: 40000, DstPort: 443, Proto: 17},
		fd00one+fd00a+"9c 40 01 bb 11 00 00 00")
	add("ct4_entry SNAT, closing and replied",
		Entry{LastSeen: 0x0102030405060708, Packets: 3, Bytes: 0x100, BackendID: 258, RevNATIndex: 7, NATPort: 50000,
			BackendPort: 8080, Flags: FlagClosing | FlagReplied, BackendAddr: backend4, NATAddr: nat4},
		"08 07 06 05 04 03 02 01  03 00 00 00 00 00 00 00  00 01 00 00 00 00 00 00  02 01 00 00  00 07  c3 50  1f 90  06 00  0a 00 01 05  c0 a8 01 0a  00 00 00 00")
	add("ct4_entry DSR",
		Entry{LastSeen: 1, BackendID: 1, RevNATIndex: 1, BackendPort: 80, Flags: FlagDSR, BackendAddr: backend4, NATAddr: unspec4},
		"01 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  01 00 00 00  00 01  00 00  00 50  01 00  0a 00 01 05  00 00 00 00  00 00 00 00")
	add("ct6_entry DSR",
		Entry{LastSeen: 1, BackendID: 1, RevNATIndex: 0x0102, BackendPort: 443, Flags: FlagDSR, BackendAddr: backend6, NATAddr: unspec6},
		"01 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  01 00 00 00  01 02  00 00  01 bb  01 00"+fd00five+zeros16+"00 00 00 00")
	add("ct4_rev",
		RevEntry{LastSeen: 0x10, Client: client4, Frontend: vip4, ClientPort: 40000, FrontendPort: 80, RevNATIndex: 7},
		"10 00 00 00 00 00 00 00  0a 00 00 01  0a 60 00 0a  9c 40  00 50  00 07  00 00")
	add("ct6_rev",
		RevEntry{Client: client6, Frontend: vip6, ClientPort: 40000, FrontendPort: 443, RevNATIndex: 0x0102},
		"00 00 00 00 00 00 00 00"+fd00one+fd00a+"9c 40  01 bb  01 02  00 00")
	require.Len(t, tests, 7)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.v.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, hex.EncodeToString(unhex(t, tt.want)), hex.EncodeToString(b))
			got, err := decode(tt.v, b)
			require.NoError(t, err)
			require.Equal(t, tt.v, got)
		})
	}
}

// The sizes of SPEC17: anything else is refused with ErrSize, naming the
// size; mixed families are refused with ErrFamily.
func TestBadInputIsRefused(t *testing.T) {
	var k Key
	var e Entry
	var r RevEntry
	for _, n := range []int{0, 15, 17, 39, 41} {
		require.ErrorIs(t, k.UnmarshalBinary(make([]byte, n)), ErrSize, n)
	}
	for _, n := range []int{0, 47, 49, 71, 73} {
		require.ErrorIs(t, e.UnmarshalBinary(make([]byte, n)), ErrSize, n)
	}
	for _, n := range []int{0, 23, 25, 47, 49} {
		require.ErrorIs(t, r.UnmarshalBinary(make([]byte, n)), ErrSize, n)
	}
	require.ErrorContains(t, k.UnmarshalBinary(make([]byte, 3)), "3 bytes")
	_, err := Key{Src: client4, Dst: vip6}.MarshalBinary()
	require.ErrorIs(t, err, ErrFamily)
	_, err = Key{}.MarshalBinary()
	require.ErrorIs(t, err, ErrFamily)
	_, err = Entry{BackendAddr: backend4, NATAddr: vip6}.MarshalBinary()
	require.ErrorIs(t, err, ErrFamily)
	_, err = Entry{}.MarshalBinary()
	require.ErrorIs(t, err, ErrFamily)
	_, err = RevEntry{Client: client6, Frontend: vip4}.MarshalBinary()
	require.ErrorIs(t, err, ErrFamily)
}

// A forward entry's partner is the backend's reply to the NAT address
// and port; the partner of that reverse entry is the forward key again.
// DSR entries have none.
func TestPartnerKeysPointAtEachOther(t *testing.T) {
	fk := Key{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: 6}
	e := Entry{BackendAddr: backend4, BackendPort: 8080, NATAddr: nat4, NATPort: 50000}
	rk, ok := e.ReverseKey(fk)
	require.True(t, ok)
	require.Equal(t, Key{Src: backend4, Dst: nat4, SrcPort: 8080, DstPort: 50000, Proto: 6}, rk)
	v := RevEntry{Client: client4, Frontend: vip4, ClientPort: 40000, FrontendPort: 80}
	require.Equal(t, fk, v.ForwardKey(rk))

	e.Flags = FlagDSR
	_, ok = e.ReverseKey(fk)
	require.False(t, ok)

	fk6 := Key{Src: client6, Dst: vip6, SrcPort: 1, DstPort: 2, Proto: 17}
	rk6, ok := Entry{BackendAddr: backend6, BackendPort: 3, NATPort: 4}.ReverseKey(fk6)
	require.True(t, ok)
	require.Equal(t, Key{Src: backend6, Dst: unspec6, SrcPort: 3, DstPort: 4, Proto: 17}, rk6, "an unset NAT address is the zero address of the family")
}
