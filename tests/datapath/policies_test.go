package datapath

import (
	"maps"
	"slices"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// Traffic policies through the engine: the socket LB serves connections
// from inside the node, so it uses a service's internal backend set. An
// internal Local policy sends them to the node-local backends only, and
// refuses them (EPERM) when there is none, with no fallback to the
// others; an external-only Local policy leaves them on every backend (the
// external set is the local one).
func TestTrafficPoliciesChooseTheBackends(t *testing.T) {
	inBothFamilies(t, func(t *testing.T, e *env) {
		bs := e.echoes(t, "p", 3, true, true)
		vip := e.vip()
		local := func(proto lb.L4Type, idx ...int) []lb.Backend {
			out := backends(bs, proto)
			for _, i := range idx {
				out[i].NodeLocal = true
			}
			return out
		}
		const n = 60
		tcp := func(port uint16) response {
			return e.ask(t, request{Op: "tcp", Addr: addr(vip, port), N: n})
		}

		// ClusterIP, internal Local: only the local backends.
		e.upsertSvc(t, &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 81, Protocol: lb.TCP}},
			IntTrafficPolicyLocal: true, Backends: local(lb.TCP, 0, 2)})
		r := tcp(81)
		require.Equal(t, n, r.OK, "errors: %v", r.Errors)
		require.ElementsMatch(t, []string{bs[0].name, bs[2].name}, slices.Collect(maps.Keys(r.Names)), "%v", r.Names)

		// No local backend: refused, although two backends serve.
		e.upsertSvc(t, &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 82, Protocol: lb.TCP}},
			IntTrafficPolicyLocal: true, Backends: local(lb.TCP)})
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 82), N: 5})
		require.Equal(t, 5, r.Failed, "a Local policy without local backend must refuse: %v", r.Names)
		require.Contains(t, r.Errors[0], "operation not permitted")
		r = e.ask(t, request{Op: "udp", Addr: addr(vip, 82), N: 3})
		require.Equal(t, 3, r.Failed, "UDP too: %v", r.Names)

		// LoadBalancer with an external Local policy: two sets; from the
		// node (internal) every backend.
		e.upsertSvc(t, &lb.Service{Type: lb.SVCTypeLoadBalancer, Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 83, Protocol: lb.TCP}},
			ExtTrafficPolicyLocal: true, Backends: local(lb.TCP, 1)})
		r = tcp(83)
		require.Equal(t, n, r.OK, "errors: %v", r.Errors)
		require.ElementsMatch(t, names(bs...), slices.Collect(maps.Keys(r.Names)), "internal set: every backend; %v", r.Names)

		// LoadBalancer with an internal Local policy: two sets; from the
		// node only the local one.
		e.upsertSvc(t, &lb.Service{Type: lb.SVCTypeLoadBalancer, Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 84, Protocol: lb.TCP}},
			IntTrafficPolicyLocal: true, Backends: local(lb.TCP, 1)})
		r = tcp(84)
		require.Equal(t, map[string]int{bs[1].name: n}, r.Names, "errors: %v", r.Errors)

		// Weights through the engine (lb_members): 1:3 over real connects.
		ws := backends(bs[:2], lb.TCP)
		ws[0].Weight, ws[1].Weight = 1, 3
		e.upsertSvc(t, &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 85, Protocol: lb.TCP}}, Backends: ws})
		const m = 2000
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 85), N: m})
		require.Equal(t, m, r.OK, "errors: %v", r.Errors)
		x := chiSquareExpected(r.Names, names(bs[:2]...), []float64{0.25, 0.75})
		t.Logf("weights 1:3 from the engine, %d connects: %v, χ² = %.2f (bound %.2f)", m, r.Names, x, chiSquareBound1)
		require.Less(t, x, chiSquareBound1, "spread %v is not 25/75", r.Names)

		// Every option survives a restart of the engine.
		e.restartEngine(t)
		r = tcp(84)
		require.Equal(t, map[string]int{bs[1].name: n}, r.Names, "after the restart; errors: %v", r.Errors)
		r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 82), N: 3})
		require.Equal(t, 3, r.Failed, "after the restart: %v", r.Names)
	})
}
