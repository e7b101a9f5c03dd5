package table

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// The dense and the sparse backend sets hold the same entries: the least
// value of a repeated ID, unmapped addresses, IDs in order.
func TestBackendSetDenseAndSparse(t *testing.T) {
	r := testutil.Rand(t)
	for range 50 {
		var es []maps.BackendEntry
		want := map[uint32]maps.BackendValue{}
		for range r.IntN(200) {
			id := uint32(r.IntN(300))
			v := maps.BackendValue{Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(4))}), Port: uint16(r.IntN(3))}
			if r.IntN(2) == 0 {
				v.Address = netip.AddrFrom16(v.Address.As16()) // IPv4-mapped: unmapped by the set
			}
			es = append(es, maps.BackendEntry{ID: id, Value: v})
			v.Address = v.Address.Unmap()
			if cur, ok := want[id]; !ok || compareBackend(v, cur) < 0 {
				want[id] = v
			}
		}
		dense := newBackendSet(maps.EntriesOf(es), true)
		sparseIn := append(es, maps.BackendEntry{ID: 1 << 31, Value: maps.BackendValue{Address: netip.MustParseAddr("10.9.9.9")}})
		sparse := newBackendSet(maps.EntriesOf(sparseIn), true)
		require.NotNil(t, dense.vals)
		require.NotNil(t, sparse.m)
		sparse.drop(1 << 31)
		for _, s := range []*backendSet{&dense, &sparse} {
			ids := s.sortedIDs()
			require.Len(t, ids, len(want))
			require.IsIncreasing(t, ids)
			for _, id := range ids {
				v, ok := s.get(id)
				require.True(t, ok)
				require.Equal(t, want[id], v, "id %d", id)
			}
			if len(ids) > 0 {
				s.drop(ids[0])
				_, ok := s.get(ids[0])
				require.False(t, ok)
				require.Len(t, s.sortedIDs(), len(want)-1)
			}
			_, ok := s.get(1 << 30)
			require.False(t, ok)

			// Marks of either shape remember exactly the IDs marked.
			u := s.marks()
			marked := map[uint32]bool{}
			for _, id := range ids {
				if r.IntN(2) == 0 {
					u.mark(id)
					marked[id] = true
				}
			}
			for _, id := range append(ids, 1<<30, 0) {
				require.Equal(t, marked[id], u.has(id), "id %d", id)
			}
		}
	}
}
