package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The engine's actor library: its dead-letter throttle lives up to
		// one interval.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottleWithLogger.func1.1"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
}

// call is one call the fake target received.
type call struct {
	kind      string // "sync", "upsert", "delete"
	services  []string
	frontends []string
	at        time.Time
}

// fakeTarget plays the engine for the runner's unit tests: it keeps the
// Kubernetes-owned services by frontend and records every call.
type fakeTarget struct {
	mu    sync.Mutex
	svcs  map[lb.L3n4Addr]*lb.Service
	log   []call
	calls chan call
	// hooks, set before Run: a call-level error for the n-th call of a
	// kind (0-based), a per-service error, something to do before a call
	// (outside the lock).
	callErr func(kind string, n int) error
	itemErr func(svc *lb.Service) error
	before  func(kind string)
	counts  map[string]int
}

func newFakeTarget() *fakeTarget {
	return &fakeTarget{svcs: map[lb.L3n4Addr]*lb.Service{}, calls: make(chan call, 1000), counts: map[string]int{}}
}

// record logs a call and returns it and the hook's error for it. The
// caller publishes it (next sees it) once the call's effect is applied,
// so that a test reading the state after next sees the call's effect.
func (f *fakeTarget) record(kind string, svcs []*lb.Service, fes []lb.L3n4Addr) (call, error) {
	if f.before != nil {
		f.before(kind)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := call{kind: kind, at: time.Now()}
	for _, s := range svcs {
		c.services = append(c.services, render(s))
	}
	for _, fe := range fes {
		c.frontends = append(c.frontends, fe.String())
	}
	n := f.counts[kind]
	f.counts[kind]++
	f.log = append(f.log, c)
	if f.callErr != nil {
		return c, f.callErr(kind, n)
	}
	return c, nil
}

// publish makes c seen by next (the channel has room for 1,000 calls).
func (f *fakeTarget) publish(c call) { f.calls <- c }

func (f *fakeTarget) item(s *lb.Service) error {
	if f.itemErr != nil {
		return f.itemErr(s)
	}
	return nil
}

func (f *fakeTarget) SyncSource(ctx context.Context, src lb.Source, desired []*lb.Service) (actorlb.SyncResult, error) {
	c, err := f.record("sync", desired, nil)
	defer f.publish(c) // after the effect below
	if err != nil {
		return actorlb.SyncResult{}, err
	}
	if err := f.checkSource(src, desired); err != nil {
		return actorlb.SyncResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var r actorlb.SyncResult
	keep := map[lb.L3n4Addr]bool{}
	for _, s := range desired {
		keep[s.Frontend.L3n4Addr] = true
		if err := f.item(s); err != nil {
			r.Failed = append(r.Failed, actorlb.SyncFailure{Frontend: s.Frontend.L3n4Addr, Err: err})
			continue
		}
		f.svcs[s.Frontend.L3n4Addr] = s
		r.Upserted++
	}
	for fe := range f.svcs {
		if !keep[fe] {
			delete(f.svcs, fe)
			r.Deleted++
		}
	}
	if len(r.Failed) > 0 {
		return r, errors.New("some services failed")
	}
	return r, nil
}

func (f *fakeTarget) UpsertBatch(ctx context.Context, svcs []*lb.Service) ([]actorlb.UpsertResult, error) {
	c, err := f.record("upsert", svcs, nil)
	defer f.publish(c) // after the effect below
	if err != nil {
		return nil, err
	}
	if err := f.checkSource(lb.SourceKubernetes, svcs); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]actorlb.UpsertResult, len(svcs))
	for i, s := range svcs {
		if out[i].Err = f.item(s); out[i].Err == nil {
			f.svcs[s.Frontend.L3n4Addr] = s
		}
	}
	return out, nil
}

