package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/actorlb/actorlb/internal/bpffs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/internal/testutil"
	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The termination object reads the socket LB's reverse maps: same names
// and shapes as socklb.c's, so the pinned ones can stand in.
func TestSocktermObjectSharesTheReverseMaps(t *testing.T) {
	lbSpec, err := loadSocklb()
	require.NoError(t, err)
	spec, err := loadSockterm()
	require.NoError(t, err)
	for _, name := range []string{ReverseSK4Name, ReverseSK6Name} {
		want, got := lbSpec.Maps[name], spec.Maps[name]
		require.NotNil(t, got, name)
		require.Equal(t, [4]uint32{uint32(want.Type), want.KeySize, want.ValueSize, want.Flags},
			[4]uint32{uint32(got.Type), got.KeySize, got.ValueSize, got.Flags}, name)
	}
	require.Equal(t, uint32(binary.Size(term4Key{})), spec.Maps[socktermMapSockterm4Backends].KeySize)
	require.Equal(t, uint32(binary.Size(term6Key{})), spec.Maps[socktermMapSockterm6Backends].KeySize)
	ps := spec.Programs[socktermProgSocktermUdp]
	require.NotNil(t, ps)
	require.Equal(t, ebpf.Tracing, ps.Type)
	require.Equal(t, ebpf.AttachTraceIter, ps.AttachType)
	require.Equal(t, "iter/udp", ps.SectionName)
}

// Bad input is refused before anything is done, naming the entry.
func TestTerminateUDPSocketsRefusesBadInput(t *testing.T) {
	root := filepath.Join(t.TempDir(), "no-such-root")
	for _, tc := range []struct {
		name     string
		backends []netip.AddrPort
		want     string
	}{
		{"zero address", []netip.AddrPort{{}}, "backends[0]: address: missing or invalid"},
		{"port 0", []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:53"), netip.MustParseAddrPort("127.0.0.3:0")}, "backends[1] (127.0.0.3:0): port: must be 1..65535"},
		{"zone", []netip.AddrPort{netip.MustParseAddrPort("[fe80::1%eth0]:53")}, "backends[0]: address fe80::1%eth0: zones are not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := TerminateUDPSockets(root, tc.backends)
			require.Zero(t, n)
			require.EqualError(t, err, "terminate udp sockets: "+tc.want)
			targets := make([]UDPTarget, len(tc.backends))
			for i, b := range tc.backends {
				targets[i] = UDPTarget{Backend: b, Service: 7}
			}
			n, err = TerminateUDPSocketsOf(root, targets)
			require.Zero(t, n)
			require.EqualError(t, err, "terminate udp sockets: "+strings.Replace(tc.want, "backends[", "targets[", 1))
		})
	}
}

// Without the datapath's reverse maps no socket went through a VIP: nothing
// to do, no error.
func TestTerminateUDPSocketsWithoutDatapathDoesNothing(t *testing.T) {
	root := testutil.PinDir(t)
	n, err := TerminateUDPSockets(root, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.2:53")})
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = TerminateUDPSockets(root, nil)
	require.NoError(t, err)
	require.Zero(t, n)
}

// termEnv is a bpffs root with the socket LB's reverse maps pinned, which
// the tests fill themselves (as the socket LB would on a connect through a
// VIP), and UDP echo servers to connect to.
type termEnv struct {
	root       string
	rev4, rev6 *ebpf.Map
}

func newTermEnv(t *testing.T) *termEnv {
	t.Helper()
	root := testutil.PinDir(t)
	spec, err := loadSocklb()
	require.NoError(t, err)
	e := &termEnv{root: root}
	e.rev4, err = bpffs.OwnMap(spec.Maps[ReverseSK4Name], filepath.Join(root, ReverseSK4Name))
	require.NoError(t, err)
	t.Cleanup(func() { e.rev4.Close() })
	e.rev6, err = bpffs.OwnMap(spec.Maps[ReverseSK6Name], filepath.Join(root, ReverseSK6Name))
	require.NoError(t, err)
	t.Cleanup(func() { e.rev6.Close() })
	return e
}

// mark records that the socket c reached backend through a VIP of service
// 1.
func (e *termEnv) mark(t *testing.T, c *net.UDPConn, backend netip.AddrPort) {
	t.Helper()
	e.markVia(t, c, backend, 1)
}

// markVia records that the socket c reached backend through a VIP of the
// service svc.
func (e *termEnv) markVia(t *testing.T, c *net.UDPConn, backend netip.AddrPort, svc uint16) {
	t.Helper()
	var rev [2]byte
	binary.BigEndian.PutUint16(rev[:], svc)
	cookie := socketCookie(t, c)
	a := backend.Addr().Unmap()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], backend.Port())
	if a.Is4() {
		key := rev4Key{cookie, a.As4(), port, 0}
		val := struct {
			Addr [4]byte
			Port [2]byte
			Rev  [2]byte
		}{[4]byte{127, 100, 0, 1}, [2]byte{0, 53}, rev}
		require.NoError(t, e.rev4.Put(key, val))
		return
	}
	key := rev6Key{cookie, a.As16(), port, 0, 0}
	val := struct {
		Addr [16]byte
		Port [2]byte
		Rev  [2]byte
	}{netip.MustParseAddr("fd00::100").As16(), [2]byte{0, 53}, rev}
	require.NoError(t, e.rev6.Put(key, val))
}

