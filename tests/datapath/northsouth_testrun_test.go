package datapath

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
)

// XDP verdicts.
const (
	xdpDrop = 1
	xdpPass = 2
	xdpTX   = 3
)

// progEnv is the packet LB loaded (not attached) in a namespace of its own
// with one device (eth0 of a one-backend topology) whose backend
// neighbours are known, for BPF_PROG_TEST_RUN on crafted packets.
type progEnv struct {
	tp      *nsTopo
	root    string
	progs   *packetlb.Programs
	ifindex int
	lbMAC   net.HardwareAddr
	port    uint16
}

var clientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}

func newProgEnv(t *testing.T) *progEnv {
	t.Helper()
	tp := newNSTopo(t, 1, 1)
	eng, root := nsEngine(t)
	pe := &progEnv{tp: tp, root: root, port: 8080}
	for _, v6 := range []bool{false, true} {
		_, _, err := eng.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vipOf(v6), Port: pe.port, Protocol: lb.TCP}},
			Type:     lb.SVCTypeLoadBalancer, Backends: nsBackends(v6, pe.port, 0)})
		require.NoError(t, err)
		bs := nsBackends(v6, pe.port, 0)
		bs[0].Protocol = lb.UDP
		_, _, err = eng.Upsert(ctxT(t), &lb.Service{
			Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vipOf(v6), Port: pe.port, Protocol: lb.UDP}},
			Type:     lb.SVCTypeLoadBalancer, Backends: bs})
		require.NoError(t, err)
	}
	// The backend's neighbour entries, so that the FIB lookup succeeds.
	lbns := tp.lbs[0]
	nsRun(t, lbns, "ip", "neigh", "replace", nsBackend(0, false).String(), "lladdr", "02:00:00:00:00:11", "dev", "eth0", "nud", "permanent")
	nsRun(t, lbns, "ip", "-6", "neigh", "replace", nsBackend(0, true).String(), "lladdr", "02:00:00:00:00:11", "dev", "eth0", "nud", "permanent")
	progs, err := packetlb.Load(root, 0)
	require.NoError(t, err)
	t.Cleanup(progs.Close)
	pe.progs = progs
	require.NoError(t, inNetNS(nsPath(lbns), func() error {
		iface, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		pe.ifindex, pe.lbMAC = iface.Index, iface.HardwareAddr
		return packetlb.DeviceConfig(root, iface.Index, nsLB(0, false), nsLB(0, true))
	}))
	return pe
}

// run runs the XDP program on pkt as received on eth0 and returns the
// verdict and the packet after it.
func (pe *progEnv) run(t *testing.T, pkt []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(pkt)+256)
	ctx := make([]byte, 24) // struct xdp_md: data 0, data_end, ingress_ifindex
	binary.LittleEndian.PutUint32(ctx[4:], uint32(len(pkt)))
	binary.LittleEndian.PutUint32(ctx[12:], uint32(pe.ifindex))
	var ret uint32
	require.NoError(t, inNetNS(nsPath(pe.tp.lbs[0]), func() error {
		opts := &ebpf.RunOptions{Data: pkt, DataOut: out, Context: ctx}
		r, err := pe.progs.XDP.Run(opts)
		ret = r
		out = opts.DataOut
		return err
	}))
	return ret, out
}

// ---- packet building ----

type pktSpec struct {
	v6       bool
	proto    uint8
	src, dst netip.Addr
	sport    uint16
	dport    uint16
	options  int    // IPv4 option bytes (multiple of 4)
	frag     uint16 // IPv4 frag_off field (host order)
	nexthdr  uint8  // IPv6 next header override (0: proto)
	payload  []byte
	zeroUDP  bool // UDP checksum 0 (IPv4)
	truncate int  // bytes cut from the end
}