func (f *fakeTarget) DeleteBatchAs(ctx context.Context, src lb.Source, fes []lb.L3n4Addr) ([]actorlb.DeleteResult, error) {
	c, err := f.record("delete", nil, fes)
	defer f.publish(c) // after the effect below
	if err != nil {
		return nil, err
	}
	if err := f.checkSource(src, nil); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]actorlb.DeleteResult, len(fes))
	for i, fe := range fes {
		if _, ok := f.svcs[fe]; !ok {
			out[i].Err = actorlb.ErrServiceNotFound
		}
		delete(f.svcs, fe)
	}
	return out, nil
}

// checkSource refuses (and the test fails on) a call not as the
// Kubernetes source.
func (f *fakeTarget) checkSource(src lb.Source, svcs []*lb.Service) error {
	if src != lb.SourceKubernetes {
		panic(fmt.Sprintf("a call as source %s", src))
	}
	for _, s := range svcs {
		if s.Source != lb.SourceKubernetes {
			panic(fmt.Sprintf("service %s of source %s", s.Frontend, s.Source))
		}
	}
	return nil
}

// state returns the services the target holds, rendered, sorted by
// frontend.
func (f *fakeTarget) state() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, fe := range slices.SortedFunc(maps.Keys(f.svcs), lb.L3n4Addr.Compare) {
		out = append(out, render(f.svcs[fe]))
	}
	return out
}

func (f *fakeTarget) callLog() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// next waits for the target's next call.
func (f *fakeTarget) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatalf("no call to the target within 10s; calls so far: %v", f.callLog())
		return call{}
	}
}

// quiet checks that the target gets no call for d.
func (f *fakeTarget) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Fatalf("unexpected call to the target: %+v", c)
	case <-time.After(d):
	}
}

