package benchset

import (
	"net/netip"
	"reflect"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
)

// checkSet fails t unless svcs are n valid services of k backends each,
// no frontend and no backend address used twice.
func checkSet(t *testing.T, svcs []*lb.Service, n, k int) {
	t.Helper()
	if len(svcs) != n {
		t.Fatalf("got %d services, want %d", len(svcs), n)
	}
	fes, bes := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for i, s := range svcs {
		if err := s.Validate(); err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if len(s.Backends) != k {
			t.Fatalf("service %d has %d backends, want %d", i, len(s.Backends), k)
		}
		if fes[s.Frontend.Addr] {
			t.Fatalf("frontend %v used twice", s.Frontend.Addr)
		}
		fes[s.Frontend.Addr] = true
		for _, b := range s.Backends {
			if bes[b.Addr] {
				t.Fatalf("backend %v used twice", b.Addr)
			}
			bes[b.Addr] = true
		}
	}
}

func TestSequentialGivesEachServiceOneRunOfBackends(t *testing.T) {
	svcs := Sequential(300, 10)
	checkSet(t, svcs, 300, 10)
	prev := netip.MustParseAddr("10.0.255.255")
	for i, s := range svcs {
		if want := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}); s.Frontend.Addr != want {
			t.Fatalf("frontend %d is %v, want %v", i, s.Frontend.Addr, want)
		}
		for _, b := range s.Backends {
			if b.Addr != prev.Next() {
				t.Fatalf("service %d: backend %v does not follow %v", i, b.Addr, prev)
			}
			prev = b.Addr
		}
	}
}

func TestSpreadPutsEachServicesBackendsOnDistinctNodesInPodOrder(t *testing.T) {
	const n, k = 2000, 10
	svcs := Spread(n, k)
	checkSet(t, svcs, n, k)
	next := make([]int, Nodes) // each node's next pod, as the backends name them
	sequentialFrontends := 0
	for i, s := range svcs {
		f := s.Frontend.Addr.As4()
		if f[0] != 10 || f[1] != 96 {
			t.Fatalf("frontend %v outside 10.96.0.0/16", s.Frontend.Addr)
		}
		if i > 0 && svcs[i-1].Frontend.Addr.Next() == s.Frontend.Addr {
			sequentialFrontends++
		}
		nodes := map[int]bool{}
		for _, b := range s.Backends {
			a := b.Addr.As4()
			node, pod := int(a[2]), int(a[1]-1)<<8|int(a[3])
			if a[0] != 10 || node >= Nodes {
				t.Fatalf("service %d: backend %v is on no node", i, b.Addr)
			}
			if nodes[node] {
				t.Fatalf("service %d has two backends on node %d", i, node)
			}
			nodes[node] = true
			if pod != next[node] {
				t.Fatalf("service %d: node %d's pod %d comes before its pod %d", i, node, pod, next[node])
			}
			next[node]++
		}
	}
	if sequentialFrontends > n/100 {
		t.Fatalf("%d of %d frontends follow the one before: not spread", sequentialFrontends, n)
	}
	used := 0
	for _, c := range next {
		if c > 0 {
			used++
		}
	}
	if used < Nodes*9/10 {
		t.Fatalf("pods on %d of %d nodes: not spread", used, Nodes)
	}
}

func TestSpreadIsTheSameForTheSameArguments(t *testing.T) {
	if a, b := Spread(50, 5), Spread(50, 5); !reflect.DeepEqual(a, b) {
		t.Fatal("two calls with the same arguments gave different services")
	}
}