func build(s pktSpec) []byte {
	var l4 []byte
	switch s.proto {
	case 6:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint16(l4[0:], s.sport)
		binary.BigEndian.PutUint16(l4[2:], s.dport)
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12] = 5 << 4
		l4[13] = 0x02 // SYN
		binary.BigEndian.PutUint16(l4[14:], 65535)
	case 17:
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[0:], s.sport)
		binary.BigEndian.PutUint16(l4[2:], s.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(8+len(s.payload)))
	default:
		l4 = []byte{3, 1, 0, 0, 0, 0, 0, 0} // ICMP destination unreachable
	}
	l4 = append(l4, s.payload...)
	eth := append(append([]byte{}, clientMAC...), clientMAC...)
	var ip []byte
	if !s.v6 {
		eth = append(eth, 0x08, 0x00)
		ihl := 20 + s.options
		ip = make([]byte, ihl)
		ip[0] = 0x40 | byte(ihl/4)
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+len(l4)))
		binary.BigEndian.PutUint16(ip[6:], s.frag)
		ip[8] = 64
		ip[9] = s.proto
		copy(ip[12:], s.src.AsSlice())
		copy(ip[16:], s.dst.AsSlice())
		for i := 20; i < ihl; i++ {
			ip[i] = 1 // NOP options
		}
		binary.BigEndian.PutUint16(ip[10:], ^csum(ip, 0))
	} else {
		eth = append(eth, 0x86, 0xdd)
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
		ip[6] = s.proto
		if s.nexthdr != 0 {
			ip[6] = s.nexthdr
		}
		ip[7] = 64
		copy(ip[8:], s.src.AsSlice())
		copy(ip[24:], s.dst.AsSlice())
	}
	if s.proto == 6 || (s.proto == 17 && !s.zeroUDP) {
		off := 16
		if s.proto == 17 {
			off = 6
		}
		c := ^csum(l4, pseudo(s.v6, s.src, s.dst, s.proto, len(l4)))
		if c == 0 && s.proto == 17 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(l4[off:], c)
	}
	pkt := append(append(eth, ip...), l4...)
	return pkt[:len(pkt)-s.truncate]
}

func pseudo(v6 bool, src, dst netip.Addr, proto uint8, n int) uint32 {
	var b []byte
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	if v6 {
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = append(b, 0, 0, 0, proto)
	} else {
		b = append(b, 0, proto)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	}
	return sum(b)
}