type harness struct {
	client *fake.Clientset
	target *fakeTarget
	src    *Source
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a source on client (objects already there) and target; cfg
// may change the config. It stops the source when t ends, and checks that
// Run returned.
func start(t *testing.T, client *fake.Clientset, target Target, cfg func(*Config)) *harness {
	t.Helper()
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	if testing.Verbose() {
		logger.SetOutput(testWriter{t})
	}
	h := &harness{client: client, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	h.target, _ = target.(*fakeTarget)
	c := Config{
		Client: client, NodeName: testNode, NodeAddresses: []netip.Addr{}, Target: target,
		Logger: logger, Registerer: h.reg, Debounce: time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
	}
	if cfg != nil {
		cfg(&c)
	}
	src, err := New(c)
	require.NoError(t, err)
	h.src = src
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- src.Run(ctx) }()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			panic(fmt.Sprintf("Run returned %v", err))
		}
		h.done <- nil
	case <-time.After(10 * time.Second):
		panic("Run did not return within 10s of its context's end")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func (h *harness) createService(t *testing.T, s *corev1.Service) {
	t.Helper()
	_, err := h.client.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (h *harness) createSlice(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	_, err := h.client.DiscoveryV1().EndpointSlices(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (h *harness) updateSlice(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	_, err := h.client.DiscoveryV1().EndpointSlices(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// waitSynced waits until the full sync was applied.
func (h *harness) waitSynced(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return h.src.Status().Synced }, 10*time.Second, 5*time.Millisecond, "never synced")
}

// Until every informer has listed, nothing is applied; then exactly one
// SyncSource with the full set, and nothing else.
func TestNothingIsAppliedBeforeEveryInformerSynced(t *testing.T) {
	client := fake.NewClientset(service("ns", "web", "10.96.0.1"), slice("ns", "web-1", "web", "10.0.0.1"),
		service("ns", "api", "10.96.0.2"))
	var released atomic.Bool
	client.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !released.Load() {
			return true, nil, errors.New("apiserver not answering yet")
		}
		return false, nil, nil
	})
	target := newFakeTarget()
	h := start(t, client, target, nil)

	require.Eventually(t, func() bool { return !h.src.Status().LastEvent.IsZero() }, 10*time.Second, 5*time.Millisecond, "the services informer delivers")
	target.quiet(t, 300*time.Millisecond)
	st := h.src.Status()
	require.False(t, st.Synced)
	require.Contains(t, st.LastError, "apiserver not answering yet", "the failing list is shown")

	released.Store(true)
	c := target.next(t)
	require.Equal(t, "sync", c.kind)
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)", "ClusterIP 10.96.0.2:80/TCP ->"}, c.services)
	h.waitSynced(t)
	target.quiet(t, 100*time.Millisecond)
	st = h.src.Status()
	require.True(t, st.Connected)
	require.Equal(t, 2, st.Services)
	require.Equal(t, 2, st.Frontends)
	name, ok := h.src.Name(fe("10.96.0.1:80"))
	require.True(t, ok)
	require.Equal(t, "ns/web", name)
	require.Equal(t, 1, promtest.CollectAndCount(h.reg, "actorlb_k8s_sync_duration_seconds"))
	requireOnlyListWatch(t, client)
}

func TestIncrementalChangeIsOneUpsertBatch(t *testing.T) {
	client := fake.NewClientset(service("ns", "web", "10.96.0.1"), slice("ns", "web-1", "web", "10.0.0.1"))
	target := newFakeTarget()
	h := start(t, client, target, nil)
	require.Equal(t, "sync", target.next(t).kind)
	h.waitSynced(t)

	h.updateSlice(t, slice("ns", "web-1", "web", "10.0.0.1", "10.0.0.2"))
	c := target.next(t)
	require.Equal(t, "upsert", c.kind)
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"}, c.services)
	target.quiet(t, 100*time.Millisecond)

	require.NoError(t, client.CoreV1().Services("ns").Delete(context.Background(), "web", metav1.DeleteOptions{}))
	c = target.next(t)
	require.Equal(t, "delete", c.kind)
	require.Equal(t, []string{"10.96.0.1:80/TCP"}, c.frontends)
	require.Empty(t, target.state())
	require.Eventually(t, func() bool { return h.src.Status().Frontends == 0 }, 5*time.Second, 5*time.Millisecond)
	_, ok := h.src.Name(fe("10.96.0.1:80"))
	require.False(t, ok)

	require.Equal(t, 1.0, promtest.ToFloat64(h.src.m.events.WithLabelValues(KindEndpointSlice, OpUpdate)))
	require.Equal(t, 1.0, promtest.ToFloat64(h.src.m.events.WithLabelValues(KindService, OpDelete)))
	require.Equal(t, 2, histogramCount(t, h.reg, "actorlb_network_programming_duration_seconds"),
		"one per change (the initial list is not a change)")
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return int(mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// Changes made while the source waits (debounce, or a slow target) are
// applied together.
func TestChangesAreCoalesced(t *testing.T) {
	client := fake.NewClientset()
	target := newFakeTarget()
	h := start(t, client, target, func(c *Config) { c.Debounce = time.Second })
	require.Equal(t, "sync", target.next(t).kind)
	h.waitSynced(t)
	for i := range 5 {
		h.createService(t, service("ns", fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", i+1)))
	}
	c := target.next(t)
	require.Equal(t, "upsert", c.kind)
	require.Len(t, c.services, 5)
	target.quiet(t, 100*time.Millisecond)
}

// A handler never blocks: while the target is stuck in a call, events keep
// being received, and once it answers they are applied at once.
func TestHandlersDoNotBlockOnASlowTarget(t *testing.T) {
	client := fake.NewClientset()
	target := newFakeTarget()
	release := make(chan struct{})
	var stuck atomic.Bool
	target.before = func(kind string) {
		if kind == "upsert" && stuck.CompareAndSwap(false, true) {
			<-release
		}
	}
	h := start(t, client, target, nil)
	require.Equal(t, "sync", target.next(t).kind)
	h.waitSynced(t)
	h.createService(t, service("ns", "first", "10.96.1.1"))
	require.Eventually(t, stuck.Load, 5*time.Second, time.Millisecond, "the target is stuck in an upsert")
	for i := range 200 {
		h.createService(t, service("ns", fmt.Sprintf("s%03d", i), fmt.Sprintf("10.96.0.%d", i+1)))
	}
	require.Eventually(t, func() bool {
		return promtest.ToFloat64(h.src.m.events.WithLabelValues(KindService, OpAdd)) == 201
	}, 10*time.Second, 5*time.Millisecond, "every event is received while the target is stuck")
	close(release)
	require.Eventually(t, func() bool { return len(target.state()) == 201 }, 10*time.Second, 5*time.Millisecond)
	require.LessOrEqual(t, len(target.callLog()), 4, "the 200 services came in one or two batches: %d calls", len(target.callLog()))
}

// A failing target is retried with growing pauses; nothing is lost, and
// changes made meanwhile are applied too.
func TestTargetErrorsAreRetriedWithBackoff(t *testing.T) {
	client := fake.NewClientset(service("ns", "web", "10.96.0.1"))
	target := newFakeTarget()
	target.callErr = func(kind string, n int) error {
		if (kind == "sync" && n < 3) || (kind == "upsert" && n < 2) {
			return errors.New("engine restarting")
		}
		return nil
	}
	h := start(t, client, target, func(c *Config) { c.RetryMin, c.RetryMax = 50*time.Millisecond, 100*time.Millisecond })
	var syncs []time.Time
	for range 4 {
		c := target.next(t)
		require.Equal(t, "sync", c.kind)
		syncs = append(syncs, c.at)
	}
	require.GreaterOrEqual(t, syncs[1].Sub(syncs[0]), 50*time.Millisecond)
	require.GreaterOrEqual(t, syncs[2].Sub(syncs[1]), 100*time.Millisecond, "doubled")
	require.GreaterOrEqual(t, syncs[3].Sub(syncs[2]), 100*time.Millisecond, "bounded by RetryMax")
	require.Less(t, syncs[3].Sub(syncs[2]), 2*time.Second)
	h.waitSynced(t)
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP ->"}, target.state())

	h.createSlice(t, slice("ns", "web-1", "web", "10.0.0.1"))
	require.Equal(t, "upsert", target.next(t).kind)
	h.createService(t, service("ns", "api", "10.96.0.2")) // while failing
	require.Eventually(t, func() bool { return len(target.state()) == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP -> 10.0.0.1:8080/TCP(active)", "ClusterIP 10.96.0.2:80/TCP ->"}, target.state())
	require.Empty(t, h.src.Status().LastApplyError, "cleared by the clean apply")
}

// A service that another source owns is a conflict: shown, counted, not
// retried until its objects change or the resync.
func TestOwnedFrontendIsAConflict(t *testing.T) {
	client := fake.NewClientset(service("ns", "web", "10.96.0.1"), service("ns", "api", "10.96.0.2"))
	target := newFakeTarget()
	var owned atomic.Bool
	owned.Store(true)
	target.itemErr = func(s *lb.Service) error {
		if s.Frontend.Addr == netip.MustParseAddr("10.96.0.2") && owned.Load() {
			return fmt.Errorf("upsert service %s: %w", s.Frontend, actorlb.ErrFrontendOwned)
		}
		return nil
	}
	h := start(t, client, target, func(c *Config) { c.ResyncInterval = 500 * time.Millisecond })
	require.Equal(t, "sync", target.next(t).kind)
	h.waitSynced(t)
	st := h.src.Status()
	require.Len(t, st.Conflicts, 1)
	require.Equal(t, "ns/api", st.Conflicts[0].Service)
	require.Equal(t, 1.0, promtest.ToFloat64(h.src.m.conflicts))
	require.Empty(t, st.LastApplyError, "a conflict is not a failure to retry")
	target.quiet(t, 300*time.Millisecond)

	owned.Store(false) // the API service went away
	c := target.next(t)
	require.Equal(t, "upsert", c.kind, "the resync retries")
	require.Equal(t, []string{"ClusterIP 10.96.0.2:80/TCP ->"}, c.services)
	require.Eventually(t, func() bool { return len(h.src.Status().Conflicts) == 0 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 0.0, promtest.ToFloat64(h.src.m.conflicts))
}

// Without node addresses, the Node's InternalIPs are watched: a change
// moves the NodePort frontends.
func TestNodeAddressesFollowTheNode(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}, {Type: corev1.NodeExternalIP, Address: "198.18.9.9"}, {Type: corev1.NodeHostName, Address: testNode},
	}}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "198.18.0.2"},
	}}}
	client := fake.NewClientset(node, other, service("ns", "np", "10.96.0.1", nodePort(30080)))
	target := newFakeTarget()
	var hookMu sync.Mutex
	var hooked [][]netip.Addr // what OnNodeAddresses was given
	seen := func() [][]netip.Addr { hookMu.Lock(); defer hookMu.Unlock(); return slices.Clone(hooked) }
	h := start(t, client, target, func(c *Config) {
		c.NodeAddresses = nil
		c.OnNodeAddresses = func(a []netip.Addr) { hookMu.Lock(); defer hookMu.Unlock(); hooked = append(hooked, a) }
	})
	c := target.next(t)
	require.Equal(t, "sync", c.kind)
	require.Equal(t, []string{"NodePort 0.0.0.0:30080/TCP ->", "ClusterIP 10.96.0.1:80/TCP ->", "NodePort 198.18.0.1:30080/TCP ->"}, c.services)
	require.Equal(t, addrs("198.18.0.1"), h.src.Status().NodeAddresses)
	require.Equal(t, [][]netip.Addr{addrs("198.18.0.1")}, seen(), "the datapath hook, before the first sync")

	node.Status.Addresses[0].Address = "198.18.0.3"
	_, err := client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Equal(target.state(), []string{"NodePort 0.0.0.0:30080/TCP ->", "ClusterIP 10.96.0.1:80/TCP ->", "NodePort 198.18.0.3:30080/TCP ->"})
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, addrs("198.18.0.3"), h.src.Status().NodeAddresses)
	require.Equal(t, [][]netip.Addr{addrs("198.18.0.1"), addrs("198.18.0.3")}, seen(), "the datapath hook follows the Node")
	requireOnlyListWatch(t, client)
	var nodeLists int
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
			nodeLists++
			require.Equal(t, "metadata.name="+testNode, a.(k8stesting.ListAction).GetListRestrictions().Fields.String(), "its own Node only")
		}
	}
	require.NotZero(t, nodeLists)
}

