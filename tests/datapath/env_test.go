package datapath

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/bpf"
	"github.com/actorlb/actorlb/internal/netns"
	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper())
	}
	// The Kubernetes-mode tests share one cluster, stopped after the
	// last test (if one started it).
	os.Exit(cluster.RunShared(m))
}

// requireOrSkip fails tb under ACTORLB_REQUIRE_PRIVILEGED=1, skips it
// otherwise.
func requireOrSkip(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(testutil.RequirePrivilegedEnv) == "1" {
		tb.Fatalf(format+" (%s=1 forbids skipping)", append(args, testutil.RequirePrivilegedEnv)...)
	}
	tb.Skipf(format, args...)
}

// ---- the helper process ----

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan []byte
	// stderr collects the helper's stderr, printed if it misbehaves.
	stderr lockedBuffer
	// NetNS is /proc/PID/ns/net of the helper.
	NetNS string
	mu    sync.Mutex
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startHelper starts the helper inside the cgroup cg (and, with newNetNS,
// in a network namespace of its own), stopped when tb ends. It checks
// that the helper really runs in cg.
func startHelper(tb testing.TB, cg string, newNetNS bool) *helper {
	tb.Helper()
	cgf, err := os.Open(cg)
	require.NoError(tb, err)
	defer cgf.Close()
	h := &helper{lines: make(chan []byte, 1)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(os.Environ(), helperEnv+"=1")
	h.cmd.Stderr = &h.stderr
	attr := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgf.Fd())}
	if newNetNS {
		attr.Cloneflags = unix.CLONE_NEWNET
	}
	h.cmd.SysProcAttr = attr
	h.stdin, err = h.cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := h.cmd.StdoutPipe()
	require.NoError(tb, err)
	require.NoError(tb, h.cmd.Start(), "start helper in cgroup %s", cg)
	h.NetNS = fmt.Sprintf("/proc/%d/ns/net", h.cmd.Process.Pid)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for sc.Scan() {
			h.lines <- bytes.Clone(sc.Bytes())
		}
	}()
	tb.Cleanup(func() {
		h.stdin.Close()
		exited := make(chan error, 1)
		go func() {
			for range h.lines { // drain, so the reader can finish
			}
			exited <- h.cmd.Wait()
		}()
		select {
		case err := <-exited:
			if err != nil {
				tb.Errorf("helper exited: %v; stderr:\n%s", err, h.stderr.String())
			}
		case <-time.After(15 * time.Second):
			h.cmd.Process.Kill()
			<-exited
			tb.Errorf("helper did not exit within 15s; killed; stderr:\n%s", h.stderr.String())
		}
		<-done
	})

	hello := h.do(tb, request{Op: "hello"}, 10*time.Second)
	require.Empty(tb, hello.Err)
	want := "0::/" + filepath.Base(cg) + "\n"
	require.Contains(tb, hello.Output, want, "the helper runs in the test's cgroup")
	return h
}

// call sends req and waits at most wait for the answer. It does not fail
// the test, so that other goroutines may use it.
func (h *helper) call(req request, wait time.Duration) (response, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return response{}, err
	}
	if _, err := h.stdin.Write(append(b, '\n')); err != nil {
		return response{}, fmt.Errorf("%w: %v; stderr:\n%s", errHelperGone, err, h.stderr.String())
	}
	select {
	case line, ok := <-h.lines:
		if !ok {
			return response{}, fmt.Errorf("%w; stderr:\n%s", errHelperGone, h.stderr.String())
		}
		var resp response
		if err := json.Unmarshal(line, &resp); err != nil {
			return response{}, fmt.Errorf("helper answer %q: %w", line, err)
		}
		if resp.Err != "" {
			return resp, fmt.Errorf("helper %s: %s", req.Op, resp.Err)
		}
		return resp, nil
	case <-time.After(wait):
		return response{}, fmt.Errorf("helper did not answer %s within %s; stderr:\n%s", req.Op, wait, h.stderr.String())
	}
}

// do is call, failing tb on error.
func (h *helper) do(tb testing.TB, req request, wait time.Duration) response {
	tb.Helper()
	resp, err := h.call(req, wait)
	require.NoError(tb, err)
	return resp
}

// ---- cgroups and network namespaces ----

