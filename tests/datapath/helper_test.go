package datapath

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The helper is this test binary re-executed with helperEnv=1: it reads one
// JSON request per line on stdin, performs it with real sockets and answers
// one JSON response per line on stdout. It exits when stdin closes. The
// tests start it inside their cgroup (and network namespace), so its
// sockets are the ones the socket-LB programs see.
const helperEnv = "ACTORLB_DATAPATH_HELPER"

// request is one thing for the helper to do.
type request struct {
	// Op is "hello" (report the cgroup), "tcp" (N connects, each sending a
	// line and reading the backend's reply), "loop" (like tcp, until
	// Duration or N), "udp" (N datagrams from one unconnected socket),
	// "udp-connected" (N connected sockets, one datagram each),
	// "tcp-mapped" (N connects from a dual-stack IPv6 socket to the
	// IPv4-mapped form of Addr), "hold" (N connects that exchange a line
	// and stay open), "held" (one more exchange on every held connection),
	// "release" (close them), "netns-cookie" (SO_NETNS_COOKIE of a new
	// socket, in Output) or "exec" (run Argv).
	Op       string        `json:"op"`
	Addr     string        `json:"addr,omitempty"`
	N        int           `json:"n,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	// Timeout bounds each connect, send and receive.
	Timeout time.Duration `json:"timeout,omitempty"`
	Argv    []string      `json:"argv,omitempty"`
	// Bare connects and closes without exchanging data (benchmarks).
	Bare bool `json:"bare,omitempty"`
	// ID names a socket the helper keeps between requests (the "held-*"
	// ops of helper_held_test.go); Mapped makes it a dual-stack IPv6
	// socket connected to the IPv4-mapped form of Addr.
	ID     string `json:"id,omitempty"`
	Mapped bool   `json:"mapped,omitempty"`
}

// response is what the helper did.
type response struct {
	// Names counts the replies per backend name.
	Names map[string]int `json:"names,omitempty"`
	// Peers counts the peer addresses seen: getpeername for connected
	// sockets, the source of each reply for unconnected UDP.
	Peers  map[string]int `json:"peers,omitempty"`
	OK     int            `json:"ok"`
	Failed int            `json:"failed"`
	// Errors holds the first few distinct errors.
	Errors  []string      `json:"errors,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
	Output  string        `json:"output,omitempty"`
	// Err is set when the request itself could not be carried out.
	Err string `json:"err,omitempty"`
}

func (r *response) ok(name, peer string) {
	r.OK++
	if name != "" {
		r.Names[name]++
	}
	if peer != "" {
		r.Peers[peer]++
	}
}

func (r *response) fail(err error) {
	r.Failed++
	s := err.Error()
	if len(r.Errors) < 5 && !containsString(r.Errors, s) {
		r.Errors = append(r.Errors, s)
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// runHelper is the helper's main loop.
func runHelper() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		resp := response{Names: map[string]int{}, Peers: map[string]int{}}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp.Err = err.Error()
		} else {
			start := time.Now()
			serve(&req, &resp)
			resp.Elapsed = time.Since(start)
		}
		if err := out.Encode(&resp); err != nil {
			return 1
		}
	}
	return 0
}

func serve(req *request, resp *response) {
	if req.Timeout <= 0 {
		req.Timeout = 2 * time.Second
	}
	switch req.Op {
	case "hello":
		b, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			resp.Err = err.Error()
			return
		}
		resp.Output = string(b)
	case "exec":
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...).CombinedOutput()
		resp.Output = string(out)
		if err != nil {
			resp.Err = fmt.Sprintf("%s: %v: %s", strings.Join(req.Argv, " "), err, out)
		}
	case "tcp", "loop":
		n := req.N
		var deadline time.Time
		if req.Op == "loop" {
			deadline = time.Now().Add(req.Duration)
		}
		for i := 0; i < n; i++ {
			if !deadline.IsZero() && time.Now().After(deadline) {
				break
			}
			name, peer, err := tcpOnce(req.Addr, req.Timeout, req.Bare, i)
			if err != nil {
				resp.fail(err)
				continue
			}
			resp.ok(name, peer)
		}
	case "udp":
		udpUnconnected(req, resp)
	case "udp-connected":
		for i := 0; i < req.N; i++ {
			name, peer, err := udpConnectedOnce(req.Addr, req.Timeout, i)
			if err != nil {
				resp.fail(err)
				continue
			}
			resp.ok(name, peer)
		}
	case "tcp-mapped":
		for i := 0; i < req.N; i++ {
			name, peer, err := tcpMappedOnce(req.Addr, req.Timeout, i)
			if err != nil {
				resp.fail(err)
				continue
			}
			resp.ok(name, peer)
		}
	case "hold":
		for i := 0; i < req.N; i++ {
			c, err := net.DialTimeout("tcp", req.Addr, req.Timeout)
			if err != nil {
				resp.fail(err)
				continue
			}
			rd := bufio.NewReader(c)
			name, err := exchangeOn(c, rd, req.Timeout, i)
			if err != nil {
				c.Close()
				resp.fail(err)
				continue
			}
			held = append(held, heldConn{c: c, rd: rd, name: name})
			resp.ok(name, "")
		}
	case "held":
		for i, h := range held {
			name, err := exchangeOn(h.c, h.rd, req.Timeout, i)
			switch {
			case err != nil:
				resp.fail(err)
			case name != h.name:
				resp.fail(fmt.Errorf("held connection %d to %s answered by %s", i, h.name, name))
			default:
				resp.ok(name, "")
			}
		}
	case "release":
		for _, h := range held {
			h.c.Close()
		}
		held = nil
	case "netns-cookie":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			resp.Err = err.Error()
			return
		}
		defer unix.Close(fd)
		// The cookie bpf_get_netns_cookie returns for the namespace.
		b := make([]byte, 8)
		if err := getsockoptBytes(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE, b); err != nil {
			resp.Err = fmt.Sprintf("SO_NETNS_COOKIE: %v", err)
			return
		}
		resp.Output = strconv.FormatUint(binary.NativeEndian.Uint64(b), 10)
	default:
		if !serveHeld(req, resp) {
			resp.Err = fmt.Sprintf("unknown op %q", req.Op)
		}
	}
}

