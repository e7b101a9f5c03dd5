package datapath

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// Outcome counters (packetlb.Outcomes).
const (
	cntPassNotService = "pass_not_service"
	cntFwdNew         = "forward_new"
	cntFwdCT          = "forward_tracked"
	cntReply          = "reply"
	cntDropNoBackend  = "drop_no_backend"
)

// inNSFamilies runs f for IPv4 and IPv6 with the datapath in mode.
func inNSFamilies(t *testing.T, f func(t *testing.T, v6 bool)) {
	for _, fam := range []struct {
		name string
		v6   bool
	}{{"IPv4", false}, {"IPv6", true}} {
		t.Run(fam.name, func(t *testing.T) { f(t, fam.v6) })
	}
}

func vipOf(v6 bool) netip.Addr {
	if v6 {
		return nsVIP6
	}
	return nsVIP4
}

// Connections from another host to a VIP are spread over every backend
// (χ² bound), TCP and UDP, answered from the VIP (a TCP client accepts
// nothing else), in SNAT mode, for each attach mode.
func TestNorthSouthSpreadsConnectionsOverBackends(t *testing.T) {
	for _, mode := range []packetlb.Mode{packetlb.ModeNative, packetlb.ModeGeneric, packetlb.ModeTC} {
		t.Run(string(mode), func(t *testing.T) {
			inNSFamilies(t, func(t *testing.T, v6 bool) {
				tp := newNSTopo(t, 1, 3)
				eng, root := nsEngine(t)
				echoes, port := tp.nsEchoes(t)
				vip := netip.AddrPortFrom(vipOf(v6), port)
				svc := &lb.Service{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip.Addr(), Port: port, Protocol: lb.TCP}},
					Type: lb.SVCTypeLoadBalancer, Backends: nsBackends(v6, port, 0, 1, 2)}
				id, _, err := eng.Upsert(ctxT(t), svc)
				require.NoError(t, err)
				udp := *svc
				udp.Frontend.Protocol = lb.UDP
				udp.Backends = nsBackends(v6, port, 0, 1, 2)
				for i := range udp.Backends {
					udp.Backends[i].Protocol = lb.UDP
				}
				_, _, err = eng.Upsert(ctxT(t), &udp)
				require.NoError(t, err)
				if mode == packetlb.ModeNative {
					tp.nativeReady(0)
				}
				info := tp.attach(t, root, 0, mode)
				t.Log(info)
				if mode != packetlb.ModeTC {
					require.Contains(t, info.String(), "xdp("+string(mode))
				}

				const n = 150
				counts := map[string]int{}
				for i := range n {
					name, err := once(tp.client, vip)
					require.NoError(t, err, "connection %d (counters %v)", i, counters(t, root))
					counts[name]++
				}
				x := chiSquare(counts, names(echoes...))
				t.Logf("TCP spread %v, χ²=%.2f", counts, x)
				require.Less(t, x, chiSquareBound, "χ² with 2 degrees of freedom, p = 1e-6: %v", counts)

				ucounts := map[string]int{}
				for i := range 60 {
					name, err := udpOnce(tp.client, vip)
					require.NoError(t, err, "datagram %d", i)
					ucounts[name]++
				}
				require.Len(t, ucounts, 3, "UDP reaches every backend: %v", ucounts)

				c := counters(t, root)
				// Every TCP connection is new (the client's TIME_WAIT keeps its
				// port); a UDP socket may get a port an earlier one had, and
				// its datagram is then a tracked flow's.
				require.GreaterOrEqual(t, c[cntFwdNew], uint64(n), "new connections counted")
				require.GreaterOrEqual(t, c[cntFwdNew]+c[cntFwdCT], uint64(3*n+60), "client packets forwarded")
				require.Greater(t, c[cntReply], uint64(n), "replies translated by the LB")
				require.Positive(t, mapLen(t, root, ctName(v6, true)), "SNAT reverse entries")
				st, err := packetlb.ReadStats(root)
				require.NoError(t, err)
				require.GreaterOrEqual(t, st.Services[uint16(id)].Packets, uint64(3*n), "the service's packets (SYN, ACK, data, FIN per connection)")
				require.Positive(t, st.Services[uint16(id)].Bytes)
				var bePackets uint64
				for _, tr := range st.Backends {
					bePackets += tr.Packets
				}
				require.GreaterOrEqual(t, len(st.Backends), 3, "per-backend counters")
				require.GreaterOrEqual(t, bePackets, st.Services[uint16(id)].Packets)
			})
		})
	}
}

