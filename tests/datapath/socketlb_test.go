package datapath

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actorlb/actorlb/bpf"
	"github.com/actorlb/actorlb/internal/verify"
	lb "github.com/actorlb/actorlb/loadbalancer"
	lbmaps "github.com/actorlb/actorlb/maps"
	"github.com/stretchr/testify/require"
)

// chiSquareBound is the χ² value that a uniform spread over 3 buckets (2
// degrees of freedom) exceeds with probability 1e-6: for 2 degrees of
// freedom P(χ² > x) = exp(-x/2), so x = 2·ln(1e6) ≈ 27.6.
const chiSquareBound = 27.6

// Every scenario runs for IPv4 on 127.0.0.0/8 of the host and for IPv6 in a
// network namespace of the test's own.
func TestSocketLB(t *testing.T) {
	inBothFamilies(t, func(t *testing.T, e *env) {
		t.Run("TCPSpreadsOverEveryBackend", e.testTCPSpread)
		t.Run("UDPRepliesComeFromTheVIP", e.testUDP)
		t.Run("RemovedTerminatingMaintenanceGetNothing", e.testBackendStates)
		t.Run("ExactProtocolBeforeAny", e.testProtoAny)
		t.Run("DeletedServiceIsUnanswered", e.testDelete)
		t.Run("NoUsableBackendRefuses", e.testNoBackendRefuses)
		t.Run("ZeroFailuresUnderChurn", e.testChurn)
		t.Run("ZeroFailuresAcrossAgentRestartAndReattach", e.testRestart)
		t.Run("ZeroFailuresWhileTheMapsAreResized", e.testResize)
	})
}

// ask runs a helper request; Timeout per operation defaults to 2s.
func (e *env) ask(t *testing.T, req request) response {
	t.Helper()
	wait := 60 * time.Second
	if req.Duration > 0 {
		wait += req.Duration
	}
	return e.helper.do(t, req, wait)
}

func addr(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// N TCP connects through the VIP reach every backend, spread evenly; each
// connected socket's getpeername is the VIP.
func (e *env) testTCPSpread(t *testing.T) {
	bs := e.echoes(t, "spread", 3, true, false)
	vip := e.vip()
	e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)
	const n = 600
	r := e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: n})
	require.Equal(t, n, r.OK, "failed: %d %v", r.Failed, r.Errors)
	require.ElementsMatch(t, names(bs...), slices.Collect(maps.Keys(r.Names)), "every backend answered: %v", r.Names)
	x := chiSquare(r.Names, names(bs...))
	t.Logf("%d connects: %v, χ² = %.2f (bound %.1f)", n, r.Names, x, chiSquareBound)
	require.Less(t, x, chiSquareBound, "spread %v is not uniform", r.Names)
	require.Equal(t, map[string]int{addr(vip, 80): n}, r.Peers, "getpeername shows the VIP")

	if !e.v6 {
		// A dual-stack IPv6 socket naming the VIP as ::ffff:a.b.c.d.
		r := e.ask(t, request{Op: "tcp-mapped", Addr: addr(vip, 80), N: 60})
		require.Equal(t, 60, r.OK, "failed: %v", r.Errors)
		require.Len(t, r.Names, 3, "%v", r.Names)
		mapped := netip.AddrFrom16(vip.As16())
		require.Equal(t, map[string]int{addr(mapped, 80): 60}, r.Peers)
	}
}

// Unconnected UDP: the replies' source is the VIP. Connected UDP:
// getpeername is the VIP.
func (e *env) testUDP(t *testing.T) {
	bs := e.echoes(t, "udp", 3, false, true)
	vip := e.vip()
	e.upsert(t, vip, 53, lb.UDP, backends(bs, lb.UDP)...)
	r := e.ask(t, request{Op: "udp", Addr: addr(vip, 53), N: 90})
	require.Equal(t, 90, r.OK, "failed: %v", r.Errors)
	require.ElementsMatch(t, names(bs...), slices.Collect(maps.Keys(r.Names)), "%v", r.Names)
	require.Equal(t, map[string]int{addr(vip, 53): 90}, r.Peers, "every reply comes from the VIP")

	r = e.ask(t, request{Op: "udp-connected", Addr: addr(vip, 53), N: 60})
	require.Equal(t, 60, r.OK, "failed: %v", r.Errors)
	require.Len(t, r.Names, 3, "%v", r.Names)
	require.Equal(t, map[string]int{addr(vip, 53): 60}, r.Peers, "getpeername shows the VIP")
}

