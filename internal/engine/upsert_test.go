package engine

import (
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/internal/table"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// oldBackends finds an old service's backends by key, each once, whether
// it scans them (up to oldBackendsScanMax) or indexes them in a map: both
// answer as a map from key to ID whose entries go when found.
func TestOldBackendsFindEachBackendOnceByScanOrMap(t *testing.T) {
	r := testutil.Rand(t)
	backend := func(x int) lb.Backend {
		return lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.AddrFrom4([4]byte{10, 1, byte(x >> 8), byte(x)}), Port: 8080, Protocol: lb.TCP}}
	}
	for _, n := range []int{1, 2, 10, oldBackendsScanMax - 1, oldBackendsScanMax, oldBackendsScanMax + 1, 200} {
		for range 20 {
			svc := &table.Service{}
			model := map[lb.L3n4Addr]lb.BackendID{}
			for _, x := range r.Perm(3 * n)[:n] { // distinct keys
				id := lb.BackendID(1 + r.IntN(1<<20))
				svc.Spec.Backends = append(svc.Spec.Backends, backend(x))
				svc.BackendIDs = append(svc.BackendIDs, id)
				model[table.BackendKey(backend(x))] = id
			}
			o := newOldBackends(svc)
			require.Equal(t, n > oldBackendsScanMax, o.m != nil, "%d backends: a map only past the scan's bound", n)
			for range 2 * n { // keys old and new, some asked twice
				k := table.BackendKey(backend(r.IntN(3 * n)))
				i, ok := o.take(k)
				want, wok := model[k]
				require.Equal(t, wok, ok, "take %s", k)
				if ok {
					require.Equal(t, want, svc.BackendIDs[i], "take %s", k)
					require.Equal(t, k, table.BackendKey(svc.Spec.Backends[i]), "take %s", k)
				}
				delete(model, k)
			}
			for i, b := range svc.Spec.Backends {
				_, left := model[table.BackendKey(b)]
				require.Equal(t, !left, o.taken(i), "backend %d of %d", i, n)
			}
		}
	}
	var none oldBackends // a new service: nothing to find
	_, ok := none.take(table.BackendKey(backend(1)))
	require.False(t, ok)
}
