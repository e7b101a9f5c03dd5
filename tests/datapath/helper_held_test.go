package datapath

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/sys/unix"
)

// Held sockets: connected UDP sockets the helper keeps open between
// requests, so that a test can act (remove a backend, terminate sockets)
// while a client holds its socket. They are raw file descriptors, so that
// every error is the system call's own errno. Only the helper's request
// loop uses them (one goroutine).
//
// Ops: "held-open" (ID, Addr, Mapped: a new socket connected to Addr; one
// exchange, whose backend and peer are reported), "held-ping" (ID, N: N
// exchanges), "held-recv" (ID: one receive, nothing sent), "held-connect"
// (ID, Addr: connect the same socket again), "held-close" (ID).
var heldSockets = map[string]*heldSocket{}

type heldSocket struct {
	fd     int
	mapped bool
	n      int // exchanges so far, numbering the messages
}

// serveHeld serves the held-* ops; false for any other op.
func serveHeld(req *request, resp *response) bool {
	if !strings.HasPrefix(req.Op, "held-") {
		return false
	}
	if req.ID == "" {
		resp.Err = "held socket op without an id"
		return true
	}
	s := heldSockets[req.ID]
	if req.Op != "held-open" && s == nil {
		resp.Err = fmt.Sprintf("no held socket %q", req.ID)
		return true
	}
	switch req.Op {
	case "held-open":
		if s != nil {
			resp.Err = fmt.Sprintf("held socket %q exists", req.ID)
			return true
		}
		s, err := openHeld(req)
		if err != nil {
			resp.Err = err.Error()
			return true
		}
		heldSockets[req.ID] = s
		s.exchange(req, resp)
	case "held-ping":
		for range max(req.N, 1) {
			s.exchange(req, resp)
		}
	case "held-recv":
		if _, err := s.recv(); err != nil {
			resp.fail(fmt.Errorf("receive: %w", err))
			return true
		}
		resp.ok("", "")
	case "held-connect":
		if err := s.connect(req.Addr); err != nil {
			resp.fail(err)
			return true
		}
		resp.ok("", "")
	case "held-close":
		unix.Close(s.fd)
		delete(heldSockets, req.ID)
	default:
		resp.Err = fmt.Sprintf("unknown op %q", req.Op)
	}
	return true
}

func openHeld(req *request) (*heldSocket, error) {
	family := unix.AF_INET
	if req.Mapped || strings.HasPrefix(req.Addr, "[") {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	s := &heldSocket{fd: fd, mapped: req.Mapped}
	if req.Mapped {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("clear IPV6_V6ONLY: %w", err)
		}
	}
	tv := unix.NsecToTimeval(req.Timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("SO_RCVTIMEO: %w", err)
	}
	if err := s.connect(req.Addr); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// connect connects the socket to addr (as ::ffff:a.b.c.d if it is a
// dual-stack socket).
func (s *heldSocket) connect(addr string) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	var sa unix.Sockaddr
	if s.mapped || ap.Addr().Is6() {
		sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	} else {
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	if err := unix.Connect(s.fd, sa); err != nil {
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	return nil
}

func (s *heldSocket) recv() ([]byte, error) {
	buf := make([]byte, 1500)
	for {
		n, err := unix.Read(s.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// exchange sends one datagram and reads the reply "NAME MSG".
func (s *heldSocket) exchange(req *request, resp *response) {
	s.n++
	msg := fmt.Sprintf("held-%s-%d", req.ID, s.n)
	if _, err := unix.Write(s.fd, []byte(msg)); err != nil {
		resp.fail(fmt.Errorf("send: %w", err))
		return
	}
	for {
		b, err := s.recv()
		if err != nil {
			resp.fail(fmt.Errorf("receive: %w", err))
			return
		}
		name, echoed, ok := strings.Cut(string(b), " ")
		if !ok || echoed != msg {
			continue // a late reply to an earlier datagram
		}
		peer := ""
		if sa, err := unix.Getpeername(s.fd); err == nil {
			peer = sockaddrString(sa)
		}
		resp.ok(name, peer)
		return
	}
}
