package maps

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unhex decodes the "0a 60 00 0a" form used in lb-map-layouts.md.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(tb, err)
	return b
}

// Every test vector of lb-map-layouts.md, marshalled and unmarshalled.
func TestLayoutVectors(t *testing.T) {
	vip := netip.MustParseAddr("10.96.0.10")
	vip6 := netip.MustParseAddr("fd00::a")
	tests := []struct {
		name      string
		want      string
		marshal   func() ([]byte, error)
		roundtrip func(b []byte) ([]byte, error) // unmarshal then marshal again
		check     func(t *testing.T, b []byte)   // unmarshal and compare fields
	}{
		{
			name: "lb4_key 10.96.0.10:53/UDP slot 0 external", want: "0a 60 00 0a 00 35 00 00 11 00 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalService4Key(ServiceKey{Address: vip, Port: 53, Proto: 17})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceKey{Address: vip, Port: 53, Proto: 17}, UnmarshalService4Key([12]byte(b)))
			},
		},
		{
			name: "lb4_key slot 2", want: "0a 60 00 0a 00 35 02 00 11 00 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalService4Key(ServiceKey{Address: vip, Port: 53, Proto: 17, Slot: 2})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceKey{Address: vip, Port: 53, Proto: 17, Slot: 2}, UnmarshalService4Key([12]byte(b)))
			},
		},
		{
			name: "lb4_service master count 3 id 7", want: "00 00 00 00 03 00 00 07 00 00 00 00",
			marshal: func() ([]byte, error) {
				b := MarshalServiceValue(ServiceValue{Count: 3, RevNATIndex: 7})
				return b[:], nil
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceValue{Count: 3, RevNATIndex: 7}, UnmarshalServiceValue([12]byte(b)))
			},
		},
		{
			name: "lb4_service slot backend 258 id 7", want: "02 01 00 00 00 00 00 07 00 00 00 00",
			marshal: func() ([]byte, error) {
				b := MarshalServiceValue(ServiceValue{BackendID: 258, RevNATIndex: 7})
				return b[:], nil
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceValue{BackendID: 258, RevNATIndex: 7}, UnmarshalServiceValue([12]byte(b)))
			},
		},
		{
			name: "lb4_service master affinity maglev", want: "30 2a 00 02 03 00 00 07 10 00 01 00",
			marshal: func() ([]byte, error) {
				b := MarshalServiceValue(ServiceValue{BackendID: 10800 | 2<<24, Count: 3, QCount: 1, RevNATIndex: 7, Flags: 1 << 4})
				return b[:], nil
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceValue{BackendID: 10800 | 2<<24, Count: 3, QCount: 1, RevNATIndex: 7, Flags: 1 << 4}, UnmarshalServiceValue([12]byte(b)))
			},
		},
		{
			name: "backend key 258", want: "02 01 00 00",
			marshal: func() ([]byte, error) { b := MarshalBackendKey(258); return b[:], nil },
			check: func(t *testing.T, b []byte) {
				require.Equal(t, uint32(258), UnmarshalBackendKey([4]byte(b)))
			},
		},
		{
			name: "lb4_backend 10.0.1.5:8080/TCP active", want: "0a 00 01 05 1f 90 06 00 00 00 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalBackend4(BackendValue{Address: netip.MustParseAddr("10.0.1.5"), Port: 8080, Proto: 6})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, BackendValue{Address: netip.MustParseAddr("10.0.1.5"), Port: 8080, Proto: 6}, UnmarshalBackend4([12]byte(b)))
			},
		},
		{
			name: "lb4_backend 10.0.1.6:8080/TCP terminating", want: "0a 00 01 06 1f 90 06 01 00 00 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalBackend4(BackendValue{Address: netip.MustParseAddr("10.0.1.6"), Port: 8080, Proto: 6, State: 1})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, BackendValue{Address: netip.MustParseAddr("10.0.1.6"), Port: 8080, Proto: 6, State: 1}, UnmarshalBackend4([12]byte(b)))
			},
		},
		{
			name: "revNAT key 7", want: "00 07",
			marshal: func() ([]byte, error) { b := MarshalRevNATKey(7); return b[:], nil },
			check: func(t *testing.T, b []byte) {
				require.Equal(t, uint16(7), UnmarshalRevNATKey([2]byte(b)))
			},
		},
		{
			name: "lb4_reverse_nat 10.96.0.10:53", want: "0a 60 00 0a 00 35",
			marshal: func() ([]byte, error) {
				b, err := MarshalRevNAT4(RevNATValue{Address: vip, Port: 53})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, RevNATValue{Address: vip, Port: 53}, UnmarshalRevNAT4([6]byte(b)))
			},
		},
		{
			name: "lb6_key [fd00::a]:443/TCP slot 1 internal",
			want: "fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0a 01 bb 01 00 06 01 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalService6Key(ServiceKey{Address: vip6, Port: 443, Slot: 1, Proto: 6, Scope: 1})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, ServiceKey{Address: vip6, Port: 443, Slot: 1, Proto: 6, Scope: 1}, UnmarshalService6Key([24]byte(b)))
			},
		},
		{
			name: "lb6_backend [fd00::1:5]:8443/TCP active",
			want: "fd 00 00 00 00 00 00 00 00 00 00 00 00 01 00 05 20 fb 06 00 00 00 00 00",
			marshal: func() ([]byte, error) {
				b, err := MarshalBackend6(BackendValue{Address: netip.MustParseAddr("fd00::1:5"), Port: 8443, Proto: 6})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, BackendValue{Address: netip.MustParseAddr("fd00::1:5"), Port: 8443, Proto: 6}, UnmarshalBackend6([24]byte(b)))
			},
		},
		{
			name: "lb6_reverse_nat [fd00::a]:443",
			want: "fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0a 01 bb",
			marshal: func() ([]byte, error) {
				b, err := MarshalRevNAT6(RevNATValue{Address: vip6, Port: 443})
				return b[:], err
			},
			check: func(t *testing.T, b []byte) {
				require.Equal(t, RevNATValue{Address: vip6, Port: 443}, UnmarshalRevNAT6([18]byte(b)))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.marshal()
			require.NoError(t, err)
			require.Equal(t, unhex(t, tt.want), got, "marshal")
			tt.check(t, unhex(t, tt.want))
		})
	}
}

func TestMarshalRejectsWrongFamily(t *testing.T) {
	_, err := MarshalService4Key(ServiceKey{Address: netip.MustParseAddr("fd00::a"), Port: 1})
	require.ErrorIs(t, err, ErrFamily)
	require.EqualError(t, err, "address family mismatch: fd00::a is not an IPv4 address")
	_, err = MarshalBackend6(BackendValue{Address: netip.MustParseAddr("10.0.0.1")})
	require.ErrorIs(t, err, ErrFamily)
	_, err = MarshalRevNAT6(RevNATValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")})
	require.ErrorIs(t, err, ErrFamily)
	_, err = MarshalRevNAT4(RevNATValue{})
	require.ErrorIs(t, err, ErrFamily, "the zero address has no family")
	// A 4-in-6 address is written as IPv4.
	b, err := MarshalRevNAT4(RevNATValue{Address: netip.MustParseAddr("::ffff:10.96.0.10"), Port: 53})
	require.NoError(t, err)
	require.Equal(t, unhex(t, "0a 60 00 0a 00 35"), b[:])
}
