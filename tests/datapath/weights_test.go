package datapath

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// chiSquareBound1 is the χ² value that a spread over 2 buckets (1 degree
// of freedom) exceeds with probability 1e-6, as chiSquareBound is for 3:
// P(χ² > x) = erfc(√(x/2)), so x ≈ 23.93. At 0.001 (10.83) the four
// checks of a CI run failed about one run in 200 with nothing wrong
// (567 of 2,000 on the weight-1 backend: χ² 11.97); a uniform spread
// where 1:3 is asked reads χ² ≈ 667 over 2,000 connects.
const chiSquareBound1 = 23.93

// chiSquareExpected is Pearson's statistic of counts against the expected
// share of each bucket.
func chiSquareExpected(counts map[string]int, buckets []string, share []float64) float64 {
	total := 0
	for _, b := range buckets {
		total += counts[b]
	}
	var x float64
	for i, b := range buckets {
		exp := float64(total) * share[i]
		d := float64(counts[b]) - exp
		x += d * d / exp
	}
	return x
}

// pinnedMap opens a map pinned under the env's root (closed when t ends).
func (e *env) pinnedMap(t testing.TB, name string) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(e.root, name), nil)
	require.NoError(t, err, name)
	t.Cleanup(func() { m.Close() })
	return m
}

// memberKey is struct lb_member_key (and lb_affinity_match's key, same
// layout): backend ID host order, service ID network order.
func memberKey(backendID uint32, rev lb.ServiceID) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b[0:4], backendID)
	binary.BigEndian.PutUint16(b[4:6], uint16(rev))
	return b
}

// setWeights writes lb_members entries by hand (the engine does not yet):
// the summary {0, rev} with the largest weight and one entry per backend;
// they are deleted when t ends.
func (e *env) setWeights(t testing.TB, rev lb.ServiceID, weights map[uint32]uint16) {
	t.Helper()
	m := e.pinnedMap(t, "lb_members")
	var max uint16
	for id, w := range weights {
		require.NoError(t, m.Put(memberKey(id, rev), []byte{byte(w), byte(w >> 8), 0, 0}))
		max = maxU16(max, w)
	}
	require.NoError(t, m.Put(memberKey(0, rev), []byte{byte(max), byte(max >> 8), 0, 0}))
	t.Cleanup(func() {
		for id := range weights {
			_ = m.Delete(memberKey(id, rev))
		}
		_ = m.Delete(memberKey(0, rev))
	})
}

func maxU16(a, b uint16) uint16 {
	if a > b {
		return a
	}
	return b
}

// Weights: real connects follow the weights (1:3 within a χ² bound);
// weight 0 takes no new connection while open ones keep working; all
// weights 0 refuse.
func TestWeights(t *testing.T) {
	inBothFamilies(t, func(t *testing.T, e *env) {
		bs := e.echoes(t, "w", 2, true, false)
		vip := e.vip()
		rev := e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)
		id0, id1 := e.backendID(t, bs[0].addr), e.backendID(t, bs[1].addr)
		buckets := names(bs...)

		e.setWeights(t, rev, map[uint32]uint16{id0: 1, id1: 3})
		const n = 2000
		r := e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: n})
		require.Equal(t, n, r.OK, "failed: %v", r.Errors)
		x := chiSquareExpected(r.Names, buckets, []float64{0.25, 0.75})
		t.Logf("weights 1:3, %d connects: %v, χ² = %.2f (bound %.2f, p = 1e-6)", n, r.Names, x, chiSquareBound1)
		require.Less(t, x, chiSquareBound1, "spread %v is not 25/75", r.Names)

		// Weights 100 and 0 (no summary needed for the default, but
		// the service has one as soon as one weight is not 100).
		hold := e.ask(t, request{Op: "hold", Addr: addr(vip, 80), N: 40})
		require.Equal(t, 40, hold.OK, "failed: %v", hold.Errors)
		require.Len(t, hold.Names, 2, "both backends hold connections: %v", hold.Names)
		e.setWeights(t, rev, map[uint32]uint16{id0: 0, id1: 100})
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 500})
		require.Equal(t, map[string]int{bs[1].name: 500}, r.Names, "weight 0 got new connections; errors: %v", r.Errors)
		held := e.ask(t, request{Op: "held"})
		require.Equal(t, hold.Names, held.Names, "the open connections keep working: %v", held.Errors)

		// Every weight 0: nothing takes new connections.
		e.setWeights(t, rev, map[uint32]uint16{id0: 0, id1: 0})
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 5, Timeout: time.Second})
		require.Equal(t, 5, r.Failed, "connects succeeded: %v", r.Names)
		require.Contains(t, r.Errors[0], "operation not permitted")
		held = e.ask(t, request{Op: "held"})
		require.Equal(t, hold.Names, held.Names, "the open connections keep working: %v", held.Errors)
		e.ask(t, request{Op: "release"})

		// Four of five backends at weight 0: 16 random draws all miss
		// 0.8^16 ≈ 3% of the time, and the scan of every slot that
		// follows finds the live one: no connect fails.
		five := e.echoes(t, "five", 5, true, false)
		vip5 := e.vip()
		rev5 := e.upsert(t, vip5, 80, lb.TCP, backends(five, lb.TCP)...)
		w := map[uint32]uint16{}
		for i, b := range five {
			w[e.backendID(t, b.addr)] = uint16(min(i/4, 1) * 7)
		}
		e.setWeights(t, rev5, w)
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip5, 80), N: 1000})
		require.Equal(t, map[string]int{five[4].name: 1000}, r.Names, "errors: %v", r.Errors)
	})
}
