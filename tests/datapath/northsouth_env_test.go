package datapath

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/bpf/packetlb"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The north-south topology: every node is a network namespace of the test
// with one veth ("eth0") into a bridge in a "switch" namespace, all on one
// L2 segment with no route out:
//
//	client 198.18.0.1  2001:2::1   routes the VIP prefixes via the LB
//	lb     198.18.0.2  2001:2::2   runs packetlb on eth0, forwarding on
//	be1..n 198.18.0.11.. 2001:2::11..
//
// VIPs are in 198.18.100.0/24 and 2001:2:0:100::/64. Client and backends
// send full checksums and verify what they receive (checksum offload off
// on their veths), so a wrong incremental checksum fails the connection.
type nsTopo struct {
	t        testing.TB
	prefix   string
	sw       string // netns names
	client   string
	lbs      []string
	lbPorts  []string // the switch-side veth of each load balancer
	backends []string
}

var (
	nsClient4 = netip.MustParseAddr("198.18.0.1")
	nsClient6 = netip.MustParseAddr("2001:2::1")
	nsVIP4    = netip.MustParseAddr("198.18.100.1")
	nsVIP6    = netip.MustParseAddr("2001:2:0:100::1")
)

func nsLB(i int, v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("2001:2::%x", 2+i))
	}
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(2 + i)})
}

func nsBackend(i int, v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("2001:2::%x", 0x11+i))
	}
	return netip.AddrFrom4([4]byte{198, 18, 0, byte(11 + i)})
}

func nsPath(name string) string { return "/run/netns/" + name }

// nsRun runs argv inside the network namespace name (nsenter --net).
func nsRun(t testing.TB, name string, argv ...string) string {
	t.Helper()
	full := append([]string{"--net=" + nsPath(name)}, argv...)
	out, err := exec.Command("nsenter", full...).CombinedOutput()
	require.NoError(t, err, "nsenter %s %s: %s", name, strings.Join(argv, " "), out)
	return string(out)
}

// newNSTopo builds the topology with lbs load balancers and n backends,
// removed when t ends.
func newNSTopo(t testing.TB, lbs, n int) *nsTopo {
	t.Helper()
	testutil.Privileged(t)
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			requireOrSkip(t, "%s not installed: %v", tool, err)
		}
	}
	rng := testutil.Rand(t)
	tp := &nsTopo{t: t, prefix: fmt.Sprintf("alb%04x", rng.IntN(1<<16))}
	add := func(role string) string {
		name := tp.prefix + "-" + role
		out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
		require.NoError(t, err, "ip netns add %s: %s", name, out)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", name, err, out)
			}
		})
		nsRun(t, name, "ip", "link", "set", "lo", "up")
		return name
	}
	tp.sw = add("sw")
	nsRun(t, tp.sw, "ip", "link", "add", "br0", "type", "bridge")
	nsRun(t, tp.sw, "ip", "link", "set", "br0", "up")
	port := 0
	plug := func(node string, v4, v6 netip.Addr, offload bool) string {
		port++
		swdev := fmt.Sprintf("p%d", port)
		nsRun(t, tp.sw, "ip", "link", "add", swdev, "type", "veth", "peer", "name", "eth0", "netns", node)
		nsRun(t, tp.sw, "ip", "link", "set", swdev, "master", "br0", "up")
		nsRun(t, node, "ip", "addr", "add", v4.String()+"/24", "dev", "eth0")
		nsRun(t, node, "ip", "-6", "addr", "add", v6.String()+"/64", "dev", "eth0", "nodad")
		if !offload {
			setChecksumOffload(t, node, "eth0", false)
		}
		nsRun(t, node, "ip", "link", "set", "eth0", "up")
		return swdev
	}
	tp.client = add("cl")
	plug(tp.client, nsClient4, nsClient6, false)
	for i := range lbs {
		name := add(fmt.Sprintf("lb%d", i))
		tp.lbPorts = append(tp.lbPorts, plug(name, nsLB(i, false), nsLB(i, true), true))
		nsRun(t, name, "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding=1", "net.ipv6.conf.all.forwarding=1")
		tp.lbs = append(tp.lbs, name)
	}
	tp.routeVia(0)
	for i := range n {
		name := add(fmt.Sprintf("be%d", i+1))
		plug(name, nsBackend(i, false), nsBackend(i, true), false)
		tp.backends = append(tp.backends, name)
	}
	return tp
}