func ctName(v6, rev bool) string {
	switch {
	case v6 && rev:
		return packetlb.CT6RevName
	case v6:
		return packetlb.CT6Name
	case rev:
		return packetlb.CT4RevName
	}
	return packetlb.CT4Name
}

// Established connections keep their backend while other backends are
// added and removed and while their own backend is terminating; a
// terminating backend gets no new connection; new connections opened
// throughout the churn all succeed.
func TestNorthSouthConntrackKeepsEstablishedConnections(t *testing.T) {
	inNSFamilies(t, func(t *testing.T, v6 bool) {
		tp := newNSTopo(t, 1, 3)
		eng, root := nsEngine(t)
		_, port := tp.nsEchoes(t)
		vip := netip.AddrPortFrom(vipOf(v6), port)
		fe := lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip.Addr(), Port: port, Protocol: lb.TCP}}
		upsert := func(bs []lb.Backend) {
			t.Helper()
			_, _, err := eng.Upsert(ctxT(t), &lb.Service{Frontend: fe, Type: lb.SVCTypeLoadBalancer, Backends: bs})
			require.NoError(t, err)
		}
		upsert(nsBackends(v6, port, 0, 1))
		tp.attach(t, root, 0, packetlb.ModeGeneric)

		// Long-lived connections, each with its backend.
		var conns []*conn
		owner := map[*conn]string{}
		for i := range 20 {
			c, err := dialNS(tp.client, vip, 3*time.Second)
			require.NoError(t, err, "connection %d", i)
			t.Cleanup(func() { c.c.Close() })
			name, err := c.ask("first", 3*time.Second)
			require.NoError(t, err)
			owner[c] = name
			conns = append(conns, c)
		}

		// New connections all along the churn.
		var failed, made atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := once(tp.client, vip); err != nil {
					failed.Add(1)
					t.Logf("connection during churn: %v", err)
				}
				made.Add(1)
			}
		}()

		start := time.Now()
		check := func(step string) {
			t.Helper()
			t.Logf("%s: %v", step, time.Since(start))
			for i, c := range conns {
				name, err := c.ask(step, 3*time.Second)
				require.NoError(t, err, "%s: connection %d", step, i)
				require.Equal(t, owner[c], name, "%s: connection %d changed backend", step, i)
			}
		}
		upsert(nsBackends(v6, port, 0, 1, 2)) // add be3
		time.Sleep(100 * time.Millisecond)
		check("after adding be3")

		// be1 terminating: its connections stay, it takes no new one.
		bs := nsBackends(v6, port, 0, 1, 2)
		bs[0].State = lb.BackendStateTerminating
		upsert(bs)
		time.Sleep(100 * time.Millisecond)
		check("be1 terminating")
		for i := range 30 {
			name, err := once(tp.client, vip)
			require.NoError(t, err)
			require.NotEqual(t, "be1", name, "new connection %d went to the terminating backend", i)
		}

		// be2 at weight 0: its connections stay, it takes no new one
		// (the weighted pick of lb_members' weights).
		bs = nsBackends(v6, port, 0, 1, 2)
		bs[0].State = lb.BackendStateTerminating
		bs[1].Weight = 0
		upsert(bs)
		time.Sleep(100 * time.Millisecond)
		check("be2 at weight 0")
		for i := range 30 {
			name, err := once(tp.client, vip)
			require.NoError(t, err)
			require.Equal(t, "be3", name, "new connection %d: be1 terminating, be2 weight 0", i)
		}
		bs[1].Weight = 100
		upsert(bs)

		// Drain be3 (terminating, then gone), which none of the
		// long-lived connections uses (they were made before it came).
		bs = nsBackends(v6, port, 0, 1, 2)
		bs[0].State = lb.BackendStateTerminating
		bs[2].State = lb.BackendStateTerminating
		upsert(bs)
		time.Sleep(200 * time.Millisecond)
		bs = nsBackends(v6, port, 0, 1)
		bs[0].State = lb.BackendStateTerminating
		upsert(bs)
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
		check("after removing be3")
		t.Logf("%d connections during the churn, %d failed", made.Load(), failed.Load())
		require.Positive(t, made.Load())
		require.Zero(t, failed.Load(), "connections failed during the churn")
		c := counters(t, root)
		require.Positive(t, c[cntFwdCT], "tracked packets forwarded")
	})
}