func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func csum(b []byte, init uint32) uint16 {
	s := init + sum(b)
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// parsed is what a test reads back from a forwarded packet.
type parsed struct {
	dstMAC, srcMAC net.HardwareAddr
	src, dst       netip.Addr
	sport, dport   uint16
	ipOK, l4OK     bool
	udpCsum        uint16
	options        []byte
}

func parse(t *testing.T, pkt []byte) parsed {
	t.Helper()
	p := parsed{dstMAC: pkt[0:6], srcMAC: pkt[6:12]}
	var l4 []byte
	var proto uint8
	if binary.BigEndian.Uint16(pkt[12:]) == 0x0800 {
		ip := pkt[14:]
		ihl := int(ip[0]&0xf) * 4
		p.ipOK = csum(ip[:ihl], 0) == 0xffff
		p.options = ip[20:ihl]
		p.src, _ = netip.AddrFromSlice(ip[12:16])
		p.dst, _ = netip.AddrFromSlice(ip[16:20])
		proto = ip[9]
		l4 = ip[ihl:binary.BigEndian.Uint16(ip[2:])]
	} else {
		ip := pkt[14:]
		p.ipOK = true
		p.src, _ = netip.AddrFromSlice(ip[8:24])
		p.dst, _ = netip.AddrFromSlice(ip[24:40])
		proto = ip[6]
		l4 = ip[40 : 40+int(binary.BigEndian.Uint16(ip[4:]))]
	}
	p.sport = binary.BigEndian.Uint16(l4[0:])
	p.dport = binary.BigEndian.Uint16(l4[2:])
	if proto == 17 {
		p.udpCsum = binary.BigEndian.Uint16(l4[6:])
	}
	p.l4OK = csum(l4, pseudo(p.src.Is6(), p.src, p.dst, proto, len(l4))) == 0xffff
	return p
}

// The programs on crafted packets: a packet to a frontend is rewritten to
// the backend, from the node's address, with valid checksums (TCP, UDP,
// IPv4 options, IPv6); a UDP packet without checksum keeps none;
// fragments, truncated headers, ICMP, IPv6 extension headers and packets
// to no frontend pass to the stack byte for byte.
func TestPacketLBOnCraftedPackets(t *testing.T) {
	pe := newProgEnv(t)
	beMAC, _ := net.ParseMAC("02:00:00:00:00:11")
	for _, v6 := range []bool{false, true} {
		client, vip, node, be := nsClient4, nsVIP4, nsLB(0, false), nsBackend(0, false)
		if v6 {
			client, vip, node, be = nsClient6, nsVIP6, nsLB(0, true), nsBackend(0, true)
		}
		fwd := []struct {
			name string
			spec pktSpec
		}{
			{"tcp", pktSpec{proto: 6, sport: 40001}},
			{"udp", pktSpec{proto: 17, sport: 40002, payload: []byte("hello")}},
			{"udp odd payload", pktSpec{proto: 17, sport: 40003, payload: []byte("hey")}},
		}
		if !v6 {
			fwd = append(fwd,
				struct {
					name string
					spec pktSpec
				}{"ip options", pktSpec{proto: 6, sport: 40004, options: 8}},
				struct {
					name string
					spec pktSpec
				}{"udp no checksum", pktSpec{proto: 17, sport: 40005, zeroUDP: true, payload: []byte("x")}})
		}
		for _, c := range fwd {
			s := c.spec
			s.v6, s.src, s.dst, s.dport = v6, client, vip, pe.port
			ret, out := pe.run(t, build(s))
			require.Equal(t, uint32(xdpTX), ret, "%s v6=%v: forwarded out of eth0 (counters %v)", c.name, v6, counters(t, pe.root))
			p := parse(t, out)
			require.Equal(t, beMAC, p.dstMAC, c.name)
			require.Equal(t, pe.lbMAC, p.srcMAC, c.name)
			require.Equal(t, be, p.dst, c.name)
			require.Equal(t, node, p.src, c.name)
			require.Equal(t, pe.port, p.dport, c.name)
			require.True(t, p.ipOK, "%s: IPv4 header checksum", c.name)
			if s.zeroUDP {
				require.Zero(t, p.udpCsum, "%s: a UDP packet without checksum keeps none", c.name)
			} else {
				require.True(t, p.l4OK, "%s v6=%v: L4 checksum", c.name, v6)
			}
			if s.options > 0 {
				require.Equal(t, bytes.Repeat([]byte{1}, s.options), p.options, "options kept")
			}
			// Again: the conntrack entry gives the same translation.
			ret2, out2 := pe.run(t, build(s))
			require.Equal(t, uint32(xdpTX), ret2)
			require.Equal(t, out, out2, "%s: a tracked packet is translated alike", c.name)
		}

		passes := []struct {
			name string
			spec pktSpec
		}{
			{"not a frontend port", pktSpec{proto: 6, sport: 41001, dport: pe.port + 1}},
			{"icmp", pktSpec{proto: 1}},
			{"truncated tcp", pktSpec{proto: 6, sport: 41002, truncate: 8}},
			{"truncated ip", pktSpec{proto: 6, sport: 41003, truncate: 30}},
		}
		if !v6 {
			passes = append(passes,
				struct {
					name string
					spec pktSpec
				}{"first fragment", pktSpec{proto: 6, sport: 41004, frag: 0x2000}},
				struct {
					name string
					spec pktSpec
				}{"later fragment", pktSpec{proto: 6, sport: 41005, frag: 10}})
		} else {
			passes = append(passes, struct {
				name string
				spec pktSpec
			}{"extension header", pktSpec{proto: 6, sport: 41006, nexthdr: 0}})
			passes[len(passes)-1].spec.nexthdr = 60 // destination options
		}
		for _, c := range passes {
			s := c.spec
			s.v6, s.src, s.dst = v6, client, vip
			if s.dport == 0 {
				s.dport = pe.port
			}
			in := build(s)
			ret, out := pe.run(t, in)
			require.Equal(t, uint32(xdpPass), ret, "%s v6=%v: passed", c.name, v6)
			require.Equal(t, in, out, "%s v6=%v: untouched", c.name, v6)
		}
	}
}

// Random corruptions of valid packets are passed, dropped or forwarded,
// and a forwarded one always goes to the backend from the node's address:
// nothing is mis-forwarded.
func TestPacketLBNeverMisforwardsCorruptPackets(t *testing.T) {
	pe := newProgEnv(t)
	rng := testutil.Rand(t)
	verdicts := map[uint32]int{}
	for i := range 3000 {
		v6 := i%2 == 1
		client, vip, node, be := nsClient4, nsVIP4, nsLB(0, false), nsBackend(0, false)
		if v6 {
			client, vip, node, be = nsClient6, nsVIP6, nsLB(0, true), nsBackend(0, true)
		}
		proto := uint8(6)
		if rng.IntN(2) == 0 {
			proto = 17
		}
		pkt := build(pktSpec{v6: v6, proto: proto, src: client, dst: vip, sport: uint16(42000 + i), dport: pe.port, payload: []byte("data")})
		hdr := 14 + 40 + 20
		if hdr > len(pkt) {
			hdr = len(pkt)
		}
		for range 1 + rng.IntN(3) {
			pkt[rng.IntN(hdr)] ^= byte(1 + rng.IntN(255))
		}
		if rng.IntN(4) == 0 {
			pkt = pkt[:14+rng.IntN(len(pkt)-14)] // test runs need an Ethernet header
		}
		ret, out := pe.run(t, pkt)
		verdicts[ret]++
		switch ret {
		case xdpPass, xdpDrop:
		case xdpTX:
			require.GreaterOrEqual(t, len(out), 14+20+8)
			v4 := binary.BigEndian.Uint16(out[12:]) == 0x0800
			var dst, src netip.Addr
			if v4 {
				ihl := int(out[14]&0xf) * 4
				src, _ = netip.AddrFromSlice(out[14+12 : 14+16])
				dst, _ = netip.AddrFromSlice(out[14+16 : 14+20])
				require.Equal(t, uint16(pe.port), binary.BigEndian.Uint16(out[14+ihl+2:]), "packet %d: to the backend's port", i)
			} else {
				src, _ = netip.AddrFromSlice(out[14+8 : 14+24])
				dst, _ = netip.AddrFromSlice(out[14+24 : 14+40])
			}
			okV4 := src == nsLB(0, false) && dst == nsBackend(0, false)
			okV6 := src == nsLB(0, true) && dst == nsBackend(0, true)
			require.True(t, okV4 || okV6, "packet %d forwarded from %s to %s (want %s -> %s)", i, src, dst, node, be)
		default:
			t.Fatalf("packet %d: verdict %d", i, ret)
		}
	}
	t.Logf("verdicts: %v", verdicts)
	require.Positive(t, verdicts[xdpPass])
	require.Positive(t, verdicts[xdpTX])
}

// icmpError builds an ICMP (v4: destination unreachable, port; v6:
// destination unreachable, port) error from src to dst quoting quoted (a
// packet as built by build, Ethernet header included).
func icmpError(v6 bool, src, dst netip.Addr, quoted []byte) []byte {
	inner := quoted[14:]
	if !v6 && len(inner) > 28+20 {
		inner = inner[:48]
	}
	msg := append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, inner...)
	eth := append(append([]byte{}, clientMAC...), clientMAC...)
	var ip []byte
	if !v6 {
		msg[0], msg[1] = 3, 3
		binary.BigEndian.PutUint16(msg[2:], ^csum(msg, 0))
		eth = append(eth, 0x08, 0x00)
		ip = make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 1
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(msg)))
		copy(ip[12:], src.AsSlice())
		copy(ip[16:], dst.AsSlice())
		binary.BigEndian.PutUint16(ip[10:], ^csum(ip, 0))
	} else {
		msg[0], msg[1] = 1, 4
		binary.BigEndian.PutUint16(msg[2:], ^csum(msg, pseudo(true, src, dst, 58, len(msg))))
		eth = append(eth, 0x86, 0xdd)
		ip = make([]byte, 40)
		ip[0], ip[6], ip[7] = 0x60, 58, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(len(msg)))
		copy(ip[8:], src.AsSlice())
		copy(ip[24:], dst.AsSlice())
	}
	return append(append(eth, ip...), msg...)
}

