package actors

import (
	"math/bits"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The paged index behaves exactly as a Go map through runs of IDs written
// at once (as the allocator hands them out), random writes and deletes
// that thin pages out, and rewrites; pages and loose entries keep their
// rules: a page holds at least demoteBelow entries, a range without a page
// fewer than promoteAt loose ones.
func TestPagedIndexMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	x, want := newPagedIndex[uint64](0), map[uint32]uint64{}
	const span = 1024 // 16 pages
	var pagesSeen, looseSeen int
	check := func(step int) {
		t.Helper()
		require.Equal(t, len(want), x.len(), "step %d", step)
		for no, p := range x.pages {
			require.GreaterOrEqual(t, bits.OnesCount64(p.used), demoteBelow, "step %d: page %d", step, no)
			require.Zero(t, x.looseIn[no], "step %d: page %d has loose entries", step, no)
		}
		inRange := map[uint32]int{}
		for k := range x.loose {
			inRange[k>>pageShift]++
		}
		for no, c := range inRange {
			require.Less(t, c, promoteAt, "step %d: range %d", step, no)
			require.Equal(t, c, int(x.looseIn[no]), "step %d: range %d counted", step, no)
		}
		require.Len(t, x.looseIn, len(inRange), "step %d", step)
		pagesSeen += len(x.pages)
		looseSeen += len(x.loose)
	}
	for step := range 400 {
		switch r.IntN(4) {
		case 0: // a run, as a batch of new backends
			from := uint32(r.IntN(span))
			for k := from; k < min(span, from+uint32(r.IntN(200))); k++ {
				v := r.Uint64()
				x.set(k, v)
				want[k] = v
			}
		case 1: // deletes that thin pages out
			for range r.IntN(150) {
				k := uint32(r.IntN(span))
				x.del(k)
				delete(want, k)
			}
		default: // single writes and deletes
			for range r.IntN(40) {
				k := uint32(r.IntN(span))
				if r.IntN(2) == 0 {
					v := r.Uint64()
					x.set(k, v)
					want[k] = v
				} else {
					x.del(k)
					delete(want, k)
				}
			}
		}
		for k := range uint32(span) {
			got, ok := x.get(k)
			w, wok := want[k]
			require.Equal(t, wok, ok, "step %d: id %d", step, k)
			require.Equal(t, w, got, "step %d: id %d", step, k)
		}
		check(step)
	}
	all := map[uint32]uint64{}
	for k, v := range x.all {
		all[k] = v
	}
	require.Equal(t, want, all)
	require.NotZero(t, pagesSeen, "runs were held in pages")
	require.NotZero(t, looseSeen, "stragglers were held loose")
}

// A run of IDs takes a value's size per ID once its range is a page; IDs
// left far apart are held loose, not in pages of holes.
func TestPagedIndexPagesRunsAndKeepsStragglersLoose(t *testing.T) {
	x := newPagedIndex[uint64](0)
	for k := range uint32(10 * pageSize) {
		x.set(k, uint64(k))
	}
	require.Len(t, x.pages, 10)
	require.Empty(t, x.loose)
	for k := range uint32(10 * pageSize) {
		if k%pageSize != 0 { // one survivor a page
			x.del(k)
		}
	}
	require.Empty(t, x.pages, "pages of one entry go")
	require.Len(t, x.loose, 10)
	for k := range uint32(10 * pageSize) {
		v, ok := x.get(k)
		require.Equal(t, k%pageSize == 0, ok, "id %d", k)
		if ok {
			require.Equal(t, uint64(k), v)
		}
	}
}

// The page of a range that goes loose is kept, empty, for the next range
// that gets one: ranges that come and go (IDs taken and freed) do not
// make a page each time.
func TestPagedIndexReusesTheLastPageItDropped(t *testing.T) {
	x := newPagedIndex[uint64](0)
	for k := range uint32(pageSize) {
		x.set(k, uint64(k)+1)
	}
	first := x.pages[0]
	require.NotNil(t, first)
	for k := range uint32(pageSize) {
		x.del(k)
	}
	require.Empty(t, x.pages)
	require.Same(t, first, x.spare)
	require.Equal(t, valPage[uint64]{}, *x.spare, "the kept page is empty")
	for k := range uint32(promoteAt) {
		x.set(5*pageSize+k, 7)
	}
	require.Same(t, first, x.pages[5], "the next range's page is the kept one")
	require.Nil(t, x.spare)
	for k := range uint32(pageSize) {
		v, ok := x.get(5*pageSize + k)
		require.Equal(t, k < promoteAt, ok, "id %d", k)
		if ok {
			require.Equal(t, uint64(7), v)
		}
	}
	require.Equal(t, promoteAt, x.len())
}

// The revNAT mirrors' index is the paged index under 16-bit service IDs:
// it behaves as a Go map over the whole ID space, its ends included, and
// yields each entry under the ID it was set with.
func TestRevNATIndexMatchesAMap(t *testing.T) {
	r := testutil.Rand(t)
	x, want := newRevNATIndex[revNATVal[addrkey.IP4]](0), map[uint16]revNATVal[addrkey.IP4]{}
	ids := []uint16{0, 1, 63, 64, 65535, 65534, 65472}
	for range 300 {
		ids = append(ids, uint16(r.IntN(1<<16)))
	}
	for from := 100; from < 400; from++ { // a run, as new services get
		ids = append(ids, uint16(from))
	}
	for step := range 3000 {
		k := ids[r.IntN(len(ids))]
		if r.IntN(3) == 0 {
			x.del(k)
			delete(want, k)
		} else {
			v := revNATVal[addrkey.IP4]{port: uint16(r.IntN(1 << 16)), addr: addrkey.IP4Of(netip.AddrFrom4([4]byte{10, 0, byte(step >> 8), byte(step)}))}
			x.set(k, v)
			want[k] = v
		}
		got, ok := x.get(k)
		wv, wok := want[k]
		require.Equal(t, wok, ok, "step %d: id %d", step, k)
		require.Equal(t, wv, got, "step %d: id %d", step, k)
	}
	require.Equal(t, len(want), x.len())
	all := map[uint16]revNATVal[addrkey.IP4]{}
	for k, v := range x.all {
		_, dup := all[k]
		require.False(t, dup, "id %d yielded twice", k)
		all[k] = v
	}
	require.Equal(t, want, all)
}
