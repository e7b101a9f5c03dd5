package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// What bounds the agent's resources: connections per listener (the
// listener wrapper), heavy requests at once (a semaphore), and memory
// given back to the system after large requests.

// limitListener lets at most n connections of l be open at once: Accept
// waits for one to close (the next connection waits in the kernel's listen
// backlog, holding no descriptor of the agent). Its connections also turn
// the plain-text errors net/http writes itself into the API's JSON form.
func limitListener(l net.Listener, n int) net.Listener {
	return &limitedListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &serverConn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// serverConn is one accepted connection: it frees its slot when closed.
type serverConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *serverConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// CloseWrite lets net/http half-close the connection after an error, as
// it does for a bare *net.TCPConn or *net.UnixConn.
func (c *serverConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainErrorHeaders are the headers net/http writes with the answers it
// gives itself to a request it cannot read (400 malformed, 431 headers too
// large, 501 unsupported transfer encoding, 505 HTTP version), in one
// write before closing.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// Write passes everything through except net/http's own plain-text error
// answers, which it rewrites as the API's errors: a JSON string.
func (c *serverConn) Write(b []byte) (int, error) {
	if out, ok := jsonLowLevelError(b); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// jsonLowLevelError rewrites one of net/http's own error answers; ok is
// false for anything else.
func jsonLowLevelError(b []byte) ([]byte, bool) {
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) || len(b) < 12 {
		return nil, false
	}
	i := bytes.Index(b, []byte(plainErrorHeaders))
	if i < 0 {
		return nil, false
	}
	code, err := strconv.Atoi(string(b[9:12]))
	if err != nil || (code != http.StatusBadRequest && code != http.StatusRequestHeaderFieldsTooLarge &&
		code != http.StatusNotImplemented && code != http.StatusHTTPVersionNotSupported) {
		return nil, false
	}
	text := strings.TrimSpace(string(b[i+len(plainErrorHeaders):]))
	text = strings.TrimPrefix(text, strconv.Itoa(code)+" ")
	if text == "Bad Request" {
		text += ": malformed request line or headers"
	}
	body, _ := json.Marshal("invalid HTTP request: " + text)
	body = append(body, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(body), body), true
}

// connInfo is what a handler knows about the connection of its request.
type connInfo struct {
	// tcp is false on a unix socket.
	tcp bool
	// local is the listener's address (IP:PORT on TCP).
	local string
}

type connKey struct{}

// withConnInfo is the server's ConnContext.
func withConnInfo(ctx context.Context, c net.Conn) context.Context {
	a := c.LocalAddr()
	return context.WithValue(ctx, connKey{}, connInfo{tcp: a.Network() != "unix", local: a.String()})
}

// guard refuses, on TCP connections, requests whose Host header names
// neither a loopback address, localhost nor the listener's address (a web
// page that rebinds its DNS name to 127.0.0.1 sends its own name) with
// 403, and requests without the bearer token with 401. Requests on the
// unix socket pass: its permissions decide who connects.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ci, _ := r.Context().Value(connKey{}).(connInfo)
		if ci.tcp {
			var code int
			var err error
			switch {
			case !hostAllowed(r.Host, ci.local):
				code, err = http.StatusForbidden, fmt.Errorf("forbidden Host header %q: the API on TCP answers only requests for localhost, a loopback address or its listen address %s", r.Host, ci.local)
			case s.token != "" && !tokenMatches(r.Header.Get("Authorization"), s.token):
				w.Header().Set("WWW-Authenticate", `Bearer realm="actorlb"`)
				code, err = http.StatusUnauthorized, ErrNoToken
				if r.Header.Get("Authorization") != "" {
					err = errWrongToken
				}
			}
			if err != nil {
				s.log.WithFields(logrus.Fields{"method": r.Method, "path": r.URL.Path, "remote": r.RemoteAddr, "status": code}).WithError(err).Debug("api request refused")
				w.Header().Set("Connection", "close") // the connection's slot is freed at once
				writeError(w, code, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether the Host header host names localhost, a
// loopback address or the listener's own address local.
func hostAllowed(host, local string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return false
	}
	if a.Unmap().IsLoopback() {
		return true
	}
	la, err := netip.ParseAddrPort(local)
	return err == nil && la.Addr().Unmap() == a.Unmap() && !a.IsUnspecified()
}

// tokenMatches reports whether the Authorization header carries token as
// a bearer token (compared in constant time).
func tokenMatches(header, token string) bool {
	const scheme = "bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(header[len(scheme):])), []byte(token)) == 1
}

// lightBody is the largest body of a PUT that needs no heavy-request slot:
// decoding it costs little, and the common small update must not wait
// behind large ones.
const lightBody = 64 << 10

// heavyOnly runs h once a heavy-request slot is free: it waits up to
// HeavyWait for one, then answers 429 with Retry-After. Bodies are read
// only with a slot, so waiting requests hold no decoded memory. A PUT
// whose Content-Length is at most lightBody needs no slot.
func (s *Server) heavyOnly(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request) reply {
		if r.Method == http.MethodPut && r.ContentLength >= 0 && r.ContentLength <= lightBody {
			return h(w, r) // net/http reads no more than Content-Length
		}
		if !s.acquireHeavy(r.Context()) {
			return reply{code: http.StatusTooManyRequests, retryAfter: 1,
				err: fmt.Errorf("busy: %d large requests (bodies, lists, map dumps) are served at once, the limit; retry after 1 s", cap(s.heavy))}
		}
		s.release.begin()
		defer func() {
			<-s.heavy
			s.release.done()
		}()
		return h(w, r)
	}
}

func (s *Server) acquireHeavy(ctx context.Context) bool {
	select {
	case s.heavy <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(HeavyWait)
	defer t.Stop()
	select {
	case s.heavy <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Memory given back: the Go runtime keeps the heap a burst of large
// requests grew for minutes before it returns it to the system; after
// such a burst (releaseDelay without a new large request) the server
// returns it at once.
const (
	// releaseAbove is the size of a body or answer that counts as large.
	releaseAbove = 256 << 10
	releaseDelay = 500 * time.Millisecond
)

type memRelease struct {
	mu      sync.Mutex
	large   bool // a large body or answer since the last release was planned
	active  int  // heavy requests running
	stopped bool
	timer   *time.Timer
}

func newMemRelease() *memRelease { return &memRelease{} }

// note records the size of a body read or an answer written.
func (m *memRelease) note(n int64) {
	if n < releaseAbove {
		return
	}
	m.mu.Lock()
	m.large = true
	m.mu.Unlock()
}

// begin is called when a heavy request starts.
func (m *memRelease) begin() {
	m.mu.Lock()
	m.active++
	m.mu.Unlock()
}

// done is called at the end of every heavy request: once none runs and one
// was large, the memory is given back releaseDelay later. (Waiting for the
// last one to end matters: a large answer still being written when the
// memory is given back keeps its buffers, and no later done would release
// them.)
func (m *memRelease) done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active--
	if !m.large || m.stopped || m.active > 0 {
		return
	}
	m.large = false
	if m.timer == nil {
		m.timer = time.AfterFunc(releaseDelay, debug.FreeOSMemory)
		return
	}
	m.timer.Reset(releaseDelay)
}

func (m *memRelease) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.timer != nil {
		m.timer.Stop()
	}
}

// trackConn is the server's ConnState hook: it keeps the connections that
// have not sent a request yet.
func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.silent[c] = struct{}{}
		return
	}
	delete(s.silent, c)
}

// closeSilentConns closes the connections that have not sent a request; it
// runs once Shutdown has closed the listeners.
func (s *Server) closeSilentConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.silent {
		c.Close()
		delete(s.silent, c)
	}
}
