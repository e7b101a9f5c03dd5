package pagedindex

import (
	"math/bits"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The paged index behaves exactly as a Go map through runs of IDs written
// at once (as the allocator hands them out), random writes and deletes
// that thin pages out, and rewrites; pages and loose entries keep their
// rules: a page holds at least demoteBelow entries, a range without a page
// fewer than promoteAt loose ones.
func TestPagedIndexMatchesAMap(t *testing.T) {
	for _, mode := range []struct {
		name string
		make func(int) *Index[uint32, uint64]
	}{{"counted", New[uint32, uint64]}, {"sparse", NewSparse[uint32, uint64]}} {
		t.Run(mode.name, func(t *testing.T) { testPagedIndexMatchesAMap(t, mode.make) })
	}
}

func testPagedIndexMatchesAMap(t *testing.T, make func(int) *Index[uint32, uint64]) {
	r := testutil.Rand(t)
	x, want := make(0), map[uint32]uint64{}
	const span = 1024 // 16 pages
	var pagesSeen, looseSeen, prepared int
	check := func(step int) {
		t.Helper()
		require.Equal(t, len(want), x.Len(), "step %d", step)
		for no, p := range x.pages {
			require.GreaterOrEqual(t, bits.OnesCount64(p.used), demoteBelow, "step %d: page %d", step, no)
			require.Zero(t, x.looseIn[no], "step %d: page %d has loose entries", step, no)
		}
		inRange := map[uint32]int{}
		for k := range x.loose {
			inRange[k>>pageShift]++
		}
		if x.recent != nil { // sparse: no count per range; a recent count is a floor
			require.Nil(t, x.looseIn, "step %d", step)
			for _, rr := range x.recent {
				if rr.ok {
					require.LessOrEqual(t, int(rr.c), inRange[rr.no], "step %d: range %d's recent count", step, rr.no)
				}
			}
		} else {
			for no, c := range inRange {
				require.Less(t, c, promoteAt, "step %d: range %d", step, no)
				require.Equal(t, c, int(x.looseIn[no]), "step %d: range %d counted", step, no)
			}
			require.Len(t, x.looseIn, len(inRange), "step %d", step)
		}
		pagesSeen += len(x.pages)
		looseSeen += len(x.loose)
	}
	for step := range 400 {
		switch r.IntN(4) {
		case 0: // a run, as a batch of new backends (a mirror prepares for it, or not)
			from := uint32(r.IntN(span))
			var run []uint32
			for k := from; k < min(span, from+uint32(r.IntN(200))); k++ {
				run = append(run, k)
				if r.IntN(8) == 0 {
					run = append(run, k) // a key written twice
				}
			}
			if r.IntN(2) == 0 {
				before := len(x.pages)
				x.Prepare(len(run), func(i int) uint32 { return run[i] })
				prepared += len(x.pages) - before
			}
			for _, k := range run {
				v := r.Uint64()
				x.Set(k, v)
				want[k] = v
			}
		case 1: // deletes that thin pages out
			for range r.IntN(150) {
				k := uint32(r.IntN(span))
				x.Delete(k)
				delete(want, k)
			}
		default: // single writes and deletes
			for range r.IntN(40) {
				k := uint32(r.IntN(span))
				if r.IntN(2) == 0 {
					v := r.Uint64()
					x.Set(k, v)
					want[k] = v
				} else {
					x.Delete(k)
					delete(want, k)
				}
			}
		}
		for k := range uint32(span) {
			got, ok := x.Get(k)
			w, wok := want[k]
			require.Equal(t, wok, ok, "step %d: id %d", step, k)
			require.Equal(t, w, got, "step %d: id %d", step, k)
		}
		check(step)
	}
	all := map[uint32]uint64{}
	for k, v := range x.All {
		all[k] = v
	}
	require.Equal(t, want, all)
	require.NotZero(t, pagesSeen, "runs were held in pages")
	require.NotZero(t, prepared, "prepare gave ranges their pages")
	require.NotZero(t, looseSeen, "stragglers were held loose")
}

// A run of IDs takes a value's size per ID once its range is a page; IDs
// left far apart are held loose, not in pages of holes.
func TestPagedIndexPagesRunsAndKeepsStragglersLoose(t *testing.T) {
	x := New[uint32, uint64](0)
	for k := range uint32(10 * pageSize) {
		x.Set(k, uint64(k))
	}
	require.Len(t, x.pages, 10)
	require.Empty(t, x.loose)
	for k := range uint32(10 * pageSize) {
		if k%pageSize != 0 { // one survivor a page
			x.Delete(k)
		}
	}
	require.Empty(t, x.pages, "pages of one entry go")
	require.Len(t, x.loose, 10)
	for k := range uint32(10 * pageSize) {
		v, ok := x.Get(k)
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
	x := New[uint32, uint64](0)
	for k := range uint32(pageSize) {
		x.Set(k, uint64(k)+1)
	}
	first := x.pages[0]
	require.NotNil(t, first)
	for k := range uint32(pageSize) {
		x.Delete(k)
	}
	require.Empty(t, x.pages)
	require.Same(t, first, x.spare)
	require.Equal(t, valPage[uint64]{}, *x.spare, "the kept page is empty")
	for k := range uint32(promoteAt) {
		x.Set(5*pageSize+k, 7)
	}
	require.Same(t, first, x.pages[5], "the next range's page is the kept one")
	require.Nil(t, x.spare)
	for k := range uint32(pageSize) {
		v, ok := x.Get(5*pageSize + k)
		require.Equal(t, k < promoteAt, ok, "id %d", k)
		if ok {
			require.Equal(t, uint64(7), v)
		}
	}
	require.Equal(t, promoteAt, x.Len())
}

// prepare gives a range its page before a run's sets only when the range
// will hold promoteAt entries once they are set, counting each slot once
// and the loose entries the range has (those the run sets again among
// them once); the page takes the loose entries.
func TestPagedIndexPreparesAPageForARunThatFillsIt(t *testing.T) {
	x := New[uint32, uint64](0)
	prepare := func(keys ...uint32) { x.Prepare(len(keys), func(i int) uint32 { return keys[i] }) }
	set := func(keys ...uint32) {
		for _, k := range keys {
			x.Set(k, uint64(k)*10)
		}
	}
	span := func(from, to uint32) []uint32 {
		var ks []uint32
		for k := from; k < to; k++ {
			ks = append(ks, k)
		}
		return ks
	}

	prepare(span(0, promoteAt)...) // a fresh range, filled
	require.Len(t, x.pages, 1)
	set(span(0, promoteAt)...)
	require.Empty(t, x.loose, "the run went straight to its page")

	prepare(64, 65, 66) // too few for a page
	require.Len(t, x.pages, 1)
	set(64, 65, 66)
	require.Len(t, x.loose, 3)

	dup := make([]uint32, 2*promoteAt) // one slot, many times
	for i := range dup {
		dup[i] = 200
	}
	prepare(dup...)
	require.Len(t, x.pages, 1, "a slot set again counts once")

	set(span(128, 128+10)...)  // ten loose entries
	prepare(span(130, 136)...) // six of them again: still ten
	require.Len(t, x.pages, 1, "slots held loose already count once")
	prepare(span(136, 136+promoteAt-8)...) // two again, promoteAt-10 new: promoteAt
	require.Len(t, x.pages, 2)
	require.Zero(t, x.looseIn[2], "the range's loose entries moved to its page")
	set(span(136, 136+promoteAt-8)...)
	for k := uint32(128); k < 136+promoteAt-8; k++ {
		v, ok := x.Get(k)
		require.True(t, ok, "id %d", k)
		require.Equal(t, uint64(k)*10, v)
	}
	require.Equal(t, promoteAt+3+promoteAt, x.Len())
}

// A cluster's pods get their addresses from each node's range in order,
// and a batch's services take pods of many nodes each: a sparse index is
// set runs of many ranges interleaved. The ranges that get promoteAt
// entries must still get their pages (the recent table holds them all),
// not stay loose for want of a slot.
func TestPagedIndexSparsePagesRunsOfManyRangesSetInterleaved(t *testing.T) {
	const ranges = 200 // nodes filling their ranges together
	x := NewSparse[uint64, uint32](0)
	for j := range promoteAt + 4 {
		for r := range uint64(ranges) {
			x.Set((1000+r*7)<<pageShift|uint64(j), uint32(j))
		}
	}
	if paged := len(x.pages); paged < ranges*98/100 {
		t.Fatalf("%d of %d ranges set %d times each got a page", paged, ranges, promoteAt+4)
	}
	require.Equal(t, ranges*(promoteAt+4), x.Len())
}
