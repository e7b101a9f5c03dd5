package table

import (
	"net/netip"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

func benchService(n int) *Service {
	s := &Service{Spec: lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: lb.TCP}, ID: 7}}}
	for i := range n {
		st := lb.BackendStateActive
		if i%4 == 3 {
			st = lb.BackendStateTerminating
		}
		s.Spec.Backends = append(s.Spec.Backends, lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight, State: st})
		s.BackendIDs = append(s.BackendIDs, lb.BackendID(i+1))
	}
	return s
}

// BenchmarkSlots computes the slot order and every service map entry of a
// 10-backend service (what an upsert writes).
func BenchmarkSlots(b *testing.B) {
	s := benchService(10)
	b.ReportAllocs()
	for b.Loop() {
		SlotOrder(s.Spec.Backends, s.BackendIDs)
		_ = Slots(s)
		_ = Master(s)
	}
}

// BenchmarkRebuild rebuilds 1,000 consistent 10-backend services from a dump.
func BenchmarkRebuild(b *testing.B) {
	var d Dump
	for i := range benchRebuildN {
		s := benchService(10)
		s.Spec.Frontend.ID = lb.ServiceID(i + 1)
		s.Spec.Frontend.Addr = netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		for j := range s.BackendIDs {
			s.BackendIDs[j] = lb.BackendID(i*10 + j + 1)
			s.Spec.Backends[j].Addr = netip.AddrFrom4([4]byte{10, byte(1 + (i*10+j)>>16), byte((i*10 + j) >> 8), byte(i*10 + j)})
		}
		SlotOrder(s.Spec.Backends, s.BackendIDs)
		d.Services4 = append(append(d.Services4, Slots(s)...), Master(s))
		d.Backends4 = append(d.Backends4, BackendEntries(s)...)
		d.RevNAT4 = append(d.RevNAT4, RevNAT(s))
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := Rebuild(d); len(r.Repairs) != 0 {
			b.Fatalf("repairs: %v", r.Repairs[0])
		}
	}
}

// benchRebuildN is the number of services BenchmarkRebuild rebuilds.
var benchRebuildN = 1000
