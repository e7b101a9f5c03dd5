package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/bpf"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
)

// Connected UDP sockets move off a removed backend: once the backend is
// out of the service, TerminateUDPSockets destroys the sockets that reached
// it through the VIP (their owner gets ECONNABORTED), the clients connect
// again and reach a remaining backend; a socket connected straight to the
// backend, and the sockets on the other backend, keep working.
func TestUDPSocketsMoveOffARemovedBackend(t *testing.T) {
	inBothFamilies(t, func(t *testing.T, e *env) {
		e.testUDPTermination(t)
	})
}

// heldClient is a connected UDP socket the helper keeps open.
type heldClient struct {
	id      string
	mapped  bool
	backend string // the backend that answered it
}

func (e *env) testUDPTermination(t *testing.T) {
	bs := e.echoes(t, "term", 2, false, true)
	a, b := bs[0], bs[1]
	vip := e.vip()
	const port = 53
	id := e.upsert(t, vip, port, lb.UDP, backends(bs, lb.UDP)...)
	target := addr(vip, port)

	// Clients through the VIP until both backends have some (and, for
	// IPv4, dual-stack sockets naming ::ffff:VIP landed on a too). The
	// choice is the datapath's random pick: 200 tries fail to cover both
	// with probability about 2^-100.
	var clients []heldClient
	covered := func() bool {
		var onA, onB, mappedOnA bool
		for _, c := range clients {
			onA = onA || c.backend == a.name
			onB = onB || c.backend == b.name
			mappedOnA = mappedOnA || (c.mapped && c.backend == a.name)
		}
		return onA && onB && (e.v6 || mappedOnA)
	}
	for i := 0; i < 200 && !covered(); i++ {
		c := heldClient{id: fmt.Sprintf("vip%d", i), mapped: !e.v6 && i%2 == 1}
		r := e.ask(t, request{Op: "held-open", ID: c.id, Addr: target, Mapped: c.mapped})
		require.Equal(t, 1, r.OK, "client %s: %v", c.id, r.Errors)
		peer := target
		if c.mapped {
			peer = addr(netip.AddrFrom16(vip.As16()), port)
		}
		require.Equal(t, map[string]int{peer: 1}, r.Peers, "getpeername shows the VIP")
		for name := range r.Names {
			c.backend = name
		}
		clients = append(clients, c)
	}
	require.True(t, covered(), "clients never covered both backends: %v", clients)
	onA := 0
	for _, c := range clients {
		if c.backend == a.name {
			onA++
		}
	}
	// A socket connected straight to a (no VIP): not the socket LB's.
	r := e.ask(t, request{Op: "held-open", ID: "direct", Addr: a.addr.String()})
	require.Equal(t, map[string]int{a.name: 1}, r.Names, "%v", r.Errors)

	// The same socket keeps its backend: a is still in service.
	for _, c := range clients {
		r := e.ask(t, request{Op: "held-ping", ID: c.id, N: 3})
		require.Equal(t, map[string]int{c.backend: 3}, r.Names, "client %s: %v", c.id, r.Errors)
	}

	// a leaves the service. The connected sockets would go on talking to
	// it (that is the bug): terminate them.
	e.upsert(t, vip, port, lb.UDP, b.backend(lb.UDP, lb.BackendStateActive))
	r = e.ask(t, request{Op: "held-ping", ID: clients[indexOn(clients, a.name)].id})
	require.Equal(t, map[string]int{a.name: 1}, r.Names, "before termination the socket still reaches a: %v", r.Errors)

	// Only sockets of the service named are destroyed: none through
	// another service's VIP.
	require.Zero(t, e.terminateOf(t, bpf.UDPTarget{Backend: a.addr, Service: id + 1}))
	var n int
	if e.v6 {
		n = e.terminate(t, a.addr) // any service
	} else {
		n = e.terminateOf(t, bpf.UDPTarget{Backend: a.addr, Service: id})
	}
	t.Logf("%d clients through the VIP, %d on %s: %d sockets destroyed", len(clients), onA, a.name, n)
	require.Equal(t, onA, n, "every socket on a through the VIP, and only those, destroyed")

	for _, c := range clients {
		if c.backend != a.name {
			r := e.ask(t, request{Op: "held-ping", ID: c.id, N: 2})
			require.Equal(t, map[string]int{b.name: 2}, r.Names, "client %s on b is left alone: %v", c.id, r.Errors)
			continue
		}
		// The owner learns it on its next receive...
		r := e.ask(t, request{Op: "held-recv", ID: c.id})
		require.Equal(t, 1, r.Failed, "client %s", c.id)
		require.Contains(t, r.Errors[0], syscall.ECONNABORTED.Error(), "client %s", c.id)
		// ...and the socket is no longer connected.
		r = e.ask(t, request{Op: "held-ping", ID: c.id})
		require.Equal(t, 1, r.Failed, "client %s", c.id)
		require.Contains(t, r.Errors[0], syscall.EDESTADDRREQ.Error(), "client %s", c.id)
		// Connecting again goes through the socket LB: b.
		r = e.ask(t, request{Op: "held-connect", ID: c.id, Addr: target})
		require.Equal(t, 1, r.OK, "client %s: %v", c.id, r.Errors)
		r = e.ask(t, request{Op: "held-ping", ID: c.id, N: 3})
		require.Equal(t, map[string]int{b.name: 3}, r.Names, "client %s after reconnecting: %v", c.id, r.Errors)
	}
	r = e.ask(t, request{Op: "held-ping", ID: "direct", N: 2})
	require.Equal(t, map[string]int{a.name: 2}, r.Names, "the socket connected straight to a is left alone: %v", r.Errors)

	// Nothing left to destroy.
	require.Zero(t, e.terminate(t, a.addr))
	for _, c := range append(clients, heldClient{id: "direct"}) {
		e.ask(t, request{Op: "held-close", ID: c.id})
	}
}