// peerName calls getpeername(2) on the connection's socket.
func peerName(c syscall.Conn) (string, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return "", err
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		return "", err
	}
	if serr != nil {
		return "", fmt.Errorf("getpeername: %w", serr)
	}
	return sockaddrString(sa), nil
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return fmt.Sprintf("%v", sa)
}

// heldConn is a connection the helper keeps open between requests.
type heldConn struct {
	c    net.Conn
	rd   *bufio.Reader
	name string
}

// held are the connections of "hold", until "release".
var held []heldConn

func getsockoptBytes(fd, level, opt int, b []byte) error {
	l := uint32(len(b))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// exchangeOn is exchange on a connection read through rd (which may hold
// buffered data across exchanges).
func exchangeOn(c net.Conn, rd *bufio.Reader, timeout time.Duration, i int) (string, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("ping-%d", i)
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read reply: %w", err)
	}
	name, echoed, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if !ok || echoed != msg {
		return "", fmt.Errorf("bad reply %q to %q", line, msg)
	}
	return name, nil
}

// exchange sends one line and returns the backend's name from its reply
// "NAME LINE".
func exchange(c net.Conn, timeout time.Duration, i int) (string, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("ping-%d", i)
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read reply: %w", err)
	}
	name, echoed, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	if !ok || echoed != msg {
		return "", fmt.Errorf("bad reply %q to %q", line, msg)
	}
	return name, nil
}

func tcpOnce(addr string, timeout time.Duration, bare bool, i int) (string, string, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return "", "", err
	}
	tc := c.(*net.TCPConn)
	defer tc.Close()
	// Reset on close: no TIME_WAIT to run out of ports in long loops.
	_ = tc.SetLinger(0)
	if bare {
		return "", "", nil
	}
	peer, err := peerName(tc)
	if err != nil {
		return "", "", err
	}
	name, err := exchange(tc, timeout, i)
	return name, peer, err
}

func udpUnconnected(req *request, resp *response) {
	target, err := netip.ParseAddrPort(req.Addr)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	network, local := "udp4", "127.0.0.1:0"
	if target.Addr().Is6() {
		network, local = "udp6", "[::]:0"
	}
	laddr, _ := net.ResolveUDPAddr(network, local)
	c, err := net.ListenUDP(network, laddr)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	defer c.Close()
	buf := make([]byte, 1500)
	for i := 0; i < req.N; i++ {
		msg := fmt.Sprintf("ping-%d", i)
		if _, err := c.WriteToUDPAddrPort([]byte(msg), target); err != nil {
			resp.fail(fmt.Errorf("send: %w", err))
			continue
		}
		deadline := time.Now().Add(req.Timeout)
		for {
			if err := c.SetReadDeadline(deadline); err != nil {
				resp.fail(err)
				break
			}
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				resp.fail(fmt.Errorf("receive: %w", err))
				break
			}
			name, echoed, ok := strings.Cut(string(buf[:n]), " ")
			if !ok || echoed != msg {
				continue // a late reply to an earlier datagram
			}
			resp.ok(name, from.String())
			break
		}
	}
}

func udpConnectedOnce(addr string, timeout time.Duration, i int) (string, string, error) {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	uc := c.(*net.UDPConn)
	peer, err := peerName(uc)
	if err != nil {
		return "", "", err
	}
	if err := uc.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", "", err
	}
	msg := fmt.Sprintf("ping-%d", i)
	if _, err := uc.Write([]byte(msg)); err != nil {
		return "", "", fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 1500)
	n, err := uc.Read(buf)
	if err != nil {
		return "", "", fmt.Errorf("receive: %w", err)
	}
	name, echoed, ok := strings.Cut(string(buf[:n]), " ")
	if !ok || echoed != msg {
		return "", "", fmt.Errorf("bad reply %q to %q", buf[:n], msg)
	}
	return name, peer, nil
}

// tcpMappedOnce connects a dual-stack IPv6 socket to ::ffff:a.b.c.d, the
// IPv4-mapped form of the IPv4 address addr.
func tcpMappedOnce(addr string, timeout time.Duration, i int) (string, string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", "", err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", "", fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "tcp6-mapped")
	defer f.Close()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return "", "", fmt.Errorf("clear IPV6_V6ONLY: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(ap.Addr().As16()).As16()}
	if err := unix.Connect(fd, sa); err != nil {
		return "", "", fmt.Errorf("connect %s: %w", netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ap.Port()), err)
	}
	psa, err := unix.Getpeername(fd)
	if err != nil {
		return "", "", fmt.Errorf("getpeername: %w", err)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	name, err := exchange(c, timeout, i)
	return name, sockaddrString(psa), err
}

// errHelperGone is returned when the helper process stopped answering.
var errHelperGone = errors.New("helper gone")
