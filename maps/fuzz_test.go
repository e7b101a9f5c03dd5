package maps

import (
	"bytes"
	"testing"
)

// Every raw layout survives unmarshal → marshal unchanged, except the pad
// bytes, which marshal always writes as zero.
func FuzzLayoutsRoundTrip(f *testing.F) {
	f.Add(unhex(f, "0a 60 00 0a 00 35 02 00 11 00 00 00 fd 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0a 01 bb 01 00 06 01 00 00"))
	f.Add(unhex(f, "30 2a 00 02 03 00 00 07 10 00 01 00"))
	f.Add(bytes.Repeat([]byte{0xff}, 24))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b [24]byte
		copy(b[:], data)
		k4 := [Service4KeySize]byte(b[:12])
		k4[10], k4[11] = 0, 0
		if got, err := MarshalService4Key(UnmarshalService4Key(k4)); err != nil || got != k4 {
			t.Fatalf("lb4_key % x -> % x, %v", k4, got, err)
		}
		k6 := b
		k6[22], k6[23] = 0, 0
		got6, err := MarshalService6Key(UnmarshalService6Key(k6))
		v6 := UnmarshalService6Key(k6).Address
		if v6.Is4In6() {
			if err == nil {
				t.Fatalf("lb6_key with 4-in-6 address %s accepted", v6)
			}
		} else if err != nil || got6 != k6 {
			t.Fatalf("lb6_key % x -> % x, %v", k6, got6, err)
		}
		sv := [ServiceValueSize]byte(b[:12])
		if got := MarshalServiceValue(UnmarshalServiceValue(sv)); got != sv {
			t.Fatalf("lb4_service % x -> % x", sv, got)
		}
		be4 := [Backend4Size]byte(b[:12])
		be4[11] = 0
		if got, err := MarshalBackend4(UnmarshalBackend4(be4)); err != nil || got != be4 {
			t.Fatalf("lb4_backend % x -> % x, %v", be4, got, err)
		}
		rn4 := [RevNAT4Size]byte(b[:6])
		if got, err := MarshalRevNAT4(UnmarshalRevNAT4(rn4)); err != nil || got != rn4 {
			t.Fatalf("lb4_reverse_nat % x -> % x, %v", rn4, got, err)
		}
		if k := [RevNATKeySize]byte(b[:2]); MarshalRevNATKey(UnmarshalRevNATKey(k)) != k {
			t.Fatalf("revnat key % x", k)
		}
	})
}