type rev4Key struct {
	Cookie uint64
	Addr   [4]byte
	Port   [2]byte
	Pad    uint16
}

type rev6Key struct {
	Cookie uint64
	Addr   [16]byte
	Port   [2]byte
	Pad    uint16
	Pad2   uint32
}

// marked reports whether the reverse map holds an entry for c and backend.
func (e *termEnv) marked(t *testing.T, c *net.UDPConn, backend netip.AddrPort) bool {
	t.Helper()
	cookie := socketCookie(t, c)
	a := backend.Addr().Unmap()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], backend.Port())
	var val [20]byte
	var err error
	if a.Is4() {
		err = e.rev4.Lookup(rev4Key{cookie, a.As4(), port, 0}, val[:8])
	} else {
		err = e.rev6.Lookup(rev6Key{cookie, a.As16(), port, 0, 0}, val[:])
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	require.NoError(t, err)
	return true
}

func socketCookie(t *testing.T, c *net.UDPConn) uint64 {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var cookie uint64
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}))
	require.NoError(t, serr)
	return cookie
}

// udpEcho answers every datagram with itself, until t ends.
func udpEcho(t *testing.T, network, addr string) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket(network, addr)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}

// dial connects a UDP socket of network to to, closed when t ends.
func dial(t *testing.T, network string, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(to))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// dialMapped connects a dual-stack IPv6 UDP socket to the IPv4-mapped form
// of the IPv4 address to.
func dialMapped(t *testing.T, to netip.AddrPort) *net.UDPConn {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0))
	require.NoError(t, unix.Connect(fd, &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}))
	f := os.NewFile(uintptr(fd), "udp6-mapped")
	defer f.Close()
	c, err := net.FileConn(f)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c.(*net.UDPConn)
}

// ping sends one datagram on c and reads the echo.
func ping(c *net.UDPConn, i int) error {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	msg := fmt.Sprintf("ping-%d", i)
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if string(buf[:n]) != msg {
		return fmt.Errorf("got %q, want %q", buf[:n], msg)
	}
	return nil
}

// requireAborted checks that c was destroyed: its next receive fails with
// ECONNABORTED and it is no longer connected.
func requireAborted(t *testing.T, c *net.UDPConn, what string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
	_, err := c.Read(make([]byte, 64))
	require.ErrorIs(t, err, syscall.ECONNABORTED, "%s: receive after termination", what)
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, syscall.EDESTADDRREQ, "%s: a destroyed socket is disconnected", what)
}