// A failing watch shows as disconnected with its error (the source syncs
// on the list alone); once the watch works, the next event shows the
// source connected again.
func TestWatchFailureShowsDisconnected(t *testing.T) {
	client := fake.NewClientset()
	var failing atomic.Bool
	failing.Store(true)
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		if failing.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	target := newFakeTarget()
	h := start(t, client, target, nil)
	require.Equal(t, "sync", target.next(t).kind)
	h.waitSynced(t)
	require.Eventually(t, func() bool { return !h.src.Status().Connected }, 10*time.Second, 5*time.Millisecond)
	require.Contains(t, h.src.Status().LastError, "connection refused")

	failing.Store(false)
	h.createService(t, service("ns", "web", "10.96.0.1"))
	require.Eventually(t, func() bool { return len(target.state()) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.True(t, h.src.Status().Connected)
}

func TestNewRefusesABadConfig(t *testing.T) {
	client := fake.NewClientset()
	target := newFakeTarget()
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{Target: target}, "Client"},
		{Config{Client: client}, "Target"},
		{Config{Client: client, Target: target, NodeAddresses: []netip.Addr{{}}}, "NodeAddresses[0]"},
		{Config{Client: client, Target: target, NodeAddresses: addrs("0.0.0.0")}, "NodeAddresses[0]"},
		{Config{Client: client, Target: target, Debounce: -1}, "Debounce"},
		{Config{Client: client, Target: target, RetryMin: time.Minute, RetryMax: time.Second}, "RetryMin"},
	} {
		_, err := New(c.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, c.field)
		require.Contains(t, err.Error(), c.field+":")
	}
	reg := prometheus.NewRegistry()
	_, err := New(Config{Client: client, Target: target, Registerer: reg})
	require.NoError(t, err)
	_, err = New(Config{Client: client, Target: target, Registerer: reg})
	require.ErrorIs(t, err, ErrInvalidConfig, "metrics registered twice")

	s, err := New(Config{Client: client, Target: target})
	require.NoError(t, err)
	require.NotEmpty(t, s.Status().NodeName, "the host name by default")
}