func indexOn(clients []heldClient, backend string) int {
	for i, c := range clients {
		if c.backend == backend {
			return i
		}
	}
	return -1
}

// terminate runs bpf.TerminateUDPSockets in the helper's network namespace
// (the iterator walks the sockets of the caller's).
func (e *env) terminate(t *testing.T, backends ...netip.AddrPort) int {
	t.Helper()
	return e.terminateWith(t, func() (int, error) { return bpf.TerminateUDPSockets(e.root, backends) })
}

// terminateOf is terminate with bpf.TerminateUDPSocketsOf.
func (e *env) terminateOf(t *testing.T, targets ...bpf.UDPTarget) int {
	t.Helper()
	return e.terminateWith(t, func() (int, error) { return bpf.TerminateUDPSocketsOf(e.root, targets) })
}

func (e *env) terminateWith(t *testing.T, call func() (int, error)) int {
	t.Helper()
	var n int
	err := inNetNS(e.netNS, func() error {
		var err error
		n, err = call()
		return err
	})
	if errors.Is(err, bpf.ErrSockDestroyNotSupported) {
		requireOrSkip(t, "%v", err)
	}
	require.NoError(t, err)
	return n
}

func (c heldClient) String() string {
	if c.mapped {
		return c.id + "→" + c.backend + " (mapped)"
	}
	return c.id + "→" + c.backend
}

// The engine does it by itself: with Config.SocketTerminator set to the
// datapath's (as the agent sets it), taking a backend out of a UDP service
// is enough; the sockets on it are closed once the service map no longer
// offers it, and counted in the engine's stats.
func TestEngineClosesTheUDPSocketsOfARemovedBackend(t *testing.T) {
	e := newEnv(t, false)
	e.terminator = func(ts []actorlb.SocketTarget) (int, error) {
		targets := make([]bpf.UDPTarget, len(ts))
		for i, x := range ts {
			targets[i] = bpf.UDPTarget{Backend: x.Backend.AddrPort(), Service: x.Service}
		}
		var n int
		// The helper's sockets live in its network namespace; the agent's
		// clients live in its own.
		err := inNetNS(e.netNS, func() error {
			var err error
			n, err = bpf.TerminateUDPSocketsOf(e.root, targets)
			return err
		})
		return n, err
	}
	e.restartEngine(t)
	bs := e.echoes(t, "eterm", 2, false, true)
	a, b := bs[0], bs[1]
	vip := e.vip()
	target := addr(vip, 53)
	e.upsert(t, vip, 53, lb.UDP, backends(bs, lb.UDP)...)
	var onA, onB []string
	for i := 0; i < 200 && (len(onA) == 0 || len(onB) == 0); i++ {
		id := fmt.Sprintf("e%d", i)
		r := e.ask(t, request{Op: "held-open", ID: id, Addr: target})
		require.Equal(t, 1, r.OK, "%v", r.Errors)
		if r.Names[a.name] == 1 {
			onA = append(onA, id)
		} else {
			onB = append(onB, id)
		}
	}
	require.NotEmpty(t, onA)
	require.NotEmpty(t, onB)

	e.upsert(t, vip, 53, lb.UDP, b.backend(lb.UDP, lb.BackendStateActive))
	var st actorlb.Stats
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		st, err = e.engine.Stats(ctxT(t))
		require.NoError(t, err)
		if st.SocketsTerminated >= uint64(len(onA)) || st.SocketTerminateFailures > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, st.LastSocketTerminateError)
	require.Equal(t, uint64(len(onA)), st.SocketsTerminated, "every socket on %s, and only those", a.name)
	for _, id := range onA {
		r := e.ask(t, request{Op: "held-recv", ID: id})
		require.Equal(t, 1, r.Failed, "client %s", id)
		require.Contains(t, r.Errors[0], syscall.ECONNABORTED.Error(), "client %s", id)
		r = e.ask(t, request{Op: "held-connect", ID: id, Addr: target})
		require.Equal(t, 1, r.OK, "client %s: %v", id, r.Errors)
		r = e.ask(t, request{Op: "held-ping", ID: id, N: 2})
		require.Equal(t, map[string]int{b.name: 2}, r.Names, "client %s after reconnecting: %v", id, r.Errors)
	}
	for _, id := range onB {
		r := e.ask(t, request{Op: "held-ping", ID: id, N: 2})
		require.Equal(t, map[string]int{b.name: 2}, r.Names, "client %s on %s is left alone: %v", id, b.name, r.Errors)
	}
	for _, id := range append(onA, onB...) {
		e.ask(t, request{Op: "held-close", ID: id})
	}
}
