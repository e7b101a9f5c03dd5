package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/netns"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// packetScenarios measures the packet datapath's XDP program with
// BPF_PROG_TEST_RUN against a floor program that only returns XDP_PASS, on
// the same packet in the same run (issue 17): a miss (no frontend), a
// tracked connection (a DSR service, whose translation leaves the packet
// a packet of the same flow, so every repetition is a conntrack hit), and
// new SNAT connections (one call per packet, each from another port, so
// the syscall is part of both figures). It runs in a network namespace of
// its own with one veth whose backend neighbour is known.
// packetScale sizes the packet scenarios: repetitions of a test run, new
// connections called one by one, TCP connections per round and path, MiB
// per bulk round.
type packetScale struct {
	repeat, calls, conns, mib int
}

// fullPacketScale is make bench's.
var fullPacketScale = packetScale{repeat: 2_000_000, calls: 20_000, conns: 1000, mib: 512}

func packetScenarios(res *results, root string, sc packetScale) error {
	ns := fmt.Sprintf("albbench-%d", os.Getpid())
	sh := func(argv ...string) error {
		full := append([]string{"--net=/run/netns/" + ns}, argv...)
		if out, err := exec.Command("nsenter", full...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
		}
		return nil
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %w: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"},
		{"ip", "addr", "add", "198.18.0.2/24", "dev", "v0"},
		{"ip", "link", "set", "v0", "up"},
		{"ip", "link", "set", "v1", "up"},
		{"ip", "neigh", "replace", "198.18.0.11", "lladdr", "02:00:00:00:00:11", "dev", "v0", "nud", "permanent"},
		{"sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1"},
	} {
		if err := sh(argv...); err != nil {
			return err
		}
	}
	dir := root + "/packet"
	ctx := context.Background()
	eng, err := quietEngine(ctx, dir)
	if err != nil {
		return err
	}
	defer eng.Close()
	vip := netip.MustParseAddr("198.18.100.1")
	be := lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr("198.18.0.11"), Port: 8080, Protocol: lb.TCP}, Weight: 100}
	for _, s := range []*lb.Service{
		{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 8080, Protocol: lb.TCP}}, Type: lb.SVCTypeLoadBalancer, Backends: []lb.Backend{be}},
		{Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: 8081, Protocol: lb.TCP}}, Type: lb.SVCTypeLoadBalancer, DSR: true, Backends: []lb.Backend{be}},
	} {
		if _, _, err := eng.Upsert(ctx, s); err != nil {
			return err
		}
	}
	progs, err := packetlb.Load(dir, 0)
	if err != nil {
		return err
	}
	defer progs.Close()
	floor, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		return fmt.Errorf("floor program: %w", err)
	}
	defer floor.Close()

	return netns.Do("/run/netns/"+ns, func() error {
		iface, err := net.InterfaceByName("v0")
		if err != nil {
			return err
		}
		if err := packetlb.DeviceConfig(dir, iface.Index, netip.MustParseAddr("198.18.0.2"), netip.Addr{}); err != nil {
			return err
		}
		xdpCtx := func(n int) []byte {
			c := make([]byte, 24) // struct xdp_md: data_end, ingress_ifindex
			binary.LittleEndian.PutUint32(c[4:], uint32(n))
			binary.LittleEndian.PutUint32(c[12:], uint32(iface.Index))
			return c
		}
		// repeated runs the program on pkt `repeat` times in one call and
		// returns the kernel's time per run and this thread's CPU time per
		// run. (Without a context the packet comes in on the loopback, so
		// a forwarded one is redirected to v0: XDP_REDIRECT.)
		repeated := func(p *ebpf.Program, pkt []byte, repeat int) (time.Duration, time.Duration, uint32, error) {
			c0 := threadCPU()
			ret, per, err := p.Benchmark(pkt, repeat, nil)
			return per, (threadCPU() - c0) / time.Duration(repeat), ret, err
		}
		repeat := sc.repeat
		for _, c := range []struct {
			name string
			pkt  []byte
			want uint32
		}{
			{"xdp-miss", tcpSYN(vip, 9999, 40000), 2},
			{"xdp-ct-hit-dsr", tcpSYN(vip, 8081, 40001), 4},
		} {
			if _, _, ret, err := repeated(progs.XDP, c.pkt, 1); err != nil || ret != c.want {
				return fmt.Errorf("%s: first run: verdict %d, %v (want %d)", c.name, ret, err, c.want)
			}
			ours, oursCPU, ret, err := repeated(progs.XDP, c.pkt, repeat)
			if err != nil || ret != c.want {
				return fmt.Errorf("%s: verdict %d, %v (want %d)", c.name, ret, err, c.want)
			}
			fl, flCPU, _, err := repeated(floor, c.pkt, repeat)
			if err != nil {
				return err
			}
			res.add(c.name, "ns_per_packet", float64(ours.Nanoseconds()), "ns")
			res.add(c.name, "cpu_ns_per_packet", float64(oursCPU.Nanoseconds()), "ns")
			res.add(c.name, "mpps", 1e3/float64(ours.Nanoseconds()), "Mpps")
			res.add(c.name, "floor_ns_per_packet", float64(fl.Nanoseconds()), "ns")
			res.add(c.name, "floor_cpu_ns_per_packet", float64(flCPU.Nanoseconds()), "ns")
			res.add(c.name, "ratio_to_floor", float64(fl)/float64(ours), "x")
		}

		// New connections: one call per packet (another source port each
		// time), ours and the floor's interleaved in blocks.
		calls := sc.calls
		block := min(1000, calls)
		var ours, fl, oursCPU, flCPU time.Duration
		for i := 0; i+block <= calls; i += block {
			for _, turn := range []int{0, 1} {
				c0, t0 := threadCPU(), time.Now()
				for j := i; j < i+block; j++ {
					pkt := tcpSYN(vip, 8080, uint16(10000+j))
					p := progs.XDP
					if turn == 1 {
						p = floor
					}
					ret, err := p.Run(&ebpf.RunOptions{Data: pkt, Context: xdpCtx(len(pkt))})
					if err != nil {
						return err
					}
					if turn == 0 && ret != 3 {
						return fmt.Errorf("xdp-new-snat: verdict %d for packet %d", ret, j)
					}
				}
				wall, cpu := time.Since(t0), threadCPU()-c0
				if turn == 0 {
					ours, oursCPU = ours+wall, oursCPU+cpu
				} else {
					fl, flCPU = fl+wall, flCPU+cpu
				}
			}
		}
		n := float64(calls / block * block)
		res.add("xdp-new-snat", "ns_per_call", float64(ours.Nanoseconds())/n, "ns")
		res.add("xdp-new-snat", "cpu_ns_per_call", float64(oursCPU.Nanoseconds())/n, "ns")
		res.add("xdp-new-snat", "floor_ns_per_call", float64(fl.Nanoseconds())/n, "ns")
		res.add("xdp-new-snat", "floor_cpu_ns_per_call", float64(flCPU.Nanoseconds())/n, "ns")
		res.add("xdp-new-snat", "ratio_to_floor", float64(fl)/float64(ours), "x")
		res.add("xdp-new-snat", "extra_ns_per_new_connection", float64((ours-fl).Nanoseconds())/n, "ns")
		return nil
	})
}