// routeVia points the client's VIP routes at load balancer i.
func (tp *nsTopo) routeVia(i int) {
	tp.t.Helper()
	nsRun(tp.t, tp.client, "ip", "route", "replace", "198.18.100.0/24", "via", nsLB(i, false).String())
	nsRun(tp.t, tp.client, "ip", "-6", "route", "replace", "2001:2:0:100::/64", "via", nsLB(i, true).String())
}

// dsrBackends puts the VIPs on the loopback of every backend (L2 DSR).
func (tp *nsTopo) dsrBackends() {
	tp.t.Helper()
	for _, be := range tp.backends {
		nsRun(tp.t, be, "ip", "addr", "add", nsVIP4.String()+"/32", "dev", "lo")
		nsRun(tp.t, be, "ip", "-6", "addr", "add", nsVIP6.String()+"/128", "dev", "lo", "nodad")
	}
}

// setChecksumOffload turns TX and RX checksum offload of dev in netns
// name on or off.
func setChecksumOffload(t testing.TB, name, dev string, on bool) {
	t.Helper()
	const ethtoolSTXCSUM, ethtoolSRXCSUM = 0x17, 0x15
	ethtoolSet(t, name, dev, ethtoolSTXCSUM, on)
	ethtoolSet(t, name, dev, ethtoolSRXCSUM, on)
}

// ethtoolSet sets an ethtool on/off feature (an ETHTOOL_S* command with a
// struct ethtool_value) of dev in netns name, by SIOCETHTOOL.
func ethtoolSet(t testing.TB, name, dev string, cmd uint32, on bool) {
	t.Helper()
	const siocEthtool = 0x8946
	err := inNetNS(nsPath(name), func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		val := struct{ cmd, data uint32 }{cmd, 0}
		if on {
			val.data = 1
		}
		var ifr [40]byte
		copy(ifr[:16], dev)
		*(*uintptr)(unsafe.Pointer(&ifr[16])) = uintptr(unsafe.Pointer(&val))
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), siocEthtool, uintptr(unsafe.Pointer(&ifr)))
		runtime.KeepAlive(&val)
		if errno != 0 {
			return fmt.Errorf("ethtool cmd %#x on %s: %w", cmd, dev, errno)
		}
		return nil
	})
	require.NoError(t, err)
}

// nativeReady makes native XDP on load balancer i's eth0 able to
// transmit: a veth hands XDP_TX frames only to a peer that runs NAPI, which
// on this kernel takes an XDP program on the peer (the switch-side port):
// one that passes everything, removed when the test ends.
func (tp *nsTopo) nativeReady(i int) {
	tp.t.Helper()
	pass, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	require.NoError(tp.t, err)
	tp.t.Cleanup(func() { pass.Close() })
	require.NoError(tp.t, inNetNS(nsPath(tp.sw), func() error {
		ifc, err := net.InterfaceByName(tp.lbPorts[i])
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: ifc.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		tp.t.Cleanup(func() { l.Close() })
		return nil
	}))
}

// attach attaches packetlb to eth0 of load balancer i, detached when t
// ends.
func (tp *nsTopo) attach(t testing.TB, root string, i int, mode packetlb.Mode) packetlb.Info {
	t.Helper()
	var info packetlb.Info
	err := inNetNS(nsPath(tp.lbs[i]), func() error {
		var err error
		info, err = packetlb.Attach(packetlb.Config{Root: root, Devices: []string{"eth0"}, Mode: mode})
		return err
	})
	require.NoError(t, err)
	return info
}

