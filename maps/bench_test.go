package maps

import (
	"net/netip"
	"testing"
)

func BenchmarkMarshalService4Key(b *testing.B) {
	k := ServiceKey{Address: netip.MustParseAddr("10.96.0.10"), Port: 53, Slot: 2, Proto: 17}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MarshalService4Key(k); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalBackend6(b *testing.B) {
	v := BackendValue{Address: netip.MustParseAddr("fd00::1:5"), Port: 8443, Proto: 6}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MarshalBackend6(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnmarshalServiceValue(b *testing.B) {
	raw := MarshalServiceValue(ServiceValue{BackendID: 258, Count: 3, RevNATIndex: 7})
	b.ReportAllocs()
	for b.Loop() {
		_ = UnmarshalServiceValue(raw)
	}
}