// icmpParsed reads back an ICMP error: outer addresses, the quoted
// packet's addresses and ports, and whether every checksum holds.
type icmpParsed struct {
	src, dst   netip.Addr
	qsrc, qdst netip.Addr
	qsport     uint16
	qdport     uint16
	ok         bool
}

func parseICMP(pkt []byte) icmpParsed {
	var r icmpParsed
	if binary.BigEndian.Uint16(pkt[12:]) == 0x0800 {
		ip := pkt[14:]
		r.src, _ = netip.AddrFromSlice(ip[12:16])
		r.dst, _ = netip.AddrFromSlice(ip[16:20])
		msg := ip[20:binary.BigEndian.Uint16(ip[2:])]
		q := msg[8:]
		r.qsrc, _ = netip.AddrFromSlice(q[12:16])
		r.qdst, _ = netip.AddrFromSlice(q[16:20])
		r.qsport, r.qdport = binary.BigEndian.Uint16(q[20:]), binary.BigEndian.Uint16(q[22:])
		r.ok = csum(ip[:20], 0) == 0xffff && csum(msg, 0) == 0xffff && csum(q[:20], 0) == 0xffff
		return r
	}
	ip := pkt[14:]
	r.src, _ = netip.AddrFromSlice(ip[8:24])
	r.dst, _ = netip.AddrFromSlice(ip[24:40])
	msg := ip[40 : 40+int(binary.BigEndian.Uint16(ip[4:]))]
	q := msg[8:]
	r.qsrc, _ = netip.AddrFromSlice(q[8:24])
	r.qdst, _ = netip.AddrFromSlice(q[24:40])
	r.qsport, r.qdport = binary.BigEndian.Uint16(q[40:]), binary.BigEndian.Uint16(q[42:])
	r.ok = csum(msg, pseudo(true, r.src, r.dst, 58, len(msg))) == 0xffff
	return r
}