// childCgroup makes a fresh cgroup v2 directory, removed when tb ends.
func childCgroup(tb testing.TB) string {
	tb.Helper()
	mnt, err := bpf.CgroupV2Mount()
	if err != nil {
		requireOrSkip(tb, "no cgroup v2: %v", err)
	}
	dir, err := os.MkdirTemp(mnt, "actorlb-test-")
	require.NoError(tb, err)
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				return
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				tb.Errorf("remove cgroup %s: %v", dir, err)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return dir
}

// inNetNS runs fn on a thread in the network namespace nsPath; sockets fn
// creates stay in that namespace.
func inNetNS(nsPath string, fn func() error) error { return netns.Do(nsPath, fn) }

// ---- echo backends ----

// echo is a backend: TCP and/or UDP servers on one address and port that
// answer every line (TCP) or datagram (UDP) with "NAME " + what they got.
type echo struct {
	name string
	addr netip.AddrPort
	ln   net.Listener
	pc   *net.UDPConn
	wg   sync.WaitGroup
}

// startEcho starts an echo backend on ip (port chosen by the kernel) in
// the network namespace nsPath ("" for the test's own), closed when tb
// ends.
func startEcho(tb testing.TB, nsPath, name string, ip netip.Addr, tcp, udp bool) *echo {
	tb.Helper()
	return startEchoAt(tb, nsPath, name, netip.AddrPortFrom(ip, 0), tcp, udp)
}

// startEchoAt is startEcho on a given port (0: the kernel's choice); a
// replica of a backend in another network namespace takes its port.
func startEchoAt(tb testing.TB, nsPath, name string, ap netip.AddrPort, tcp, udp bool) *echo {
	tb.Helper()
	ip := ap.Addr()
	e := &echo{name: name}
	err := inNetNS(nsPath, func() error {
		var lastErr error
		for attempt := 0; attempt < 20; attempt++ {
			port := int(ap.Port())
			if tcp {
				ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
				if err != nil {
					return err
				}
				e.ln = ln
				port = ln.Addr().(*net.TCPAddr).Port
			}
			if udp {
				pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(port))))
				if err != nil {
					// The port is taken for UDP: try another.
					lastErr = err
					if e.ln != nil {
						e.ln.Close()
						e.ln = nil
					}
					continue
				}
				e.pc = pc
				port = pc.LocalAddr().(*net.UDPAddr).Port
			}
			e.addr = netip.AddrPortFrom(ip, uint16(port))
			return nil
		}
		return fmt.Errorf("no port free for both TCP and UDP: %w", lastErr)
	})
	require.NoError(tb, err, "start echo backend %s on %s", name, ip)
	if e.ln != nil {
		e.wg.Add(1)
		go e.serveTCP()
	}
	if e.pc != nil {
		e.wg.Add(1)
		go e.serveUDP()
	}
	tb.Cleanup(e.close)
	return e
}

func (e *echo) close() {
	if e.ln != nil {
		e.ln.Close()
	}
	if e.pc != nil {
		e.pc.Close()
	}
	e.wg.Wait()
}

func (e *echo) serveTCP() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer c.Close()
			// Every line until the client closes (a held connection
			// exchanges more than once) or stays idle for 30s.
			rd := bufio.NewReader(c)
			for {
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				line, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				if _, err := io.WriteString(c, e.name+" "+line); err != nil {
					return
				}
			}
		}()
	}
}

func (e *echo) serveUDP() {
	defer e.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := e.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		e.pc.WriteToUDPAddrPort(append([]byte(e.name+" "), buf[:n]...), from)
	}
}

// backend returns e as a backend of protocol proto in state st.
func (e *echo) backend(proto lb.L4Type, st lb.BackendState) lb.Backend {
	return lb.Backend{
		L3n4Addr: lb.L3n4Addr{Addr: e.addr.Addr(), Port: e.addr.Port(), Protocol: proto},
		Weight:   lb.DefaultBackendWeight,
		State:    st,
	}
}

// ---- the environment ----