func TestRunTwiceIsRefused(t *testing.T) {
	h := start(t, fake.NewClientset(), newFakeTarget(), nil)
	h.waitSynced(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // should the refusal fail, Run returns at once anyway
	require.ErrorIs(t, h.src.Run(ctx), ErrAlreadyRunning)
}

// A service that fails alone (a full map, say) stays pending and is
// retried with backoff until it is applied; the others are applied at
// once.
func TestAServiceFailingAloneIsRetried(t *testing.T) {
	client := fake.NewClientset(service("ns", "web", "10.96.0.1"), service("ns", "api", "10.96.0.2"))
	target := newFakeTarget()
	var fails atomic.Int32
	target.itemErr = func(s *lb.Service) error {
		if s.Frontend.Addr == netip.MustParseAddr("10.96.0.2") && fails.Add(1) <= 2 {
			return errors.New("map full")
		}
		return nil
	}
	h := start(t, client, target, func(c *Config) { c.RetryMin, c.RetryMax = 50*time.Millisecond, time.Second })
	sync := target.next(t)
	require.Equal(t, "sync", sync.kind)
	h.waitSynced(t)
	require.Contains(t, h.src.Status().LastApplyError, "map full")
	first := target.next(t)
	require.Equal(t, "upsert", first.kind)
	require.Equal(t, []string{"ClusterIP 10.96.0.2:80/TCP ->"}, first.services, "the failed one only")
	second := target.next(t)
	require.Equal(t, "upsert", second.kind)
	require.GreaterOrEqual(t, first.at.Sub(sync.at), 50*time.Millisecond)
	require.GreaterOrEqual(t, second.at.Sub(first.at), 100*time.Millisecond, "backoff doubled")
	require.Eventually(t, func() bool { return h.src.Status().LastApplyError == "" }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"ClusterIP 10.96.0.1:80/TCP ->", "ClusterIP 10.96.0.2:80/TCP ->"}, target.state())
	target.quiet(t, 200*time.Millisecond)
}