// Exactly the connected sockets whose peer is a listed backend and that
// reached it through a VIP (a reverse map entry) are destroyed: IPv4, IPv6
// and IPv4-mapped. The others keep working.
func TestTerminateUDPSocketsDestroysSocketsThatReachedTheBackendThroughAVIP(t *testing.T) {
	e := newTermEnv(t)
	a4 := udpEcho(t, "udp4", "127.0.0.1:0")
	b4 := udpEcho(t, "udp4", "127.0.0.1:0")
	a6 := udpEcho(t, "udp6", "[::1]:0")

	via4 := dial(t, "udp4", a4)    // through a VIP to a4: destroyed
	direct4 := dial(t, "udp4", a4) // straight to a4: kept
	other4 := dial(t, "udp4", a4)  // an entry for another backend: kept
	viaB4 := dial(t, "udp4", b4)   // through a VIP to b4, not listed: kept
	via6 := dial(t, "udp6", a6)    // through a VIP to a6: destroyed
	direct6 := dial(t, "udp6", a6) // kept
	mapped := dialMapped(t, a4)    // dual-stack, ::ffff:127.0.0.1: destroyed
	unconn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	require.NoError(t, err)
	t.Cleanup(func() { unconn.Close() })
	e.mark(t, via4, a4)
	e.mark(t, other4, b4)
	e.mark(t, viaB4, b4)
	e.mark(t, via6, a6)
	e.mark(t, mapped, a4)
	e.mark(t, unconn, a4) // sent to a4 unconnected: nothing to destroy
	all := map[string]*net.UDPConn{"via4": via4, "direct4": direct4, "other4": other4, "viaB4": viaB4,
		"via6": via6, "direct6": direct6, "mapped": mapped}
	for name, c := range all {
		require.NoError(t, ping(c, 0), name)
	}

	n, err := TerminateUDPSockets(e.root, []netip.AddrPort{a4, a6, netip.AddrPortFrom(a4.Addr(), a4.Port())})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, name := range []string{"via4", "via6", "mapped"} {
		requireAborted(t, all[name], name)
	}
	require.False(t, e.marked(t, via4, a4), "a destroyed socket's reverse entry is deleted")
	require.False(t, e.marked(t, via6, a6))
	require.False(t, e.marked(t, mapped, a4))
	require.True(t, e.marked(t, other4, b4), "the others' entries stay")
	require.True(t, e.marked(t, viaB4, b4))
	require.True(t, e.marked(t, unconn, a4))
	for _, name := range []string{"direct4", "other4", "viaB4", "direct6"} {
		require.NoError(t, ping(all[name], 1), "%s is left alone", name)
	}

	// Destroyed sockets are disconnected: a second run finds nothing.
	n, err = TerminateUDPSockets(e.root, []netip.AddrPort{a4, a6})
	require.NoError(t, err)
	require.Zero(t, n)

	// The filter was emptied: b4 was never listed, now it is.
	n, err = TerminateUDPSockets(e.root, []netip.AddrPort{b4})
	require.NoError(t, err)
	require.Equal(t, 1, n, "viaB4; other4 has an entry for b4 but is connected to a4")
	requireAborted(t, viaB4, "viaB4")
	require.NoError(t, ping(other4, 2))
}

// Concurrent callers take turns on the shared object: every socket is
// destroyed exactly once, the counts add up.
func TestTerminateUDPSocketsConcurrentCallersCountEachSocketOnce(t *testing.T) {
	e := newTermEnv(t)
	a4 := udpEcho(t, "udp4", "127.0.0.1:0")
	const sockets, callers = 24, 4
	conns := make([]*net.UDPConn, sockets)
	for i := range conns {
		conns[i] = dial(t, "udp4", a4)
		e.mark(t, conns[i], a4)
	}
	var wg sync.WaitGroup
	counts := make([]int, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], errs[i] = TerminateUDPSockets(e.root, []netip.AddrPort{a4})
		}()
	}
	wg.Wait()
	total := 0
	for i := range callers {
		require.NoError(t, errs[i])
		total += counts[i]
	}
	require.Equal(t, sockets, total, "per caller: %v", counts)
	for i, c := range conns {
		requireAborted(t, c, fmt.Sprintf("socket %d", i))
	}
}