// env is one test's world: maps pinned in a fresh bpffs directory, an
// engine writing them, the socket-LB programs attached to a fresh cgroup,
// and a helper client in that cgroup.
type env struct {
	t      testing.TB
	root   string
	cgroup string
	engine *actorlb.Engine
	helper *helper
	// netNS is where the backends must listen ("" for the host's).
	netNS string
	// dev is the namespace's device that carries its addresses (v0, or lo
	// without veth support).
	dev string
	rng *rand.Rand
	v6  bool
	// size is the capacity of every map (4096 unless a test grows it).
	size int
	// terminator is the engine's SocketTerminator (nil: none).
	terminator actorlb.SocketTerminator
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	l.SetOutput(os.Stderr)
	return l
}

// newEnv builds an env; with v6 the helper and the backends live in a new
// network namespace whose interfaces carry the backend addresses.
func newEnv(t testing.TB, v6 bool) *env {
	t.Helper()
	root := testutil.PinDir(t)
	e := &env{t: t, root: root, rng: testutil.Rand(t), v6: v6}
	e.cgroup = childCgroup(t)
	e.startEngine(t)
	info, err := bpf.Attach(bpf.Config{Root: root, Cgroup: e.cgroup})
	require.NoError(t, err)
	require.True(t, info.Attached(), info.String())
	t.Cleanup(func() {
		if err := bpf.Detach(root); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	e.helper = startHelper(t, e.cgroup, v6)
	if v6 {
		e.netNS = e.helper.NetNS
		e.setupNetNS()
	}
	return e
}

func (e *env) startEngine(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eng, err := actorlb.New(ctx, actorlb.Config{
		BPFRoot:          e.root,
		MaxEntries:       maps.Sizes{Services: cmp.Or(e.size, 4096), Backends: cmp.Or(e.size, 4096), RevNAT: cmp.Or(e.size, 4096), SourceRanges: cmp.Or(e.size, 4096)},
		Logger:           quietLogger(),
		SocketTerminator: e.terminator,
		// Tests here write map entries by hand (weights, affinity,
		// surrogates): a periodic reconcile would "repair" them mid-test.
		ReconcileInterval: -1,
	})
	require.NoError(t, err)
	e.engine = eng
	// Closed when the environment ends, not when the subtest that
	// (re)started it does: later subtests use it.
	e.t.Cleanup(func() { eng.Close() })
}

// restartEngine closes the engine and starts another on the same maps, as
// an agent restart does.
func (e *env) restartEngine(t testing.TB) {
	require.NoError(t, e.engine.Close())
	e.startEngine(t)
}

// v6Backends are the addresses of the IPv6 backends, on the namespace's
// veth (or, without veth support, its loopback).
var v6Backends = []netip.Addr{
	netip.MustParseAddr("fd00:db8:1::1"), netip.MustParseAddr("fd00:db8:1::2"),
	netip.MustParseAddr("fd00:db8:1::3"), netip.MustParseAddr("fd00:db8:1::4"),
	netip.MustParseAddr("fd00:db8:1::5"),
}

func (e *env) setupNetNS() {
	e.dev = setupNetNSOf(e.t, e.helper)
}

// setupNetNSOf configures the network namespace of helper h: loopback up,
// a veth pair (or, without veth support, loopback) carrying v6Backends.
// It returns the device.
func setupNetNSOf(t testing.TB, h *helper) string {
	if _, err := exec.LookPath("ip"); err != nil {
		requireOrSkip(t, "iproute2 not installed (the IPv6 test configures its namespace with ip): %v", err)
	}
	run := func(argv ...string) response {
		return h.do(t, request{Op: "exec", Argv: argv}, 30*time.Second)
	}
	run("ip", "link", "set", "lo", "up")
	dev := "v0"
	out := h.do(t, request{Op: "exec", Argv: []string{"sh", "-c", "ip link add v0 type veth peer name v1 && echo ok || true"}}, 30*time.Second)
	if strings.TrimSpace(out.Output) == "ok" {
		run("ip", "link", "set", "v1", "up")
		run("ip", "link", "set", "v0", "up")
	} else {
		t.Logf("no veth (%s): backend addresses go on the namespace's loopback", strings.TrimSpace(out.Output))
		dev = "lo"
	}
	for _, a := range v6Backends {
		run("ip", "-6", "addr", "add", a.String()+"/64", "dev", dev, "nodad")
	}
	t.Logf("network namespace %s: backends on %s", h.NetNS, dev)
	return dev
}

// vip returns a random VIP: in 127.200.0.0/16, or fd00:db8:ffff::/64 (a
// prefix with no route in the namespace, so an unserved VIP fails fast).
func (e *env) vip() netip.Addr {
	if e.v6 {
		var b [16]byte
		copy(b[:], netip.MustParseAddr("fd00:db8:ffff::").AsSlice())
		b[14], b[15] = byte(e.rng.IntN(256)), byte(e.rng.IntN(254)+1)
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{127, 200, byte(e.rng.IntN(256)), byte(e.rng.IntN(254) + 1)})
}

// backendIP returns the address of backend i (0-based).
func (e *env) backendIP(i int) netip.Addr {
	if e.v6 {
		return v6Backends[i]
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 2)})
}

