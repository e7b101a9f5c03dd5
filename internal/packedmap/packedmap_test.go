package packedmap

import (
	"maps"
	"strconv"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

// evenKeys packs the keys "k<n>" of even n into n.
type evenKeys struct{}

func (evenKeys) Pack(k string) (uint64, bool) {
	n, err := strconv.Atoi(k[1:])
	return uint64(n), err == nil && n%2 == 0
}

func (evenKeys) Unpack(p uint64) string { return "k" + strconv.Itoa(int(p)) }

// learnKeys packs the even keys, and the odd ones it learnt: up to max of
// them, first come first served.
type learnKeys struct {
	evenKeys
	learnt map[int]bool
	max    int
}

func (l *learnKeys) Pack(k string) (uint64, bool) {
	if p, ok := l.evenKeys.Pack(k); ok {
		return p, true
	}
	n, err := strconv.Atoi(k[1:])
	return uint64(n), err == nil && l.learnt[n]
}

func (l *learnKeys) Learn(k string) (uint64, bool) {
	if p, ok := l.Pack(k); ok {
		return p, true
	}
	n, err := strconv.Atoi(k[1:])
	if err != nil || len(l.learnt) >= l.max {
		return 0, false
	}
	l.learnt[n] = true
	return uint64(n), true
}

// A Map, with or without a packer, one that learns included, behaves
// exactly as a plain map.
func TestMatchesPlainMap(t *testing.T) {
	r := testutil.Rand(t)
	for _, pk := range []Packer[string]{nil, evenKeys{}, &learnKeys{learnt: map[int]bool{}, max: 6}} {
		m, want := New[string, int](0, pk), map[string]int{}
		for step := range 5000 {
			k := "k" + strconv.Itoa(r.IntN(40))
			switch r.IntN(4) {
			case 3:
				// Reserve changes nothing that Get, Len and All answer:
				// on an empty map it only makes room.
				m.Reserve(r.IntN(100))
			case 0:
				m.Set(k, step)
				want[k] = step
			case 1:
				m.Delete(k)
				delete(want, k)
			}
			v, ok := m.Get(k)
			w, wok := want[k]
			require.Equal(t, wok, ok, "step %d", step)
			require.Equal(t, w, v, "step %d", step)
			require.Equal(t, len(want), m.Len())
		}
		got := map[string]int{}
		for k, v := range m.All {
			_, dup := got[k]
			require.False(t, dup, "All yields %s twice", k)
			got[k] = v
		}
		require.True(t, maps.Equal(want, got))
		if pk != nil {
			require.NotEmpty(t, m.small, "packed keys are kept packed")
			require.NotEmpty(t, m.full)
		}
	}
}

// All stops when its consumer does, in either of its two maps.
func TestAllStops(t *testing.T) {
	m := New[string, int](0, evenKeys{})
	for i := range 10 {
		m.Set("k"+strconv.Itoa(i), i)
	}
	for stop := 1; stop <= 10; stop++ {
		n := 0
		for range m.All {
			n++
			if n == stop {
				break
			}
		}
		require.Equal(t, stop, n)
	}
}

// A map adopted from packed keys is the map Set would have made of them,
// and goes on as one.
func TestAdoptedMapIsTheOneSetMakes(t *testing.T) {
	set := New[string, int](0, evenKeys{})
	small := map[uint64]int{}
	for i := 0; i < 20; i += 2 {
		set.Set("k"+strconv.Itoa(i), i)
		small[uint64(i)] = i
	}
	adopted := Adopt(small, Packer[string](evenKeys{}))
	require.Equal(t, maps.Collect(set.All), maps.Collect(adopted.All))
	for _, m := range []*Map[string, int]{&set, &adopted} {
		m.Set("k3", 3) // kept whole
		m.Delete("k4")
	}
	require.Equal(t, maps.Collect(set.All), maps.Collect(adopted.All))
	require.Equal(t, 10, adopted.Len())
}
