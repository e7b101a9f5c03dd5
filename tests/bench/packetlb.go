package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/bpf/packetlb"
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
func packetScenarios(res *results, root string) error {
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
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	eng, err := actorlb.New(ctx, actorlb.Config{BPFRoot: dir, Logger: log, ReconcileInterval: noReconcile})
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

	return inNetNS("/run/netns/"+ns, func() error {
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
		const repeat = 2_000_000
		for _, sc := range []struct {
			name string
			pkt  []byte
			want uint32
		}{
			{"xdp-miss", tcpSYN(vip, 9999, 40000), 2},
			{"xdp-ct-hit-dsr", tcpSYN(vip, 8081, 40001), 4},
		} {
			if _, _, ret, err := repeated(progs.XDP, sc.pkt, 1); err != nil || ret != sc.want {
				return fmt.Errorf("%s: first run: verdict %d, %v (want %d)", sc.name, ret, err, sc.want)
			}
			ours, oursCPU, ret, err := repeated(progs.XDP, sc.pkt, repeat)
			if err != nil || ret != sc.want {
				return fmt.Errorf("%s: verdict %d, %v (want %d)", sc.name, ret, err, sc.want)
			}
			fl, flCPU, _, err := repeated(floor, sc.pkt, repeat)
			if err != nil {
				return err
			}
			res.add(sc.name, "ns_per_packet", float64(ours.Nanoseconds()), "ns")
			res.add(sc.name, "cpu_ns_per_packet", float64(oursCPU.Nanoseconds()), "ns")
			res.add(sc.name, "mpps", 1e3/float64(ours.Nanoseconds()), "Mpps")
			res.add(sc.name, "floor_ns_per_packet", float64(fl.Nanoseconds()), "ns")
			res.add(sc.name, "floor_cpu_ns_per_packet", float64(flCPU.Nanoseconds()), "ns")
			res.add(sc.name, "ratio_to_floor", float64(fl)/float64(ours), "x")
		}

		// New connections: one call per packet (another source port each
		// time), ours and the floor's interleaved in blocks.
		const calls = 20_000
		var ours, fl, oursCPU, flCPU time.Duration
		for i := 0; i < calls; i += 1000 {
			for _, turn := range []int{0, 1} {
				c0, t0 := threadCPU(), time.Now()
				for j := i; j < i+1000; j++ {
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
		res.add("xdp-new-snat", "ns_per_call", float64(ours.Nanoseconds())/calls, "ns")
		res.add("xdp-new-snat", "cpu_ns_per_call", float64(oursCPU.Nanoseconds())/calls, "ns")
		res.add("xdp-new-snat", "floor_ns_per_call", float64(fl.Nanoseconds())/calls, "ns")
		res.add("xdp-new-snat", "floor_cpu_ns_per_call", float64(flCPU.Nanoseconds())/calls, "ns")
		res.add("xdp-new-snat", "ratio_to_floor", float64(fl)/float64(ours), "x")
		res.add("xdp-new-snat", "extra_ns_per_new_connection", float64((ours-fl).Nanoseconds())/calls, "ns")
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

// inNetNS runs fn on a locked thread in the network namespace at path.
func inNetNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err // the thread stays locked and exits with us
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