// DSR: the LB changes only the destination MAC; the backends, holding the
// VIP on their loopback, answer the client directly, so the LB sees no
// reply and keeps no reverse entry.
func TestNorthSouthDSRRepliesBypassTheLB(t *testing.T) {
	inNSFamilies(t, func(t *testing.T, v6 bool) {
		tp := newNSTopo(t, 1, 2)
		tp.dsrBackends()
		eng, root := nsEngine(t)
		echoes, port := tp.nsEchoes(t)
		vip := netip.AddrPortFrom(vipOf(v6), port)
		_, _, err := eng.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip.Addr(), Port: port, Protocol: lb.TCP}},
			Type:     lb.SVCTypeLoadBalancer, DSR: true, Backends: nsBackends(v6, port, 0, 1)})
		require.NoError(t, err)
		tp.attach(t, root, 0, packetlb.ModeGeneric)
		counts := map[string]int{}
		for i := range 40 {
			name, err := once(tp.client, vip)
			require.NoError(t, err, "connection %d", i)
			counts[name]++
		}
		require.Len(t, counts, len(echoes), "both backends serve: %v", counts)
		c := counters(t, root)
		require.Zero(t, c[cntReply], "no reply passed through the LB")
		require.Zero(t, mapLen(t, root, ctName(v6, true)), "no reverse entry in DSR mode")
		require.Positive(t, mapLen(t, root, ctName(v6, false)), "tracked DSR connections")
	})
}

// A NodePort service answers on the LB's own address; a service with no
// backend drops (and counts) what comes to it; other traffic to the LB
// passes to its stack.
func TestNorthSouthNodePortAndNoBackend(t *testing.T) {
	tp := newNSTopo(t, 1, 2)
	eng, root := nsEngine(t)
	_, port := tp.nsEchoes(t)
	for _, v6 := range []bool{false, true} {
		surrogate := netip.IPv4Unspecified()
		if v6 {
			surrogate = netip.IPv6Unspecified()
		}
		_, _, err := eng.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: surrogate, Port: port, Protocol: lb.TCP}},
			Type:     lb.SVCTypeNodePort, Backends: nsBackends(v6, port, 0, 1)})
		require.NoError(t, err)
	}
	empty := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.9"), port)
	_, _, err := eng.Upsert(ctxT(t), &lb.Service{
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: empty.Addr(), Port: port, Protocol: lb.TCP}},
		Type:     lb.SVCTypeLoadBalancer})
	require.NoError(t, err)
	tp.attach(t, root, 0, packetlb.ModeGeneric)
	for _, v6 := range []bool{false, true} {
		np := netip.AddrPortFrom(nsLB(0, v6), port)
		seen := map[string]bool{}
		for i := range 30 {
			name, err := once(tp.client, np)
			require.NoError(t, err, "NodePort %s connection %d", np, i)
			seen[name] = true
		}
		require.Len(t, seen, 2, "NodePort %s reaches both backends", np)
	}
	before := counters(t, root)[cntDropNoBackend]
	_, err = dialNS(tp.client, empty, 500*time.Millisecond)
	require.Error(t, err, "a service with no backend answers nothing")
	require.Greater(t, counters(t, root)[cntDropNoBackend], before)
	// The LB's own address on another port is not a service: passed to
	// its stack, which refuses the connection (RST) rather than drop it.
	_, err = dialNS(tp.client, netip.AddrPortFrom(nsLB(0, false), port+1), 2*time.Second)
	require.ErrorContains(t, err, "refused")
	require.Positive(t, counters(t, root)[cntPassNotService])

	// Attaching again (an agent restart) updates the pinned links in
	// place; the conntrack survives; Detach removes everything.
	info := tp.attach(t, root, 0, packetlb.ModeGeneric)
	require.Len(t, info.Links, 2, info.String())
	for _, l := range info.Links {
		require.Equal(t, "updated", l.Change, "%s/%s", l.Device, l.Hook)
	}
	require.Positive(t, mapLen(t, root, packetlb.CT4Name), "conntrack kept across a re-attach")
	// Another mode replaces the XDP link rather than update it.
	info = tp.attach(t, root, 0, packetlb.ModeTC)
	require.Len(t, info.Links, 1, "tc alone: %s", info)
	info = tp.attach(t, root, 0, packetlb.ModeGeneric)
	require.Contains(t, info.String(), "xdp(generic")
	_, err = once(tp.client, netip.AddrPortFrom(nsLB(0, false), port))
	require.NoError(t, err, "NodePort after re-attach")
	require.NoError(t, packetlb.Detach(root))
	st, err := packetlb.Status(root)
	require.NoError(t, err)
	require.False(t, st.Attached(), st.String())
	_, err = dialNS(tp.client, netip.AddrPortFrom(nsLB(0, false), port), 2*time.Second)
	require.ErrorContains(t, err, "refused", "detached: the LB's stack answers the NodePort itself")
}