// echoes starts n echo backends named prefix1..prefixN.
func (e *env) echoes(t testing.TB, prefix string, n int, tcp, udp bool) []*echo {
	var out []*echo
	for i := range n {
		out = append(out, startEcho(t, e.netNS, fmt.Sprintf("%s%d", prefix, i+1), e.backendIP(i), tcp, udp))
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// upsert creates or updates the service of frontend vip:port/proto.
func (e *env) upsert(t testing.TB, vip netip.Addr, port uint16, proto lb.L4Type, backends ...lb.Backend) lb.ServiceID {
	t.Helper()
	svc := &lb.Service{
		Frontend: lb.Frontend{L3n4Addr: lb.L3n4Addr{Addr: vip, Port: port, Protocol: proto}},
		Backends: backends,
	}
	id, _, err := e.engine.Upsert(ctxT(t), svc)
	require.NoError(t, err)
	return id
}

// upsertSvc creates or updates svc (a service of any type).
func (e *env) upsertSvc(t testing.TB, svc *lb.Service) lb.ServiceID {
	t.Helper()
	id, _, err := e.engine.Upsert(ctxT(t), svc)
	require.NoError(t, err)
	return id
}

// backendID returns the ID the engine gave the backend at ap.
func (e *env) backendID(t testing.TB, ap netip.AddrPort) uint32 {
	t.Helper()
	d, err := e.engine.DumpMaps(ctxT(t))
	require.NoError(t, err)
	for _, b := range append(d.Backends4, d.Backends6...) {
		if b.Value.Address == ap.Addr() && b.Value.Port == ap.Port() {
			return b.ID
		}
	}
	t.Fatalf("no backend %s in the maps", ap)
	return 0
}

// rawMaps opens the pinned LB maps beside the engine, for tests that write
// entries the engine would not (closed when t ends).
func (e *env) rawMaps(t testing.TB) *maps.LBMaps {
	t.Helper()
	size := cmp.Or(e.size, 4096)
	lbm, err := maps.Open(maps.Config{Root: e.root, MaxEntries: maps.Sizes{Services: size, Backends: size, RevNAT: size, SourceRanges: size}})
	require.NoError(t, err)
	t.Cleanup(func() { lbm.Close() })
	return lbm
}

func backends(es []*echo, proto lb.L4Type) []lb.Backend {
	var out []lb.Backend
	for _, x := range es {
		out = append(out, x.backend(proto, lb.BackendStateActive))
	}
	return out
}

func names(es ...*echo) []string {
	var out []string
	for _, x := range es {
		out = append(out, x.name)
	}
	return out
}

// chiSquare is Pearson's statistic of counts against a uniform spread over
// the named buckets (names not in counts count 0).
func chiSquare(counts map[string]int, buckets []string) float64 {
	total := 0
	for _, b := range buckets {
		total += counts[b]
	}
	exp := float64(total) / float64(len(buckets))
	var x float64
	for _, b := range buckets {
		d := float64(counts[b]) - exp
		x += d * d / exp
	}
	return x
}

// inBothFamilies runs f as two subtests, IPv4 (127.0.0.0/8 of the host)
// then IPv6 (a network namespace of the test's own), each with an
// environment of its own.
func inBothFamilies(t *testing.T, f func(t *testing.T, e *env)) {
	for _, fam := range []struct {
		name string
		v6   bool
	}{{"IPv4", false}, {"IPv6", true}} {
		t.Run(fam.name, func(t *testing.T) { f(t, newEnv(t, fam.v6)) })
	}
}
