package actorlb

import (
	"net/netip"
	"sync/atomic"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// BenchmarkSingleCallsUpsertDelete10Backends measures the whole engine
// (façade, actors, core, map owners) on the single-call path: eight
// callers, each creating then deleting services of ten backends of their
// own, one Upsert and one DeleteByFrontend per iteration. The maps are
// in memory (kernel maps when privileged: see newEngine), so that the
// figure is the engine's own cost.
func BenchmarkSingleCallsUpsertDelete10Backends(b *testing.B) {
	e := newEngine(b, "", Config{InMemory: true, ReconcileInterval: -1})
	ctx := ctxT(b)
	var next atomic.Uint32
	b.ReportAllocs()
	b.SetParallelism(4) // 8 callers on 2 cores, as the bench harness
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{
				Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: uint16(80 + i>>16), Protocol: lb.TCP,
			}}}
			for j := range uint32(10) {
				k := (i%(1<<20))*10 + j
				svc.Backends = append(svc.Backends, lb.Backend{L3n4Addr: lb.L3n4Addr{
					Addr: netip.AddrFrom4([4]byte{10, byte(1 + k>>16), byte(k >> 8), byte(k)}), Port: 8080, Protocol: lb.TCP,
				}, Weight: lb.DefaultBackendWeight})
			}
			if _, _, err := e.Upsert(ctx, svc); err != nil {
				b.Error(err)
				return
			}
			if _, err := e.DeleteByFrontend(ctx, svc.Frontend.L3n4Addr); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
