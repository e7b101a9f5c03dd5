package datapath

import (
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// BenchmarkSocketLBConnect compares the rate of TCP connects (connect and
// close, no data) through a VIP, translated by the socket-LB program, with
// the rate of connects straight to the backend from the same cgroup (the
// program runs and finds no service) and, as a baseline, from a cgroup
// without the programs. The three alternate in chunks so that they see the
// same machine load. It reports each rate and vip/direct, the ratio of the
// first two (1 means translating costs nothing), and vip/no-prog; ns/op
// covers one connect of each kind.
func BenchmarkSocketLBConnect(b *testing.B) {
	e := newEnv(b, false)
	plain := startHelper(b, childCgroup(b), false)
	be := e.echoes(b, "bench", 1, true, false)[0]
	vip := e.vip()
	e.upsert(b, vip, 80, lb.TCP, be.backend(lb.TCP, lb.BackendStateActive))
	through, direct := addr(vip, 80), be.addr.String()
	type path struct {
		h    *helper
		addr string
		took time.Duration
	}
	paths := []*path{{h: e.helper, addr: through}, {h: e.helper, addr: direct}, {h: plain, addr: direct}}
	for _, p := range paths { // warm up
		r := p.h.do(b, request{Op: "tcp", Addr: p.addr, N: 50, Bare: true}, time.Minute)
		require.Zero(b, r.Failed, "%v", r.Errors)
	}

	const chunk = 250
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		k := min(chunk, b.N-done)
		for _, p := range paths {
			r := p.h.do(b, request{Op: "tcp", Addr: p.addr, N: k, Bare: true}, time.Minute)
			require.Zero(b, r.Failed, "%s: %v", p.addr, r.Errors)
			p.took += r.Elapsed
		}
	}
	b.StopTimer()
	rate := func(p *path) float64 { return float64(b.N) / p.took.Seconds() }
	vipRate, directRate, plainRate := rate(paths[0]), rate(paths[1]), rate(paths[2])
	b.ReportMetric(vipRate, "vip-conn/s")
	b.ReportMetric(directRate, "direct-conn/s")
	b.ReportMetric(plainRate, "no-prog-conn/s")
	b.ReportMetric(vipRate/directRate, "vip/direct")
	b.ReportMetric(vipRate/plainRate, "vip/no-prog")
	if b.N >= 1000 {
		b.Logf("%d connects each: through the VIP %.0f/s, direct %.0f/s, direct without programs %.0f/s; vip/direct %.3f, vip/no-prog %.3f",
			b.N, vipRate, directRate, plainRate, vipRate/directRate, vipRate/plainRate)
	}
}