// nsEngine starts an engine on fresh maps under a new root (closed when t
// ends) and returns it with the root.
func nsEngine(t testing.TB) (*actorlb.Engine, string) {
	t.Helper()
	root := testutil.PinDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eng, err := actorlb.New(ctx, actorlb.Config{BPFRoot: root, Logger: quietLogger(), ReconcileInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() {
		eng.Close()
		if err := packetlb.Detach(root); err != nil {
			t.Errorf("detach packet lb: %v", err)
		}
	})
	return eng, root
}

// nsEchoes starts a TCP and UDP echo named be<i+1> on the wildcard address
// of every backend namespace, all on one port (the first one's, chosen by
// its kernel; the namespaces are fresh, so it is free in the others).
func (tp *nsTopo) nsEchoes(t testing.TB) ([]*echo, uint16) {
	t.Helper()
	var out []*echo
	var port uint16
	for i, be := range tp.backends {
		e := startEchoAt(t, nsPath(be), fmt.Sprintf("be%d", i+1), netip.AddrPortFrom(netip.IPv6Unspecified(), port), true, true)
		port = e.addr.Port()
		out = append(out, e)
	}
	return out, port
}

// nsBackends returns the service backends at port of the given backend
// indexes.
func nsBackends(v6 bool, port uint16, idx ...int) []lb.Backend {
	var out []lb.Backend
	for _, i := range idx {
		out = append(out, lb.Backend{L3n4Addr: lb.L3n4Addr{Addr: nsBackend(i, v6), Port: port, Protocol: lb.TCP}, Weight: 100})
	}
	return out
}

// conn is a client connection opened in the client namespace.
type conn struct {
	c  net.Conn
	rd *bufio.Reader
}

// dialNS opens a TCP connection from namespace name to ap.
func dialNS(name string, ap netip.AddrPort, timeout time.Duration) (*conn, error) {
	var c net.Conn
	err := inNetNS(nsPath(name), func() error {
		var err error
		c, err = net.DialTimeout("tcp", ap.String(), timeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &conn{c: c, rd: bufio.NewReader(c)}, nil
}

// ask sends a line and returns the name of the backend that echoed it.
func (c *conn) ask(msg string, timeout time.Duration) (string, error) {
	c.c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c.c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok || rest != msg {
		return "", fmt.Errorf("unexpected answer %q to %q", line, msg)
	}
	return name, nil
}

// once connects, asks once and closes: which backend served it.
func once(name string, ap netip.AddrPort) (string, error) {
	c, err := dialNS(name, ap, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.c.Close()
	return c.ask("hello", 3*time.Second)
}

// udpOnce sends one datagram from the client namespace and returns the
// answering backend's name; it checks the answer came from ap.
func udpOnce(name string, ap netip.AddrPort) (string, error) {
	var pc *net.UDPConn
	err := inNetNS(nsPath(name), func() error {
		var err error
		pc, err = net.ListenUDP("udp", nil)
		return err
	})
	if err != nil {
		return "", err
	}
	defer pc.Close()
	pc.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := pc.WriteToUDPAddrPort([]byte("ping"), ap); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, from, err := pc.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", err
	}
	if from.Addr().Unmap() != ap.Addr() || from.Port() != ap.Port() {
		return "", fmt.Errorf("answer from %s, not from the frontend %s", from, ap)
	}
	name2, rest, _ := strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
	if rest != "ping" {
		return "", fmt.Errorf("unexpected answer %q", buf[:n])
	}
	return name2, nil
}

// counters reads packetlb's outcome counters (summed over CPUs).
func counters(t testing.TB, root string) map[string]uint64 {
	t.Helper()
	st, err := packetlb.ReadStats(root)
	require.NoError(t, err)
	return st.Outcomes
}

// mapLen counts the entries of the datapath map name under root.
func mapLen(t testing.TB, root, name string) int {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(root+"/"+name, nil)
	require.NoError(t, err)
	defer m.Close()
	n := 0
	var k, v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	require.NoError(t, it.Err())
	return n
}
