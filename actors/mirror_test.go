package actors

import (
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// checkForm checks the mirror values of one address form: every address
// in back comes back exactly; every address in other holds nothing the
// map could hold (it never equals the value of any address in back).
func checkForm[A ipForm](t *testing.T, of func(netip.Addr) A, back, other []netip.Addr) {
	t.Helper()
	held := map[backendVal[A]]bool{}
	for _, a := range back {
		be := maps.BackendEntry{ID: 7, Value: maps.BackendValue{Address: a, Port: 8080, Proto: 6, State: 2, ClusterID: 3, Zone: 4}}
		k, v := splitBackend(of)(be)
		require.Equal(t, be, joinBackend(k, v), "%s", a)
		rn := maps.RevNATEntry{ID: 9, Value: maps.RevNATValue{Address: a, Port: 80}}
		k2, v2 := splitRevNAT(of)(rn)
		require.Equal(t, rn, joinRevNAT(k2, v2), "%s", a)
		_, zero := splitBackend(of)(maps.BackendEntry{Value: maps.BackendValue{Address: a}})
		held[zero] = true
	}
	for _, a := range other {
		_, v := splitBackend(of)(maps.BackendEntry{Value: maps.BackendValue{Address: a}})
		require.False(t, held[v], "%s", a)
	}
}

// The compact mirror values give back exactly what went in: any address
// in the full form, any IPv4 address in the IPv4 maps' form (where the
// other addresses never look like one the map holds).
func TestCompactValuesRoundTrip(t *testing.T) {
	v4 := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("255.255.255.255")}
	v6 := []netip.Addr{{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::")}
	checkForm(t, addrkey.IPOf, append(v4, v6...), nil)
	checkForm(t, addrkey.IP4Of, v4, []netip.Addr{{}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::")})

	// In the full form IPv4 and IPv4-mapped addresses stay different; in
	// the IPv4 form they are one (the IPv4 map holds 4 bytes).
	_, a := splitBackend(addrkey.IPOf)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.0.1")}})
	_, b := splitBackend(addrkey.IPOf)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")}})
	require.NotEqual(t, a, b)
	_, a4 := splitBackend(addrkey.IP4Of)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("10.0.0.1")}})
	_, b4 := splitBackend(addrkey.IP4Of)(maps.BackendEntry{Value: maps.BackendValue{Address: netip.MustParseAddr("::ffff:10.0.0.1")}})
	require.Equal(t, a4, b4)

	// The sizes the memory figures rely on.
	require.Equal(t, uintptr(24), unsafe.Sizeof(backendVal[addrkey.IP]{}))
	require.Equal(t, uintptr(12), unsafe.Sizeof(backendVal[addrkey.IP4]{}))
	require.Equal(t, uintptr(8), unsafe.Sizeof(revNATVal[addrkey.IP4]{}))
}

// changedOnly keeps the writes that change something, in order; when all
// do it hands back the caller's slice itself (nothing allocated), and
// otherwise copies into the scratch buffer or one buffer of the size
// needed, never writing to the caller's slice. scratch keeps only a
// buffer changedOnly wrote to.
func TestChangedOnlyCopiesOnlyWhenAWriteIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writes  []int
		same    map[int]bool // writes that change nothing
		want    []int
		copied  bool
		scratch []int
	}{
		{name: "all change", writes: []int{1, 2, 3}, want: []int{1, 2, 3}},
		{name: "none", writes: nil, want: nil},
		{name: "first unchanged", writes: []int{1, 2, 3}, same: map[int]bool{1: true}, want: []int{2, 3}, copied: true},
		{name: "last unchanged", writes: []int{1, 2, 3}, same: map[int]bool{3: true}, want: []int{1, 2}, copied: true},
		{name: "none change", writes: []int{1, 2}, same: map[int]bool{1: true, 2: true}, want: []int{}, copied: true},
		{name: "into scratch", writes: []int{1, 2, 3, 4}, same: map[int]bool{2: true}, want: []int{1, 3, 4}, copied: true, scratch: make([]int, 0, 8)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := append([]int(nil), tc.writes...)
			var calls []int
			got, copied := changedOnly(tc.writes, tc.scratch, func(w int) bool { calls = append(calls, w); return !tc.same[w] })
			require.Equal(t, tc.writes, calls, "changed is called once per write, in order")
			require.Equal(t, tc.copied, copied)
			require.Equal(t, len(tc.want), len(got))
			if len(tc.want) > 0 {
				require.Equal(t, tc.want, got)
			}
			require.Equal(t, orig, tc.writes, "the caller's writes are untouched")
			if !copied && len(got) > 0 {
				require.Same(t, &tc.writes[0], &got[0], "all changed: the caller's slice, not a copy")
			}
			if tc.scratch != nil {
				require.Same(t, unsafe.SliceData(tc.scratch[:1]), unsafe.SliceData(got[:1]), "copied into the scratch buffer")
			}
			prev := []int{9}[:0]
			ws, _ := scratch(prev, got, copied, []int(nil))
			if copied {
				require.Equal(t, unsafe.SliceData(got[:cap(got)]), unsafe.SliceData(ws[:cap(ws)]), "the buffer written to is kept")
			} else {
				require.Equal(t, unsafe.SliceData(prev[:1]), unsafe.SliceData(ws[:1]), "the caller's writes are not kept as scratch")
			}
			require.Empty(t, ws)
		})
	}
	big := make([]int, scratchMax+1)
	ws, ds := scratch(nil, big, true, make([]int, 0, scratchMax+1))
	require.Nil(t, ws, "a buffer past scratchMax is dropped")
	require.Nil(t, ds, "a buffer past scratchMax is dropped")
}