// A removed backend, a terminating one and one in maintenance get no new
// connections.
func (e *env) testBackendStates(t *testing.T) {
	bs := e.echoes(t, "state", 3, true, false)
	vip := e.vip()
	e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)
	r := e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 60})
	require.Len(t, r.Names, 3, "%v", r.Names)

	// Remove state3.
	e.upsert(t, vip, 80, lb.TCP, backends(bs[:2], lb.TCP)...)
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 150})
	require.Equal(t, 150, r.OK, "failed: %v", r.Errors)
	require.ElementsMatch(t, names(bs[:2]...), slices.Collect(maps.Keys(r.Names)), "removed backend got connections: %v", r.Names)

	// state2 terminating, state3 back in maintenance.
	e.upsert(t, vip, 80, lb.TCP,
		bs[0].backend(lb.TCP, lb.BackendStateActive),
		bs[1].backend(lb.TCP, lb.BackendStateTerminating),
		bs[2].backend(lb.TCP, lb.BackendStateMaintenance))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 150})
	require.Equal(t, 150, r.OK, "failed: %v", r.Errors)
	require.Equal(t, map[string]int{bs[0].name: 150}, r.Names, "only the active backend gets new connections")

	// With no active backend left, the master counts the terminating ones
	// (the layouts' rule, upstream's graceful termination) and they serve;
	// maintenance still gets nothing.
	e.upsert(t, vip, 80, lb.TCP,
		bs[0].backend(lb.TCP, lb.BackendStateTerminating),
		bs[1].backend(lb.TCP, lb.BackendStateTerminating),
		bs[2].backend(lb.TCP, lb.BackendStateMaintenance))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 60})
	require.Equal(t, 60, r.OK, "failed: %v", r.Errors)
	require.ElementsMatch(t, names(bs[:2]...), slices.Collect(maps.Keys(r.Names)), "%v", r.Names)
}

// A frontend with the socket's protocol wins over one with protocol "any";
// without it, "any" serves both TCP and UDP.
func (e *env) testProtoAny(t *testing.T) {
	exact := e.echoes(t, "exact", 1, true, false)[0]
	anyBe := startEcho(t, e.netNS, "any1", e.backendIP(1), true, true)
	vip := e.vip()
	tcpID := e.upsert(t, vip, 80, lb.TCP, exact.backend(lb.TCP, lb.BackendStateActive))
	e.upsert(t, vip, 80, lb.ANY, anyBe.backend(lb.ANY, lb.BackendStateActive))

	r := e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 20})
	require.Equal(t, map[string]int{"exact1": 20}, r.Names)
	r = e.ask(t, request{Op: "udp", Addr: addr(vip, 80), N: 20})
	require.Equal(t, map[string]int{"any1": 20}, r.Names, "errors: %v", r.Errors)
	require.Equal(t, map[string]int{addr(vip, 80): 20}, r.Peers)

	require.NoError(t, e.engine.Delete(ctxT(t), tcpID))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 20})
	require.Equal(t, map[string]int{"any1": 20}, r.Names, "errors: %v", r.Errors)
	require.Equal(t, map[string]int{addr(vip, 80): 20}, r.Peers)
}

// Deleting the service leaves the VIP unanswered: TCP connects are
// refused (IPv4: 127.200/16 is local, nobody listens) or unreachable
// (IPv6: no route), UDP gets no reply.
func (e *env) testDelete(t *testing.T) {
	bs := e.echoes(t, "del", 2, true, true)
	vip := e.vip()
	tcpID := e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)
	udpID := e.upsert(t, vip, 53, lb.UDP, backends(bs, lb.UDP)...)
	r := e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 10})
	require.Equal(t, 10, r.OK)
	r = e.ask(t, request{Op: "udp", Addr: addr(vip, 53), N: 10})
	require.Equal(t, 10, r.OK)

	require.NoError(t, e.engine.Delete(ctxT(t), tcpID))
	require.NoError(t, e.engine.Delete(ctxT(t), udpID))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, 80), N: 5, Timeout: time.Second})
	require.Equal(t, 5, r.Failed, "the VIP still answers: %v", r.Names)
	want := "connection refused"
	if e.v6 {
		want = "network is unreachable"
	}
	require.Len(t, r.Errors, 1)
	require.Contains(t, r.Errors[0], want)
	r = e.ask(t, request{Op: "udp", Addr: addr(vip, 53), N: 3, Timeout: 300 * time.Millisecond})
	require.Equal(t, 3, r.Failed, "the VIP still answers: %v", r.Names)
}

