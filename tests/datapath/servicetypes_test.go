package datapath

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/actorlb/actorlb/bpf"
	lb "github.com/actorlb/actorlb/loadbalancer"
	lbmaps "github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// npFamily is what a NodePort scenario needs of one IP family, inside the
// test's network namespace.
type npFamily struct {
	name string
	// loop is the loopback address a NodePort frontend is given; loopOther
	// is a loopback address without a frontend of its own (IPv6 has only
	// ::1: then it is loop itself, at ports where loop has no frontend).
	loop, loopOther netip.Addr
	// nodeIn is a node address given to bpf.SetNodeAddresses; nodeOut is
	// an address of the namespace that is not (until the test adds it).
	nodeIn, nodeOut netip.Addr
	prefix          int
	unspec          netip.Addr
	backends        []netip.Addr
}

func (e *env) npFamilies() []npFamily {
	return []npFamily{{
		name: "IPv4", loop: netip.MustParseAddr("127.0.0.1"), loopOther: netip.MustParseAddr("127.0.0.5"),
		nodeIn: netip.MustParseAddr("10.200.0.1"), nodeOut: netip.MustParseAddr("10.200.0.2"), prefix: 24,
		unspec:   netip.IPv4Unspecified(),
		backends: []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")},
	}, {
		name: "IPv6", loop: netip.IPv6Loopback(), loopOther: netip.IPv6Loopback(),
		nodeIn: netip.MustParseAddr("fd00:db8:2::1"), nodeOut: netip.MustParseAddr("fd00:db8:2::2"), prefix: 64,
		unspec:   netip.IPv6Unspecified(),
		backends: v6Backends[:3],
	}}
}

// port returns a random frontend port (nothing listens on frontends).
func (e *env) port() uint16 { return uint16(20000 + e.rng.IntN(10000)) }

// NodePort: a frontend on loopback is balanced like any other; the
// surrogate frontend 0.0.0.0:P / [::]:P serves every local address that
// has no frontend of its own at P (loopback and the node addresses given
// to bpf.SetNodeAddresses), and nothing else. The helper runs in a network
// namespace of its own, where the node addresses are really assigned.
func TestNodePort(t *testing.T) {
	e := newEnv(t, true)
	for _, f := range e.npFamilies() {
		t.Run(f.name, func(t *testing.T) { e.testNodePort(t, f) })
	}
}