// A backend's ICMP error reaches the client translated: a UDP datagram to
// a frontend whose backend has nothing listening gets "connection
// refused" on the client's connected socket, not a timeout.
func TestNorthSouthICMPErrorReachesTheClient(t *testing.T) {
	inNSFamilies(t, func(t *testing.T, v6 bool) {
		tp := newNSTopo(t, 1, 1)
		eng, root := nsEngine(t)
		const port = 9 // nothing listens in the backend's fresh namespace
		bs := nsBackends(v6, port, 0)
		bs[0].Protocol = lb.UDP
		_, _, err := eng.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vipOf(v6), Port: port, Protocol: lb.UDP}},
			Type:     lb.SVCTypeLoadBalancer, Backends: bs})
		require.NoError(t, err)
		tp.attach(t, root, 0, packetlb.ModeGeneric)
		var c net.Conn
		require.NoError(t, inNetNS(nsPath(tp.client), func() error {
			var err error
			c, err = net.Dial("udp", netip.AddrPortFrom(vipOf(v6), port).String())
			return err
		}))
		defer c.Close()
		var last error
		for range 3 { // the first datagram may wait for neighbour resolution
			c.SetDeadline(time.Now().Add(time.Second))
			if _, err := c.Write([]byte("x")); err != nil {
				last = err
				break
			}
			_, last = c.Read(make([]byte, 16))
			if last != nil && strings.Contains(last.Error(), "refused") {
				break
			}
		}
		require.ErrorContains(t, last, "refused")
		require.Positive(t, counters(t, root)["icmp_error"])
	})
}

