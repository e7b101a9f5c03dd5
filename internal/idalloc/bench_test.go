package idalloc_test

import (
	"math"
	"net/netip"
	"runtime"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/benchset"
	"github.com/actorlb/actorlb/internal/idalloc"
	"github.com/actorlb/actorlb/internal/pagedindex"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

type backendID uint32

func backendAddr(i int) addr {
	ip := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	return addr{ip: ip, port: 8080, proto: 6}
}

// BenchmarkAcquireRelease binds a fresh backend ID and frees it again, with
// 10000 other backends bound: the steady state of backend churn.
func BenchmarkAcquireRelease(b *testing.B) {
	a := idalloc.New[addr, backendID](math.MaxUint32)
	for i := range 10000 {
		if _, _, err := a.Acquire(backendAddr(i)); err != nil {
			b.Fatal(err)
		}
	}
	key := backendAddr(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, created, err := a.Acquire(key); err != nil || !created {
			b.Fatal(err, created)
		}
		if _, freed, err := a.Release(key); err != nil || !freed {
			b.Fatal(err, freed)
		}
	}
}

// BenchmarkAcquireRef increments and decrements the reference count of a
// bound backend (a second service sharing it).
func BenchmarkAcquireRef(b *testing.B) {
	a := idalloc.New[addr, backendID](math.MaxUint32)
	key := backendAddr(1)
	if _, _, err := a.Acquire(key); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, err := a.Acquire(key); err != nil {
			b.Fatal(err)
		}
		if _, _, err := a.Release(key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireFresh binds b.N distinct keys into one allocator, map
// growth included.
func BenchmarkAcquireFresh(b *testing.B) {
	keys := make([]addr, b.N)
	for i := range keys {
		keys[i] = backendAddr(i)
	}
	a := idalloc.New[addr, backendID](math.MaxUint32)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := a.Acquire(keys[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireFreshAfterWrap binds fresh keys in a 2^16 space that is
// half full of restored IDs spread evenly (every other ID), so each Acquire
// skips one reserved ID.
func BenchmarkAcquireFreshAfterWrap(b *testing.B) {
	const max = 1 << 16
	a := idalloc.New[uint32, uint32](max)
	for id := uint32(2); id <= max; id += 2 {
		if err := a.Restore(id+max, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		key := uint32(i)
		id, _, err := a.Acquire(key)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := a.Release(key); err != nil {
			b.Fatal(err)
		}
		_ = id
	}
}

// compactAddr is a pointer-free 20-byte address key, an alternative a
// caller may use instead of a netip.Addr-based one.
type compactAddr struct {
	ip    [16]byte
	port  uint16
	proto uint8
	scope uint8
}

func compact(a addr) compactAddr {
	return compactAddr{ip: a.ip.As16(), port: a.port, proto: a.proto, scope: a.scope}
}

// heapPerService measures the live heap of a service allocator and a
// backend allocator holding n services with 10 distinct backends each.
func heapPerService[K comparable](n int, key func(addr) K) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	svc := idalloc.New[K, uint16](math.MaxUint16)
	be := idalloc.New[K, backendID](math.MaxUint32)
	for s := range n {
		fe := addr{ip: netip.AddrFrom4([4]byte{172, 20, byte(s >> 8), byte(s)}), port: 80, proto: 6}
		if _, _, err := svc.Acquire(key(fe)); err != nil {
			panic(err)
		}
		for i := range 10 {
			if _, _, err := be.Acquire(key(backendAddr(s*10 + i))); err != nil {
				panic(err)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(svc)
	runtime.KeepAlive(be)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestHeapPerService reports the allocator's share of the per-service memory
// budget (1 service ID + 10 backend IDs), for 32-byte keys like L3n4Addr
// (netip.Addr inside) and for 20-byte pointer-free keys. Map sizes double, so
// the cost per service depends on where n falls between two growths; several
// sizes are reported.
func TestHeapPerService(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("memory measurement: slow under -race and -short")
	}
	for _, n := range []int{1000, 10000, 50000} {
		t.Logf("%5d services x 10 backends: %4.0f B/service (32-byte keys), %4.0f B/service (20-byte keys)",
			n, heapPerService(n, func(a addr) addr { return a }), heapPerService(n, compact))
	}
}

// BenchmarkAcquireFrontends binds a cluster's frontends into an empty
// service ID allocator, as the allocator actor keeps them (IPv4 frontends
// packed, NewCompact, or by their run key, NewRuns), map growth included:
// 50,000 frontends in order (the harness's insert) or 10,000 drawn at
// random from a /16 (internal/benchset's Spread, a cluster's ClusterIPs).
// ns/op is per frontend.
func BenchmarkAcquireFrontends(b *testing.B) {
	layouts := []struct {
		name string
		svcs []*lb.Service
	}{
		{"sequential", benchset.Sequential(50000, 0)},
		{"spread", benchset.Spread(10000, 0)},
	}
	kinds := []struct {
		name string
		make func() *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID]
	}{
		{"compact", func() *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
			return idalloc.NewCompact[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, 0, addrkey.NewFrontendPacker())
		}},
		{"runs", func() *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
			runs := pagedindex.Runs[lb.L3n4Addr]{Of: addrkey.FrontendRun, Back: addrkey.FrontendFromRun}
			return idalloc.NewRuns[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, 0, runs, addrkey.NewFrontendPacker())
		}},
	}
	for _, l := range layouts {
		fes := make([]lb.L3n4Addr, len(l.svcs))
		for i, s := range l.svcs {
			fes[i] = s.Frontend.L3n4Addr
		}
		for _, k := range kinds {
			b.Run(l.name+"/"+k.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					a := k.make()
					for _, fe := range fes {
						if _, _, err := a.Acquire(fe); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(fes)), "ns/frontend")
			})
		}
	}
}