// A service with no usable backend (none, or only maintenance ones: the
// master's count is 0) refuses connects and sends with EPERM instead of
// letting them reach the VIP untranslated, although something listens
// there; once the service is deleted, the VIP is reached again.
func (e *env) testNoBackendRefuses(t *testing.T) {
	be := e.echoes(t, "usable", 1, true, true)[0]
	// The "VIP" is a local address where a server listens.
	self := startEcho(t, e.netNS, "vipself", e.backendIP(4), true, true)
	vip, port := self.addr.Addr(), self.addr.Port()
	const eperm = "operation not permitted"
	refused := func(what string) {
		t.Helper()
		r := e.ask(t, request{Op: "tcp", Addr: addr(vip, port), N: 5, Timeout: time.Second})
		require.Equal(t, 5, r.Failed, "%s: connects succeeded: %v", what, r.Names)
		require.Len(t, r.Errors, 1, "%v", r.Errors)
		require.Contains(t, r.Errors[0], eperm, what)
		r = e.ask(t, request{Op: "udp", Addr: addr(vip, port), N: 3, Timeout: 300 * time.Millisecond})
		require.Equal(t, 3, r.Failed, "%s: sends answered: %v", what, r.Names)
		require.Contains(t, r.Errors[0], eperm, what)
		r = e.ask(t, request{Op: "udp-connected", Addr: addr(vip, port), N: 3, Timeout: 300 * time.Millisecond})
		require.Equal(t, 3, r.Failed, "%s: connected UDP answered: %v", what, r.Names)
		require.Contains(t, r.Errors[0], eperm, what)
	}
	r := e.ask(t, request{Op: "tcp", Addr: addr(vip, port), N: 3})
	require.Equal(t, map[string]int{"vipself": 3}, r.Names, "before the service: %v", r.Errors)

	id := e.upsert(t, vip, port, lb.ANY)
	refused("no backend")
	e.upsert(t, vip, port, lb.ANY, be.backend(lb.ANY, lb.BackendStateMaintenance))
	refused("only a maintenance backend")
	e.upsert(t, vip, port, lb.ANY, be.backend(lb.ANY, lb.BackendStateActive))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, port), N: 10})
	require.Equal(t, map[string]int{be.name: 10}, r.Names, "errors: %v", r.Errors)
	r = e.ask(t, request{Op: "udp", Addr: addr(vip, port), N: 10})
	require.Equal(t, map[string]int{be.name: 10}, r.Names, "errors: %v", r.Errors)

	require.NoError(t, e.engine.Delete(ctxT(t), id))
	r = e.ask(t, request{Op: "tcp", Addr: addr(vip, port), N: 3})
	require.Equal(t, map[string]int{"vipself": 3}, r.Names, "no service, no translation: %v", r.Errors)
}

// A connect loop through the VIP while the service's backend set changes
// all the time (growing, shrinking, swapping) sees no failed connect.
func (e *env) testChurn(t *testing.T) {
	bs := e.echoes(t, "churn", 4, true, false)
	vip := e.vip()
	e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)

	const loopFor = 3 * time.Second
	var r response
	var rerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, rerr = e.helper.call(request{Op: "loop", Addr: addr(vip, 80), N: 50000, Duration: loopFor}, loopFor+60*time.Second)
	}()
	upserts := 0
	sets := map[string]bool{}
	deadline := time.Now().Add(loopFor + 30*time.Second)
loop:
	for upserts < 20000 && time.Now().Before(deadline) {
		select {
		case <-done:
			break loop
		default:
		}
		var set []lb.Backend
		var key []string
		for _, b := range bs {
			if e.rng.IntN(2) == 0 {
				set = append(set, b.backend(lb.TCP, lb.BackendStateActive))
				key = append(key, b.name)
			}
		}
		if len(set) == 0 {
			i := e.rng.IntN(len(bs))
			set = append(set, bs[i].backend(lb.TCP, lb.BackendStateActive))
			key = append(key, bs[i].name)
		}
		e.upsert(t, vip, 80, lb.TCP, set...)
		sets[strings.Join(key, ",")] = true
		upserts++
		time.Sleep(200 * time.Microsecond) // churn all along the loop, not in a burst
	}
	<-done
	require.NoError(t, rerr)
	t.Logf("%d connects, %d failed, during %d upserts over %d distinct backend sets; spread %v", r.OK+r.Failed, r.Failed, upserts, len(sets), r.Names)
	require.Zero(t, r.Failed, "failed connects during churn: %v", r.Errors)
	require.GreaterOrEqual(t, upserts, 20, "too little churn to mean anything")
	require.GreaterOrEqual(t, r.OK, 100, "too few connects to mean anything")
	require.Len(t, r.Names, 4, "every backend served during churn: %v", r.Names)
}