// threadCPU is the CPU time of the calling thread (locked by inNetNS).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// tcpSYN is an Ethernet frame with a TCP SYN from 198.18.0.1:sport to
// dst:dport (checksums left 0: the program does not check them).
func tcpSYN(dst netip.Addr, dport, sport uint16) []byte {
	b := make([]byte, 14+20+20)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], 40)
	copy(ip[12:], []byte{198, 18, 0, 1})
	copy(ip[16:], dst.AsSlice())
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	tcp[12], tcp[13] = 5<<4, 0x02
	return b
}

// topoScenarios measures real TCP through the packet datapath in a veth
// topology of its own (a bridge namespace; client, LB and backend
// namespaces on it): connections per second (connect, one exchange, close,
// one after another) and bulk throughput (512 MiB written by the client,
// read by the backend), through the VIP (LB path, SNAT mode, generic XDP)
// and straight to the backend's address (direct path), interleaved. The
// process CPU per connection and per MiB is reported beside each.
func topoScenarios(res *results, root string, sc packetScale) error {
	pre := fmt.Sprintf("albt%d", os.Getpid())
	names := map[string]string{"sw": pre + "-sw", "cl": pre + "-cl", "lb": pre + "-lb", "be": pre + "-be"}
	sh := func(ns string, argv ...string) error {
		full := append([]string{"--net=/run/netns/" + ns}, argv...)
		if out, err := exec.Command("nsenter", full...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %s: %w: %s", ns, strings.Join(argv, " "), err, out)
		}
		return nil
	}
	for _, n := range []string{"sw", "cl", "lb", "be"} {
		if out, err := exec.Command("ip", "netns", "add", names[n]).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns add: %w: %s", err, out)
		}
		defer exec.Command("ip", "netns", "del", names[n]).Run()
		if err := sh(names[n], "ip", "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	addrs := map[string]string{"cl": "198.18.0.1", "lb": "198.18.0.2", "be": "198.18.0.11"}
	steps := [][]string{{"sw", "ip", "link", "add", "br0", "type", "bridge"}, {"sw", "ip", "link", "set", "br0", "up"}}
	for i, n := range []string{"cl", "lb", "be"} {
		p := fmt.Sprintf("p%d", i)
		steps = append(steps,
			[]string{"sw", "ip", "link", "add", p, "type", "veth", "peer", "name", "eth0", "netns", names[n]},
			[]string{"sw", "ip", "link", "set", p, "master", "br0", "up"},
			[]string{n, "ip", "addr", "add", addrs[n] + "/24", "dev", "eth0"},
			[]string{n, "ip", "link", "set", "eth0", "up"})
	}
	steps = append(steps,
		[]string{"cl", "ip", "route", "add", "198.18.100.0/24", "via", "198.18.0.2"},
		[]string{"lb", "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1"})
	for _, st := range steps {
		if err := sh(names[st[0]], st[1:]...); err != nil {
			return err
		}
	}
	// The backend: accept, answer each line, or discard a bulk stream.
	var ln net.Listener
	if err := netns.Do("/run/netns/"+names["be"], func() error {
		var err error
		ln, err = net.Listen("tcp", "0.0.0.0:0")
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && n < 64 {
						c.Write(buf[:n]) // a short message: echo it
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	dir := root + "/topo"
	ctx := context.Background()
	eng, err := quietEngine(ctx, dir)
	if err != nil {
		return err
	}
	defer eng.Close()
	vip := netip.MustParseAddr("198.18.100.1")
	if _, _, err := eng.Upsert(ctx, &lb.Service{
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: port, Protocol: lb.TCP}}, Type: lb.SVCTypeLoadBalancer,
		Backends: []lb.Backend{{L3n4Addr: lb.L3n4Addr{Addr: netip.MustParseAddr(addrs["be"]), Port: port, Protocol: lb.TCP}, Weight: 100}}}); err != nil {
		return err
	}
	if err := netns.Do("/run/netns/"+names["lb"], func() error {
		_, err := packetlb.Attach(packetlb.Config{Root: dir, Devices: []string{"eth0"}, Mode: packetlb.ModeGeneric})
		return err
	}); err != nil {
		return err
	}
	defer packetlb.Detach(dir)

	paths := []struct {
		name string
		to   netip.AddrPort
	}{{"lb", netip.AddrPortFrom(vip, port)}, {"direct", netip.AddrPortFrom(netip.MustParseAddr(addrs["be"]), port)}}
	// Everything the client does runs on one thread in its namespace, so
	// that a connection costs no namespace switch.
	return netns.Do("/run/netns/"+names["cl"], func() error {
		// Connections per second: rounds of 1,000 per path, interleaved.
		const connRounds = 4
		perRound := sc.conns
		conns := map[string][2]time.Duration{} // wall, cpu
		buf := make([]byte, 5)
		for range connRounds {
			for _, p := range paths {
				c0, t0 := cpuTime(), time.Now()
				for range perRound {
					c, err := net.DialTimeout("tcp", p.to.String(), 3*time.Second)
					if err != nil {
						return fmt.Errorf("%s path: %w", p.name, err)
					}
					c.SetDeadline(time.Now().Add(3 * time.Second))
					copy(buf, "ping\n")
					if _, err = c.Write(buf); err == nil {
						_, err = io.ReadFull(c, buf)
					}
					c.Close()
					if err != nil {
						return fmt.Errorf("%s path: exchange: %w", p.name, err)
					}
				}
				v := conns[p.name]
				conns[p.name] = [2]time.Duration{v[0] + time.Since(t0), v[1] + cpuTime() - c0}
			}
		}
		n := float64(connRounds * perRound)
		for _, p := range paths {
			res.add("tcp-connections", p.name+"_per_s", n/conns[p.name][0].Seconds(), "conn/s")
			res.add("tcp-connections", p.name+"_cpu_us_per_connection", float64(conns[p.name][1].Microseconds())/n, "us")
		}
		res.add("tcp-connections", "lb_ratio_to_direct", conns["direct"][0].Seconds()/conns["lb"][0].Seconds(), "x")

		// Throughput: 512 MiB per round and path, 3 rounds, interleaved.
		const bulkRounds = 3
		mib := sc.mib
		bulk := map[string][2]time.Duration{}
		chunk := make([]byte, 64<<10)
		for range bulkRounds {
			for _, p := range paths {
				c, err := net.DialTimeout("tcp", p.to.String(), 3*time.Second)
				if err != nil {
					return fmt.Errorf("%s path: %w", p.name, err)
				}
				c0, t0 := cpuTime(), time.Now()
				c.SetDeadline(time.Now().Add(120 * time.Second))
				for range mib * 16 {
					if _, err := c.Write(chunk); err != nil {
						c.Close()
						return fmt.Errorf("%s path: bulk: %w", p.name, err)
					}
				}
				c.(*net.TCPConn).CloseWrite()
				io.Copy(io.Discard, c) // until the backend has read all and closed
				c.Close()
				v := bulk[p.name]
				bulk[p.name] = [2]time.Duration{v[0] + time.Since(t0), v[1] + cpuTime() - c0}
			}
		}
		for _, p := range paths {
			total := float64(mib * bulkRounds)
			res.add("tcp-throughput", p.name+"_mib_per_s", total/bulk[p.name][0].Seconds(), "MiB/s")
			res.add("tcp-throughput", p.name+"_cpu_ms_per_mib", float64(bulk[p.name][1].Microseconds())/1000/total, "ms")
		}
		res.add("tcp-throughput", "lb_ratio_to_direct", bulk["direct"][0].Seconds()/bulk["lb"][0].Seconds(), "x")
		return nil
	})
}

// quietEngine starts an engine on maps under dir that logs warnings only
// and never reconciles on its own.
func quietEngine(ctx context.Context, dir string) (*actorlb.Engine, error) {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	return actorlb.New(ctx, actorlb.Config{BPFRoot: dir, Logger: log, ReconcileInterval: noReconcile})
}
