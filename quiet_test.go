package actorlb

import (
	"net/netip"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/messages"
	"github.com/stretchr/testify/require"
)

// rawStats is the supervisor's own statistics (more than Stats gives).
func rawStats(t *testing.T, e *Engine) messages.StatsReply {
	t.Helper()
	r, _, err := call(ctxT(t), e, func(ch chan<- messages.StatsReply) any { return &messages.Stats{Reply: ch} })
	require.NoError(t, err)
	return r
}

// After a bulk call the engine keeps the write arrays its ops gave back,
// for the next calls; once it has had no op for its quiet time it trims
// them to what an engine at rest keeps (some 80 KB at most).
func TestAQuietEngineTrimsTheArraysItKeepsForReuse(t *testing.T) {
	const quietAfter = 2 * time.Second
	cfg := Config{ReconcileInterval: -1}
	cfg.hooks.QuietAfter = quietAfter
	e := newEngine(t, "", cfg)
	svcs := make([]*lb.Service, 200)
	for i := range svcs {
		svcs[i] = &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{
			Addr: netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), Port: 80, Protocol: lb.TCP,
		}}}
		for j := range 10 {
			k := i*10 + j
			svcs[i].Backends = append(svcs[i].Backends, lb.Backend{L3n4Addr: lb.L3n4Addr{
				Addr: netip.AddrFrom4([4]byte{10, 1, byte(k >> 8), byte(k)}), Port: 8080, Protocol: lb.TCP,
			}, Weight: lb.DefaultBackendWeight})
		}
	}
	start := time.Now()
	rs, err := e.UpsertBatch(ctxT(t), svcs)
	require.NoError(t, err)
	for _, r := range rs {
		require.NoError(t, r.Err)
	}
	// 200 services: 2,200 service and 2,000 backend entries' arrays.
	kept := rawStats(t, e).SpareEntries
	require.Less(t, time.Since(start), quietAfter, "too slow to see the arrays before the quiet time")
	require.Greater(t, kept, 4000, "the bulk's arrays are kept for the next calls")
	deadline := time.Now().Add(10 * time.Second)
	for rawStats(t, e).SpareEntries > 5*256 { // five kinds of spares, each trimmed to 256 entries' room
		require.True(t, time.Now().Before(deadline), "still %d entries' room kept 10 s after the quiet time", rawStats(t, e).SpareEntries)
		time.Sleep(50 * time.Millisecond)
	}
	require.GreaterOrEqual(t, time.Since(start), quietAfter, "trimmed before the quiet time")
}