// The links outlive the agent: restarting the engine (maps restored from
// the pins) and re-attaching (links updated in place to new programs)
// while a connect loop runs costs no connect.
func (e *env) testRestart(t *testing.T) {
	bs := e.echoes(t, "restart", 2, true, false)
	vip := e.vip()
	e.upsert(t, vip, 80, lb.TCP, backends(bs, lb.TCP)...)

	var r response
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, rerr = e.helper.call(request{Op: "loop", Addr: addr(vip, 80), N: 50000, Duration: 2 * time.Second}, 62*time.Second)
	}()
	defer wg.Wait()
	before, err := bpf.Status(e.root)
	require.NoError(t, err)
	for i := range 3 {
		e.restartEngine(t)
		info, err := bpf.Attach(bpf.Config{Root: e.root, Cgroup: e.cgroup})
		require.NoError(t, err, "reattach %d", i)
		require.True(t, info.Attached(), info.String())
		for j, h := range info.Hooks {
			require.Equal(t, "updated", h.Change, h.Name)
			require.Equal(t, before.Hooks[j].LinkID, h.LinkID, "same link, new program")
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	require.NoError(t, rerr)
	t.Logf("%d connects across 3 engine restarts and re-attaches, spread %v", r.OK+r.Failed, r.Names)
	require.Zero(t, r.Failed, "failed connects: %v", r.Errors)
	require.Len(t, r.Names, 2, "%v", r.Names)
	// The restored engine still serves the service.
	svcs, err := e.engine.List(ctxT(t))
	require.NoError(t, err)
	require.NotEmpty(t, svcs)
}

// Growing the maps (an agent restart with a larger --map-max) migrates
// every entry to new maps pinned in the old ones' places; re-attaching
// switches the programs to them in place. A connect loop running all
// along sees no failure, and the maps verify clean afterwards.
func (e *env) testResize(t *testing.T) {
	bs := e.echoes(t, "resize", 2, true, false)
	vip := e.vip()
	e.upsert(t, vip, 81, lb.TCP, backends(bs, lb.TCP)...)
	want, err := e.engine.List(ctxT(t))
	require.NoError(t, err)

	var r response
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, rerr = e.helper.call(request{Op: "loop", Addr: addr(vip, 81), N: 50000, Duration: 2 * time.Second}, 62*time.Second)
	}()
	defer wg.Wait()
	for _, size := range []int{8192, 16384} {
		e.size = size
		e.restartEngine(t)
		st, err := e.engine.Stats(ctxT(t))
		require.NoError(t, err)
		for _, m := range st.Maps {
			require.Equal(t, size, m.MaxEntries, m.Name)
			require.Equal(t, "ok", m.Pin, m.Name)
		}
		require.Zero(t, st.MapWrites(), "the restore found every entry in the new maps")
		info, err := bpf.Attach(bpf.Config{Root: e.root, Cgroup: e.cgroup})
		require.NoError(t, err)
		require.True(t, info.Attached(), info.String())
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	require.NoError(t, rerr)
	t.Logf("%d connects across two resizes, spread %v", r.OK+r.Failed, r.Names)
	require.Zero(t, r.Failed, "failed connects: %v", r.Errors)
	require.Len(t, r.Names, 2, "%v", r.Names)

	got, err := e.engine.List(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, want, got, "same services, same IDs")
	lbm, err := lbmaps.Open(lbmaps.Config{Root: e.root, MaxEntries: lbmaps.Sizes{Services: e.size, Backends: e.size, RevNAT: e.size, SourceRanges: e.size}})
	require.NoError(t, err)
	defer lbm.Close()
	d, err := verify.Dump(lbm)
	require.NoError(t, err)
	require.Empty(t, verify.Check(d), "the resized maps verify clean")
}