// ICMP errors of tracked connections are translated both ways with valid
// checksums: one from the backend about a forwarded packet goes to the
// client quoting the client's own packet to the frontend; one from the
// client about a reply goes to the backend quoting the backend's packet to
// the node. An error about no tracked connection passes untouched.
func TestPacketLBTranslatesICMPErrorsOfTrackedConnections(t *testing.T) {
	pe := newProgEnv(t)
	nsRun(t, pe.tp.lbs[0], "ip", "neigh", "replace", nsClient4.String(), "lladdr", clientMAC.String(), "dev", "eth0", "nud", "permanent")
	nsRun(t, pe.tp.lbs[0], "ip", "-6", "neigh", "replace", nsClient6.String(), "lladdr", clientMAC.String(), "dev", "eth0", "nud", "permanent")
	for _, v6 := range []bool{false, true} {
		client, vip, node, be := nsClient4, nsVIP4, nsLB(0, false), nsBackend(0, false)
		if v6 {
			client, vip, node, be = nsClient6, nsVIP6, nsLB(0, true), nsBackend(0, true)
		}
		for _, proto := range []uint8{6, 17} {
			syn := build(pktSpec{v6: v6, proto: proto, src: client, dst: vip, sport: 43000 + uint16(proto), dport: pe.port, payload: []byte("q")})
			ret, fwd := pe.run(t, syn)
			require.Equal(t, uint32(xdpTX), ret)
			natPort := parse(t, fwd).sport

			// From the backend, about the forwarded packet.
			ret, out := pe.run(t, icmpError(v6, be, node, fwd))
			require.Equal(t, uint32(xdpTX), ret, "v6=%v proto %d: backend's error forwarded", v6, proto)
			r := parseICMP(out)
			require.True(t, r.ok, "v6=%v proto %d: checksums of the translated error", v6, proto)
			require.Equal(t, []netip.Addr{vip, client, client, vip}, []netip.Addr{r.src, r.dst, r.qsrc, r.qdst})
			require.Equal(t, []uint16{43000 + uint16(proto), pe.port}, []uint16{r.qsport, r.qdport})

			// From the client, about a reply (frontend -> client).
			reply := build(pktSpec{v6: v6, proto: proto, src: vip, dst: client, sport: pe.port, dport: 43000 + uint16(proto), payload: []byte("r")})
			ret, out = pe.run(t, icmpError(v6, client, vip, reply))
			require.Equal(t, uint32(xdpTX), ret, "v6=%v proto %d: client's error forwarded", v6, proto)
			r = parseICMP(out)
			require.True(t, r.ok, "v6=%v proto %d: checksums of the translated error", v6, proto)
			require.Equal(t, []netip.Addr{node, be, be, node}, []netip.Addr{r.src, r.dst, r.qsrc, r.qdst})
			require.Equal(t, []uint16{pe.port, natPort}, []uint16{r.qsport, r.qdport})
		}
		// About nothing tracked: passed untouched.
		stray := build(pktSpec{v6: v6, proto: 6, src: node, dst: be, sport: 999, dport: pe.port})
		in := icmpError(v6, be, node, stray)
		ret, out := pe.run(t, in)
		require.Equal(t, uint32(xdpPass), ret)
		require.Equal(t, in, out)
	}
	require.Positive(t, counters(t, pe.root)["icmp_error"], "%v", counters(t, pe.root))
}