// The object is loaded on the reverse maps pinned at the time: when the
// datapath pins new ones (Detach, then Attach), the next call uses those.
func TestTerminateUDPSocketsFollowsRepinnedReverseMaps(t *testing.T) {
	e := newTermEnv(t)
	a4 := udpEcho(t, "udp4", "127.0.0.1:0")
	n, err := TerminateUDPSockets(e.root, []netip.AddrPort{a4})
	require.NoError(t, err)
	require.Zero(t, n)

	require.NoError(t, removePins(e.root))
	e.rev4.Close()
	e.rev6.Close()
	n, err = TerminateUDPSockets(e.root, []netip.AddrPort{a4})
	require.NoError(t, err, "no reverse maps pinned")
	require.Zero(t, n)

	spec, err := loadSocklb()
	require.NoError(t, err)
	e.rev4, err = bpffs.OwnMap(spec.Maps[ReverseSK4Name], filepath.Join(e.root, ReverseSK4Name))
	require.NoError(t, err)
	e.rev6, err = bpffs.OwnMap(spec.Maps[ReverseSK6Name], filepath.Join(e.root, ReverseSK6Name))
	require.NoError(t, err)
	c := dial(t, "udp4", a4)
	e.mark(t, c, a4)
	n, err = TerminateUDPSockets(e.root, []netip.AddrPort{a4})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the entry in the new map is seen")
	requireAborted(t, c, "socket marked in the new map")
}

// More backends than the filter maps hold are handled in several runs.
func TestTerminateUDPSocketsManyBackends(t *testing.T) {
	e := newTermEnv(t)
	a4 := udpEcho(t, "udp4", "127.0.0.1:0")
	a6 := udpEcho(t, "udp6", "[::1]:0")
	c4, c6 := dial(t, "udp4", a4), dial(t, "udp6", a6)
	e.mark(t, c4, a4)
	e.mark(t, c6, a6)
	var list []netip.AddrPort
	for i := range 5000 {
		list = append(list, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 77, byte(i >> 8), byte(i)}), 53))
		list = append(list, netip.AddrPortFrom(netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}), uint16(1000+i)))
	}
	list = append(list, a4, a6)
	n, err := TerminateUDPSockets(e.root, list)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireAborted(t, c4, "IPv4 socket")
	requireAborted(t, c6, "IPv6 socket")
}

// A target naming a service destroys only the sockets that reached the
// backend through that service's VIP; a backend that left one service
// keeps its clients of another.
func TestTerminateUDPSocketsOfOneService(t *testing.T) {
	e := newTermEnv(t)
	a4 := udpEcho(t, "udp4", "127.0.0.1:0")
	a6 := udpEcho(t, "udp6", "[::1]:0")
	svc1, svc2 := dial(t, "udp4", a4), dial(t, "udp4", a4)
	svc1v6, svc2v6 := dial(t, "udp6", a6), dial(t, "udp6", a6)
	e.markVia(t, svc1, a4, 1)
	e.markVia(t, svc2, a4, 2)
	e.markVia(t, svc1v6, a6, 1)
	e.markVia(t, svc2v6, a6, 2)

	n, err := TerminateUDPSocketsOf(e.root, []UDPTarget{{Backend: a4, Service: 2}, {Backend: a6, Service: 2}, {Backend: a6, Service: 3}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireAborted(t, svc2, "IPv4 socket through service 2")
	requireAborted(t, svc2v6, "IPv6 socket through service 2")
	require.NoError(t, ping(svc1, 0), "IPv4 socket through service 1 is left alone")
	require.NoError(t, ping(svc1v6, 0), "IPv6 socket through service 1 is left alone")
}

// A kernel without the kfunc (cilium/ebpf: ErrNotSupported) is reported
// with the sentinel.
func TestLoadErrorNamesMissingSockDestroy(t *testing.T) {
	err := loadError(fmt.Errorf("kfunc %q: %w", "bpf_sock_destroy", ebpf.ErrNotSupported))
	require.ErrorIs(t, err, ErrSockDestroyNotSupported)
	require.ErrorContains(t, err, "bpf_sock_destroy")
	require.NotErrorIs(t, loadError(errors.New("other")), ErrSockDestroyNotSupported)
}