func (e *env) testNodePort(t *testing.T, f npFamily) {
	ip := "-4"
	if f.unspec.Is6() {
		ip = "-6"
	}
	for _, a := range []netip.Addr{f.nodeIn, f.nodeOut} {
		e.helper.do(t, request{Op: "exec", Argv: []string{"ip", ip, "addr", "add", netip.PrefixFrom(a, f.prefix).String(), "dev", e.dev, "nodad"}}, 30*time.Second)
	}
	require.NoError(t, bpf.SetNodeAddresses(e.root, []netip.Addr{f.nodeIn}))
	t.Cleanup(func() { require.NoError(t, bpf.SetNodeAddresses(e.root, nil)) })
	var bs []*echo
	for i, a := range f.backends {
		bs = append(bs, startEcho(t, e.netNS, "np"+string(rune('1'+i)), a, true, true))
	}

	// A NodePort frontend on loopback, balanced over every backend.
	p := e.port()
	e.upsertSvc(t, &lb.Service{Type: lb.SVCTypeNodePort,
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: f.loop, Port: p, Protocol: lb.TCP}},
		Backends: backends(bs, lb.TCP)})
	r := e.ask(t, request{Op: "tcp", Addr: addr(f.loop, p), N: 300})
	require.Equal(t, 300, r.OK, "failed: %v", r.Errors)
	x := chiSquare(r.Names, names(bs...))
	t.Logf("NodePort on %s: %v, χ² = %.2f", f.loop, r.Names, x)
	require.Less(t, x, chiSquareBound, "spread %v is not uniform", r.Names)
	require.Equal(t, map[string]int{addr(f.loop, p): 300}, r.Peers)

	// The surrogate frontend, TCP and UDP, served by np1 and np2.
	p2 := e.port()
	e.upsertSvc(t, &lb.Service{Type: lb.SVCTypeNodePort,
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: f.unspec, Port: p2, Protocol: lb.ANY}},
		Backends: backends(bs[:2], lb.ANY)})
	for _, dst := range []netip.Addr{f.loopOther, f.nodeIn} {
		r = e.ask(t, request{Op: "tcp", Addr: addr(dst, p2), N: 60})
		require.Equal(t, 60, r.OK, "connect to %s: %v", dst, r.Errors)
		require.ElementsMatch(t, names(bs[:2]...), slices.Collect(maps.Keys(r.Names)), "%v", r.Names)
		require.Equal(t, map[string]int{addr(dst, p2): 60}, r.Peers, "getpeername shows the address connected to")
		r = e.ask(t, request{Op: "udp", Addr: addr(dst, p2), N: 20})
		require.Equal(t, 20, r.OK, "send to %s: %v", dst, r.Errors)
		require.Equal(t, map[string]int{addr(dst, p2): 20}, r.Peers, "replies come from the address sent to")
	}
	// A local address that is not a node address is not served...
	r = e.ask(t, request{Op: "tcp", Addr: addr(f.nodeOut, p2), N: 3, Timeout: time.Second})
	require.Equal(t, 3, r.Failed, "served: %v", r.Names)
	require.Contains(t, r.Errors[0], "connection refused")
	// ...until it becomes one.
	require.NoError(t, bpf.SetNodeAddresses(e.root, []netip.Addr{f.nodeIn, f.nodeOut}))
	r = e.ask(t, request{Op: "tcp", Addr: addr(f.nodeOut, p2), N: 20})
	require.Equal(t, 20, r.OK, "failed: %v", r.Errors)

	// An address's own frontend wins over the surrogate.
	e.upsertSvc(t, &lb.Service{Type: lb.SVCTypeNodePort,
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: f.nodeIn, Port: p2, Protocol: lb.TCP}},
		Backends: []lb.Backend{bs[2].backend(lb.TCP, lb.BackendStateActive)}})
	r = e.ask(t, request{Op: "tcp", Addr: addr(f.nodeIn, p2), N: 30})
	require.Equal(t, map[string]int{bs[2].name: 30}, r.Names, "errors: %v", r.Errors)
	r = e.ask(t, request{Op: "tcp", Addr: addr(f.nodeOut, p2), N: 30})
	require.ElementsMatch(t, names(bs[:2]...), slices.Collect(maps.Keys(r.Names)), "the others still reach the surrogate: %v", r.Names)

	// A ClusterIP service cannot have the surrogate frontend...
	_, _, err := e.engine.Upsert(ctxT(t), &lb.Service{Type: lb.SVCTypeClusterIP,
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: f.unspec, Port: e.port(), Protocol: lb.TCP}},
		Backends: backends(bs, lb.TCP)})
	require.ErrorContains(t, err, "frontend")
	require.ErrorContains(t, err, "only the surrogate frontend of a NodePort or HostPort service")

	// ...and a surrogate entry without the NodePort or HostPort flag
	// (written here by hand) is not used; with HostPort it is.
	p4 := e.port()
	raw := e.rawMaps(t)
	fam := lbmaps.FamilyOf(f.unspec)
	const rawID = 65000
	beID := e.backendID(t, bs[0].addr)
	master := lbmaps.ServiceEntry{
		Key:   lbmaps.ServiceKey{Address: f.unspec, Port: p4, Proto: 6},
		Value: lbmaps.ServiceValue{Count: 1, RevNATIndex: rawID, Flags: lb.FlagRoutable},
	}
	slot := lbmaps.ServiceEntry{
		Key:   lbmaps.ServiceKey{Address: f.unspec, Port: p4, Proto: 6, Slot: 1},
		Value: lbmaps.ServiceValue{BackendID: beID, RevNATIndex: rawID},
	}
	require.NoError(t, raw.RevNAT(fam).Update([]lbmaps.RevNATEntry{{ID: rawID, Value: lbmaps.RevNATValue{Address: f.unspec, Port: p4}}}))
	require.NoError(t, raw.Services(fam).Update([]lbmaps.ServiceEntry{slot, master}))
	t.Cleanup(func() {
		require.NoError(t, raw.Services(fam).Delete([]lbmaps.ServiceKey{master.Key, slot.Key}))
		require.NoError(t, raw.RevNAT(fam).Delete([]uint16{rawID}))
	})
	for _, dst := range []netip.Addr{f.loopOther, f.nodeIn} {
		r = e.ask(t, request{Op: "tcp", Addr: addr(dst, p4), N: 3, Timeout: time.Second})
		require.Equal(t, 3, r.Failed, "a surrogate without NodePort/HostPort flag served %s: %v", dst, r.Names)
		require.Contains(t, r.Errors[0], "connection refused")
	}
	master.Value.Flags = lb.FlagHostPort
	require.NoError(t, raw.Services(fam).Update([]lbmaps.ServiceEntry{master}))
	r = e.ask(t, request{Op: "tcp", Addr: addr(f.nodeIn, p4), N: 10})
	require.Equal(t, map[string]int{bs[0].name: 10}, r.Names, "errors: %v", r.Errors)
	require.Equal(t, map[string]int{addr(f.nodeIn, p4): 10}, r.Peers)
}
