package table

import (
	"fmt"
	"testing"

	"github.com/actorlb/actorlb/internal/maglev"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// MaglevBackends: what a service's Maglev table is built from, case by
// case: the backends the master counts at the first scope, with IDs and
// weights; nil when the table should not exist.
func TestMaglevBackends(t *testing.T) {
	be := func(addr string, st lb.BackendState, w uint16, local bool) lb.Backend {
		b, err := lb.ParseBackend(addr)
		require.NoError(t, err)
		b.State, b.Weight, b.NodeLocal = st, w, local
		return b
	}
	a := be("10.0.1.1:80", lb.BackendStateActive, 100, false)
	b := be("10.0.1.2:80", lb.BackendStateActive, 300, true)
	term := be("10.0.1.3:80", lb.BackendStateTerminating, 100, false)
	quar := be("10.0.1.4:80", lb.BackendStateQuarantined, 100, false)
	maint := be("10.0.1.5:80", lb.BackendStateMaintenance, 100, false)
	zero := be("10.0.1.6:80", lb.BackendStateActive, 0, false)
	for _, tc := range []struct {
		name string
		alg  lb.LBAlgorithm
		ext  bool // external traffic policy Local
		bs   []lb.Backend
		want string
	}{
		{"not maglev", lb.LBAlgRandom, false, []lb.Backend{a, b}, "none"},
		{"default algorithm", lb.LBAlgDefault, false, []lb.Backend{a, b}, "none"},
		{"active ones, weighted", lb.LBAlgMaglev, false, []lb.Backend{term, b, quar, a, maint}, "[10.0.1.1:80/TCP#1*100 10.0.1.2:80/TCP#2*300]"},
		{"terminating when none is active", lb.LBAlgMaglev, false, []lb.Backend{quar, term, maint}, "[10.0.1.3:80/TCP#1*100]"},
		{"only quarantined", lb.LBAlgMaglev, false, []lb.Backend{quar, maint}, "none"},
		{"no backend", lb.LBAlgMaglev, false, nil, "none"},
		{"weight 0 only", lb.LBAlgMaglev, false, []lb.Backend{zero}, "none"},
		{"weight 0 kept beside others (it gets no entry)", lb.LBAlgMaglev, false, []lb.Backend{a, zero}, "[10.0.1.1:80/TCP#1*100 10.0.1.6:80/TCP#2*0]"},
		{"external Local: the node-local set", lb.LBAlgMaglev, true, []lb.Backend{a, b}, "[10.0.1.2:80/TCP#2*300]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe, err := lb.ParseL3n4Addr("10.96.0.1:80")
			require.NoError(t, err)
			svc := &Service{Spec: lb.Service{Frontend: lb.Frontend{L3n4Addr: fe, ID: 9}, Type: lb.SVCTypeLoadBalancer, LBAlgorithm: tc.alg, ExtTrafficPolicyLocal: tc.ext}}
			svc.Spec.Backends = append(svc.Spec.Backends, tc.bs...)
			SlotOrder(svc.Spec.Backends, nil)
			for i := range svc.Spec.Backends {
				svc.BackendIDs = append(svc.BackendIDs, lb.BackendID(i+1))
			}
			got := "none"
			if in := MaglevBackends(svc); in != nil {
				got = fmt.Sprint(listOf(in))
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func listOf(in []maglev.Backend) []string {
	var out []string
	for _, b := range in {
		out = append(out, fmt.Sprintf("%s#%d*%d", b.Addr, b.ID, b.Weight))
	}
	return out
}