// dialFromPort connects from the client namespace's port lport to ap and
// returns the backend that answered; the connection is reset on close
// (linger 0), so that the same 4-tuple can be used again at once.
func dialFromPort(name string, lport uint16, ap netip.AddrPort) (string, error) {
	var c net.Conn
	err := inNetNS(nsPath(name), func() error {
		d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{Port: int(lport)}}
		var err error
		c, err = d.Dial("tcp", ap.String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer func() {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}()
	cc := &conn{c: c, rd: bufio.NewReader(c)}
	return cc.ask("hello", 3*time.Second)
}

// Two load balancers (two nodes: an engine and maps each) with the same
// backends, given in another order and with other backend IDs, send the
// same flow to the same backend when the service's algorithm is maglev,
// with no state shared; with random selection they do not (the control
// that shows the check can fail).
func TestNorthSouthMaglevPicksTheSameBackendOnTwoLBs(t *testing.T) {
	inNSFamilies(t, func(t *testing.T, v6 bool) {
		tp := newNSTopo(t, 2, 3)
		eng0, root0 := nsEngine(t)
		eng1, root1 := nsEngine(t)
		_, port := tp.nsEchoes(t)
		vip := vipOf(v6)
		// Node 1 has seen other backends first: its IDs differ.
		_, _, err := eng1.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: port + 1, Protocol: lb.TCP}},
			Type:     lb.SVCTypeLoadBalancer, Backends: nsBackends(v6, port+7, 0, 1)})
		require.NoError(t, err)
		for _, alg := range []lb.LBAlgorithm{lb.LBAlgMaglev, lb.LBAlgRandom} {
			fport := port
			if alg == lb.LBAlgRandom {
				fport = port + 2
			}
			for i, eng := range []interface {
				Upsert(context.Context, *lb.Service) (lb.ServiceID, bool, error)
			}{eng0, eng1} {
				bs := nsBackends(v6, port, 0, 1, 2)
				if i == 1 {
					slices.Reverse(bs)
				}
				_, _, err := eng.Upsert(ctxT(t), &lb.Service{
					Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: fport, Protocol: lb.TCP}},
					Type:     lb.SVCTypeLoadBalancer, LBAlgorithm: alg, Backends: bs})
				require.NoError(t, err)
			}
		}
		tp.attach(t, root0, 0, packetlb.ModeGeneric)
		tp.attach(t, root1, 1, packetlb.ModeGeneric)

		rng := testutil.Rand(t)
		ports := make([]uint16, 20)
		for i := range ports {
			ports[i] = uint16(20000 + rng.IntN(10000))
		}
		ports = slices.Compact(slices.Sorted(slices.Values(ports)))
		pick := func(lbi int, fport uint16) []string {
			t.Helper()
			tp.routeVia(lbi)
			var out []string
			for _, lp := range ports {
				name, err := dialFromPort(tp.client, lp, netip.AddrPortFrom(vip, fport))
				require.NoError(t, err, "LB %d, client port %d", lbi, lp)
				out = append(out, name)
			}
			return out
		}
		maglev0, maglev1 := pick(0, port), pick(1, port)
		t.Logf("maglev via LB0 %v, via LB1 %v", maglev0, maglev1)
		require.Equal(t, maglev0, maglev1, "the same flow goes to the same backend through either LB")
		require.Greater(t, len(slices.Compact(slices.Sorted(slices.Values(maglev0)))), 1, "the flows are spread")
		random0, random1 := pick(0, port+2), pick(1, port+2)
		require.NotEqual(t, random0, random1, "random selection differs between the LBs (control)")
		require.Positive(t, counters(t, root1)[cntFwdNew])
	})
}

// Source ranges (loadBalancerSourceRanges) let in only the clients inside
// them, or with a deny list every client but those; the packets of the
// others are dropped and counted. Changing the ranges takes effect for the
// next connection.
func TestNorthSouthSourceRangesDropWhatTheyShould(t *testing.T) {
	inNSFamilies(t, func(t *testing.T, v6 bool) {
		tp := newNSTopo(t, 1, 2)
		eng, root := nsEngine(t)
		_, port := tp.nsEchoes(t)
		vip := netip.AddrPortFrom(vipOf(v6), port)
		segment, client, other := netip.MustParsePrefix("198.18.0.0/24"), netip.PrefixFrom(nsClient4, 32), netip.MustParsePrefix("198.18.0.128/25")
		if v6 {
			segment, client, other = netip.MustParsePrefix("2001:2::/64"), netip.PrefixFrom(nsClient6, 128), netip.MustParsePrefix("2001:2::8000/113")
		}
		set := func(deny bool, ranges ...netip.Prefix) {
			t.Helper()
			_, _, err := eng.Upsert(ctxT(t), &lb.Service{
				Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip.Addr(), Port: port, Protocol: lb.TCP}},
				Type:     lb.SVCTypeLoadBalancer, Backends: nsBackends(v6, port, 0, 1),
				SourceRanges: ranges, SourceRangesDeny: deny})
			require.NoError(t, err)
		}
		set(false, segment)
		tp.attach(t, root, 0, packetlb.ModeGeneric)
		for _, c := range []struct {
			name   string
			deny   bool
			ranges []netip.Prefix
			open   bool
		}{
			{"allowed: the client's segment", false, []netip.Prefix{segment}, true},
			{"allowed: the client alone, among others", false, []netip.Prefix{other, client}, true},
			{"not allowed: another range", false, []netip.Prefix{other}, false},
			{"denied: the client", true, []netip.Prefix{client}, false},
			{"denied: another range", true, []netip.Prefix{other}, true},
			{"no ranges", false, nil, true},
		} {
			set(c.deny, c.ranges...)
			before := counters(t, root)["drop_source_range"]
			name, err := once(tp.client, vip)
			if c.open {
				require.NoError(t, err, c.name)
				require.NotEmpty(t, name)
				continue
			}
			require.Error(t, err, c.name)
			require.Greater(t, counters(t, root)["drop_source_range"], before, "%s: counted", c.name)
		}
	})
}
