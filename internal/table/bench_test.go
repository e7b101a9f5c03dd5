package table

import (
	"math/rand/v2"
	"net/netip"
	"slices"
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
	d := benchDump(benchRebuildN)
	b.ReportAllocs()
	for b.Loop() {
		if r := Rebuild(d); len(r.Repairs) != 0 {
			b.Fatalf("repairs: %v", r.Repairs[0])
		}
	}
}

// benchDump is the dump of n consistent 10-backend services.
func benchDump(n int) Dump {
	var d Dump
	for i := range n {
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
	return d
}

// benchRebuildN is the number of services BenchmarkRebuild rebuilds.
var benchRebuildN = 1000

// BenchmarkRebuild10kShuffled rebuilds 10,000 consistent 10-backend
// services from a dump in a random order, as a kernel hash map's dump
// comes (the restore-10k-x10 bench's shape).
func BenchmarkRebuild10kShuffled(b *testing.B) {
	d := benchDump(10000)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(d.Services4), func(i, j int) { d.Services4[i], d.Services4[j] = d.Services4[j], d.Services4[i] })
	r.Shuffle(len(d.Backends4), func(i, j int) { d.Backends4[i], d.Backends4[j] = d.Backends4[j], d.Backends4[i] })
	r.Shuffle(len(d.RevNAT4), func(i, j int) { d.RevNAT4[i], d.RevNAT4[j] = d.RevNAT4[j], d.RevNAT4[i] })
	b.ReportAllocs()
	for b.Loop() {
		if r := Rebuild(d); len(r.Repairs) != 0 || len(r.Services) != 10000 {
			b.Fatalf("repairs: %d, services %d", len(r.Repairs), len(r.Services))
		}
	}
}

// BenchmarkSlotOrderShuffled puts ten backends in no order (pods of ten
// nodes, as a cluster's services have) into slot order, IPv4 and IPv6.
func BenchmarkSlotOrderShuffled(b *testing.B) {
	for _, family := range []string{"IPv4", "IPv6"} {
		b.Run(family, func(b *testing.B) {
			s := benchService(10)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range s.Spec.Backends {
				s.Spec.Backends[i].Addr = netip.AddrFrom4([4]byte{10, 1, byte(r.IntN(200)), byte(i)})
				if family == "IPv6" {
					s.Spec.Backends[i].Addr = netip.AddrFrom16([16]byte{0xfd, 7: byte(r.IntN(200)), 15: byte(i)})
				}
			}
			shuffled := slices.Clone(s.Spec.Backends)
			b.ReportAllocs()
			for b.Loop() {
				copy(s.Spec.Backends, shuffled)
				SlotOrder(s.Spec.Backends, s.BackendIDs)
			}
		})
	}
}
