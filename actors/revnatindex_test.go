package actors

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/addrkey"
	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/stretchr/testify/require"
)

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
