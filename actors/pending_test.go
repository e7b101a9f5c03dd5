package actors

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPendingTable(t *testing.T) {
	var tb pendingTable
	a, b := tb.reserve(), tb.reserve()
	require.NotZero(t, a)
	require.NotEqual(t, a, b)
	_, ok := tb.get(a)
	require.False(t, ok, "reserved, not set")
	pa, pb := &pendingReq{child: "a"}, &pendingReq{child: "b"}
	tb.set(a, pa)
	tb.set(b, pb)
	require.Equal(t, 2, tb.len())
	got, ok := tb.get(a)
	require.True(t, ok)
	require.Same(t, pa, got)

	tb.del(a)
	tb.del(a) // twice: no effect
	require.Equal(t, 1, tb.len())
	_, ok = tb.get(a)
	require.False(t, ok)

	// The slot is reused under a new generation: the old ID stays dead.
	c := tb.reserve()
	require.NotEqual(t, a, c)
	require.Equal(t, a&0xffffffff, c&0xffffffff, "same slot")
	pc := &pendingReq{child: "c"}
	tb.set(c, pc)
	_, ok = tb.get(a)
	require.False(t, ok, "a late reply to the old ID finds nothing")
	tb.set(a, pa) // a stale ID cannot overwrite the slot
	got, _ = tb.get(c)
	require.Same(t, pc, got)

	seen := map[uint64]*pendingReq{}
	for id, p := range tb.all {
		seen[id] = p
	}
	require.Equal(t, map[uint64]*pendingReq{b: pb, c: pc}, seen)
	_, ok = tb.get(0)
	require.False(t, ok)
	_, ok = tb.get(1 << 40)
	require.False(t, ok)
}
