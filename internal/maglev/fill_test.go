package maglev

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// walkFill is Maglev's fill as the paper writes it (an array of booleans,
// every position computed modulo M): the reference fill must match.
func walkFill(t []lb.BackendID, order []slot) {
	m := uint32(len(t))
	var maxW uint32
	for i := range order {
		maxW = max(maxW, order[i].weight)
	}
	taken := make([]bool, m)
	for left := m; ; {
		for i := range order {
			s := &order[i]
			s.credit += s.weight
			if s.credit < maxW {
				continue
			}
			s.credit -= maxW
			p := s.pos
			for taken[p] {
				p = (p + s.skip) % m
			}
			taken[p] = true
			t[p] = s.id
			s.pos = (p + s.skip) % m
			if left--; left == 0 {
				return
			}
		}
	}
}

// The table is entry for entry the paper's, with the weighted turns: table
// sizes from the smallest to the largest, one backend to thousands,
// weights from 0 to 65535 and seeds drawn at random (TEST_SEED).
func TestFillEqualsTheWalkOfThePermutations(t *testing.T) {
	r := testutil.Rand(t)
	sizes := []uint32{MinTableSize, 1021, 4093, DefaultTableSize, 65521, MaxTableSize}
	for c := range 60 {
		m := sizes[c%len(sizes)]
		n := 1 + r.IntN(12)
		if c%4 == 3 {
			n = 1 + r.IntN(3000)
		}
		bs := backends(n, lb.BackendID(1+r.IntN(1000)))
		for i := range bs {
			switch r.IntN(6) {
			case 0:
				bs[i].Weight = 0
			case 1:
				bs[i].Weight = uint16(r.IntN(65536))
			default:
				bs[i].Weight = uint16(1 + r.IntN(300))
			}
		}
		seed := r.Uint64()
		var b Builder
		got, err := b.Build(m, seed, bs, nil)
		require.NoError(t, err)
		order, err := (&Builder{}).slots(m, seed, bs)
		require.NoError(t, err)
		want := make([]lb.BackendID, m)
		if len(order) > 0 {
			walkFill(want, order)
		}
		require.Equal(t, want, got, "M=%d, %d backends, seed %#x", m, n, seed)
	}
}
