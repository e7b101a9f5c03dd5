package benchset

import (
	"math/rand/v2"
	"net/netip"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// Sequential returns n services of k IPv4 backends each (TCP, frontend
// port 80, backend port 8080): frontend i is 10.96.0.0 + i, and the
// backends of all services are consecutive addresses from 10.1.0.0, each
// address used once.
func Sequential(n, k int) []*lb.Service {
	svcs := make([]*lb.Service, n)
	for i := range svcs {
		s := newService(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}))
		for j := range k {
			x := i*k + j
			s.Backends = append(s.Backends, backend(netip.AddrFrom4([4]byte{10, byte(1 + x>>16), byte(x >> 8), byte(x)})))
		}
		svcs[i] = s
	}
	return svcs
}

// Nodes is how many nodes Spread spreads the pods over.
const Nodes = 200

// Spread returns n services (n at most 65,536) of k IPv4 backends each
// (k at most Nodes), as a cluster's addresses are laid out: frontends
// drawn without repeats from 10.96.0.0/16, and each service's backends
// pods on k of Nodes nodes chosen at random, node j's pods numbered in
// order from 10.1.j.0 (pod p is 10.(1+p/256).j.(p%256)), each address
// used once. The same arguments give the same services.
func Spread(n, k int) []*lb.Service {
	r := rand.New(rand.NewPCG(1, 2))
	next := make([]int, Nodes) // each node's next pod
	fes := r.Perm(1 << 16)
	svcs := make([]*lb.Service, n)
	for i := range svcs {
		fe := fes[i]
		s := newService(netip.AddrFrom4([4]byte{10, 96, byte(fe >> 8), byte(fe)}))
		for _, node := range r.Perm(Nodes)[:k] {
			pod := next[node]
			next[node]++
			s.Backends = append(s.Backends, backend(netip.AddrFrom4([4]byte{10, byte(1 + pod>>8), byte(node), byte(pod)})))
		}
		svcs[i] = s
	}
	return svcs
}

// newService returns a service of frontend fe:80/TCP and no backends yet
// (appended one by one, as the benchmarks always made them: the harness's
// own heap, which its collector scans, stays as it was).
func newService(fe netip.Addr) *lb.Service {
	return &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: fe, Port: 80, Protocol: lb.TCP}}}
}

func backend(a netip.Addr) lb.Backend {
	return lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: a, Port: 8080, Protocol: lb.TCP}, Weight: lb.DefaultBackendWeight}
}