// discardBackends is a backend map whose writes and deletes do nothing:
// a benchmark of the mirror times the mirror alone.
type discardBackends struct{ maps.BackendMap }

func (discardBackends) Update([]maps.BackendEntry) error { return nil }
func (discardBackends) Delete([]uint32) error            { return nil }

// The IPv4 backend mirror's own work per backend as requests of new
// backends come, their IDs in runs as the allocator hands them out
// (1,000 a request, as a batch of 100 ten-backend services sends them),
// into an empty mirror, then the same requests again (unchanged) and
// their deletes. Compare runs with benchstat.
func BenchmarkBackendMirrorApply(b *testing.B) {
	const n, per = 100_000, 1_000
	reqs := make([][]maps.BackendEntry, 0, n/per)
	dels := make([][]uint32, 0, n/per)
	for i := range n {
		if i%per == 0 {
			reqs, dels = append(reqs, nil), append(dels, nil)
		}
		id := uint32(i + 1)
		reqs[len(reqs)-1] = append(reqs[len(reqs)-1], maps.BackendEntry{ID: id, Value: maps.BackendValue{
			Address: netip.AddrFrom4([4]byte{10, byte(1 + i>>16), byte(i >> 8), byte(i)}), Port: 8080, Proto: 6,
		}})
		dels[len(dels)-1] = append(dels[len(dels)-1], id)
	}
	m := discardBackends{openMemory(b, nil).Backends(maps.IPv4)}
	benchMirrorPhases(b, "", func() benchedMirror[maps.BackendEntry, uint32] {
		return newMirrorIndexed(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4], newBackend4Index)
	}, reqs, dels, n, "ns/backend")
}

// benchedMirror is what a mirror benchmark drives: mirror and svcMirror.
type benchedMirror[E, K any] interface {
	load() error
	apply(writes []E, deletes []K) (written, deleted int, err error)
}

// benchMirrorPhases times a fresh mirror (fresh) taking requests reqs
// (new), the same requests again once it holds them (unchanged), and
// their deletes dels, in sub-benchmarks prefix+phase, reporting the time
// per unit (n of them).
func benchMirrorPhases[E, K any](b *testing.B, prefix string, fresh func() benchedMirror[E, K], reqs [][]E, dels [][]K, n int, unit string) {
	b.Helper()
	for _, phase := range []string{"new", "unchanged", "delete"} {
		b.Run(prefix+phase, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				o := fresh()
				require.NoError(b, o.load())
				if phase != "new" {
					for _, r := range reqs {
						_, _, err := o.apply(r, nil)
						require.NoError(b, err)
					}
				}
				b.StartTimer()
				for i, r := range reqs {
					var err error
					if phase == "delete" {
						_, _, err = o.apply(nil, dels[i])
					} else {
						_, _, err = o.apply(r, nil)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), unit)
		})
	}
}

// A mirror keeps the scratch of a batch of nearly scratchMax writes for
// the next: grown by appends, its split of the writes passed scratchMax
// (3,584 to 5,120 entries) on a batch of 4,000 and was dropped, so every
// such batch (a flush of four bulk requests of 1,000 backends) grew it
// again through every size. A batch that changes nothing does not make
// room for its writes, however large.
func TestMirrorReusesItsScratchForBatchesNearScratchMax(t *testing.T) {
	m := discardBackends{openMemory(t, nil).Backends(maps.IPv4)}
	o := newMirrorIndexed(maps.Map[maps.BackendEntry, uint32](m), splitBackend(addrkey.IP4Of), joinBackend[addrkey.IP4], newBackend4Index)
	require.NoError(t, o.load())
	batch := func(n int, port uint16) []maps.BackendEntry {
		es := make([]maps.BackendEntry, n)
		for i := range es {
			es[i] = maps.BackendEntry{ID: uint32(i + 1), Value: maps.BackendValue{
				Address: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Port: port, Proto: 6,
			}}
		}
		return es
	}
	const n = scratchMax - 96
	a, b := batch(n, 8080), batch(n, 8081)
	w, _, err := o.apply(a, nil)
	require.NoError(t, err)
	require.Equal(t, n, w)
	require.GreaterOrEqual(t, cap(o.kvs), n, "the split of %d writes is kept for the next batch", n)
	kept := unsafe.SliceData(o.kvs[:1])
	w, _, err = o.apply(b, nil) // every entry changes
	require.NoError(t, err)
	require.Equal(t, n, w)
	require.Equal(t, kept, unsafe.SliceData(o.kvs[:1]), "the next batch splits its writes in the kept array")
	got := o.dump().Slice()
	slices.SortFunc(got, func(x, y maps.BackendEntry) int { return int(x.ID) - int(y.ID) })
	require.Equal(t, b, got, "the last batch applied is what the mirror holds")

	big := batch(3*scratchMax, 8080)
	_, _, err = o.apply(big, nil)
	require.NoError(t, err)
	require.Nil(t, o.kvs, "a split past scratchMax is not kept")
	w, _, err = o.apply(big[:n], nil)
	require.NoError(t, err)
	require.Zero(t, w, "nothing changed")
	require.Nil(t, o.kvs, "a batch that changes nothing makes no room to split its writes")
}