// Run asks for huge pages for the heap its lists and its full sync are
// about to fill before the informers list, and says at Debug what it got
// (how much was advised, or why nothing was); with NoHugePages it asks
// for nothing and says nothing.
func TestRunAsksForHugePagesBeforeTheInformersList(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoHugePages=%v", off), func(t *testing.T) {
			client := fake.NewClientset(service("ns", "web", "10.96.0.1"))
			logger, hook := logtest.NewNullLogger()
			logger.SetLevel(logrus.DebugLevel)
			hugeEntries := func() []*logrus.Entry {
				var es []*logrus.Entry
				for _, e := range hook.AllEntries() {
					if strings.Contains(e.Message, "huge pages") {
						es = append(es, e)
					}
				}
				return es
			}
			var atFirstList atomic.Int32 // the huge-page entries logged when the first list came; -1 until one came
			atFirstList.Store(-1)
			client.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
				atFirstList.CompareAndSwap(-1, int32(len(hugeEntries())))
				return false, nil, nil
			})
			h := start(t, client, newFakeTarget(), func(c *Config) { c.Logger, c.NoHugePages = logger, off })
			h.waitSynced(t)
			es := hugeEntries()
			if off {
				require.Empty(t, es, "nothing asked, nothing said")
				require.Equal(t, int32(0), atFirstList.Load())
				return
			}
			require.Len(t, es, 1, "one ask, said once")
			require.Equal(t, int32(1), atFirstList.Load(), "asked before the first list")
			require.Equal(t, logrus.DebugLevel, es[0].Level)
			if reason, skipped := es[0].Data["reason"]; skipped {
				require.NotEmpty(t, reason, "a skip says why: %s", es[0].Message)
				require.Contains(t, es[0].Message, "no huge pages")
			} else {
				require.Positive(t, es[0].Data["advised_mib"], "an ask says how much: %s", es[0].Message)
			}
		})
	}
}
