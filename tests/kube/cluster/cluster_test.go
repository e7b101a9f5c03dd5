package cluster_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) {
	os.Exit(cluster.RunShared(m))
}

func dualStackNodePort(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeNodePort,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Selector:       map[string]string{"app": name},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
}

func slice(service, name string, family discoveryv1.AddressType, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: family,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080),
		}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s
}

// sliceWatcher is an informer on the EndpointSlices of one namespace that
// records deletions.
type sliceWatcher struct {
	lister  func(name string) (*discoveryv1.EndpointSlice, bool)
	mu      sync.Mutex
	deletes int
}

func watchSlices(t *testing.T, client kubernetes.Interface, ns string) *sliceWatcher {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := f.Discovery().V1().EndpointSlices()
	w := &sliceWatcher{}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { w.mu.Lock(); w.deletes++; w.mu.Unlock() },
	})
	require.NoError(t, err)
	w.lister = func(name string) (*discoveryv1.EndpointSlice, bool) {
		s, err := inf.Lister().EndpointSlices(ns).Get(name)
		return s, err == nil
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "informer %v not synced", typ)
	}
	return w
}

// waitAddresses waits until the informer holds slice name with exactly
// addrs, and returns how long that took.
func (w *sliceWatcher) waitAddresses(t *testing.T, name string, timeout time.Duration, addrs ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var got []string
	for time.Since(start) < timeout {
		got = got[:0]
		if s, ok := w.lister(name); ok {
			for _, e := range s.Endpoints {
				got = append(got, e.Addresses...)
			}
			slices.Sort(got)
			if slices.Equal(got, addrs) {
				return time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("slice %s: informer holds %v, want %v after %s", name, got, addrs, timeout)
	return 0
}

func TestDualStackServiceAndSlicesReachAnInformerAcrossAPIServerRestarts(t *testing.T) {
	start := time.Now()
	c := cluster.Start(t)
	t.Logf("cluster started in %s at %s", time.Since(start).Round(time.Millisecond), c.URL)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, dualStackNodePort("web"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Len(t, svc.Spec.ClusterIPs, 2, "a dual-stack service gets one ClusterIP per family")
	v4, v6 := netip.MustParsePrefix(cluster.ServiceCIDRv4), netip.MustParsePrefix(cluster.ServiceCIDRv6)
	require.True(t, v4.Contains(netip.MustParseAddr(svc.Spec.ClusterIPs[0])), "ClusterIPs %v", svc.Spec.ClusterIPs)
	require.True(t, v6.Contains(netip.MustParseAddr(svc.Spec.ClusterIPs[1])), "ClusterIPs %v", svc.Spec.ClusterIPs)
	require.GreaterOrEqual(t, svc.Spec.Ports[0].NodePort, int32(30000), "a NodePort is allocated")

	// The informer's client is not the one that writes: a restart must
	// not depend on the writes to reconnect it.
	w := watchSlices(t, kubernetes.NewForConfigOrDie(c.Config), ns)
	slices4 := c.Client.DiscoveryV1().EndpointSlices(ns)
	s4, err := slices4.Create(ctx, slice("web", "web-v4", discoveryv1.AddressTypeIPv4, "198.18.0.10", "198.18.0.11"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = slices4.Create(ctx, slice("web", "web-v6", discoveryv1.AddressTypeIPv6, "2001:2::10"), metav1.CreateOptions{})
	require.NoError(t, err)
	w.waitAddresses(t, "web-v4", 10*time.Second, "198.18.0.10", "198.18.0.11")
	w.waitAddresses(t, "web-v6", 10*time.Second, "2001:2::10")

	want := []string{"198.18.0.10", "198.18.0.11"}
	for _, round := range []struct {
		name string
		stop func() error
		addr string
	}{
		{"SIGTERM", c.StopAPIServer, "198.18.0.12"},
		{"SIGKILL", c.KillAPIServer, "198.18.0.13"},
	} {
		t0 := time.Now()
		require.NoError(t, round.stop(), round.name)
		stopped := time.Since(t0)
		_, err := slices4.Get(ctx, "web-v4", metav1.GetOptions{})
		require.Error(t, err, "%s: the apiserver answers while stopped", round.name)
		time.Sleep(3 * time.Second)
		t1 := time.Now()
		url := c.URL
		require.NoError(t, c.StartAPIServer(ctx), round.name)
		require.Equal(t, url, c.URL, "%s: the apiserver is back on its address", round.name)
		restarted := time.Since(t1)

		// A change written after the restart reaches the informer.
		want = append(want, round.addr)
		slices.Sort(want)
		s4, err = slices4.Get(ctx, "web-v4", metav1.GetOptions{})
		require.NoError(t, err, round.name)
		s4.Endpoints = append(s4.Endpoints, discoveryv1.Endpoint{Addresses: []string{round.addr}})
		_, err = slices4.Update(ctx, s4, metav1.UpdateOptions{})
		require.NoError(t, err, round.name)
		// client-go's reflector retries with a backoff that grows to
		// [30 s, 60 s) while the apiserver is down.
		seen := w.waitAddresses(t, "web-v4", 90*time.Second, want...)
		t.Logf("%s: apiserver stopped in %s, ready again in %s; a change written then reached the informer in %s (%s after the restart began)",
			round.name, stopped.Round(time.Millisecond), restarted.Round(time.Millisecond),
			seen.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	}
	w.waitAddresses(t, "web-v6", 10*time.Second, "2001:2::10")
	w.mu.Lock()
	require.Zero(t, w.deletes, "no slice was deleted, so the informer reported no deletion")
	w.mu.Unlock()

	// Close stops both processes: nothing is left running.
	pids := cluster.PIDs(c)
	require.Len(t, pids, 2)
	require.NoError(t, c.Close())
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d still exists after Close", pid)
	}
	_, err = os.Stat(c.Dir)
	require.ErrorIs(t, err, os.ErrNotExist, "Close removes the state directory")
}

func TestAPIServerAcceptsTheTestRangesAndRefusesLoopbackEndpoints(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	api := c.Client.DiscoveryV1().EndpointSlices(ns)
	for _, tc := range []struct {
		name   string
		family discoveryv1.AddressType
		addr   string
		ok     bool
	}{
		{"bench-v4", discoveryv1.AddressTypeIPv4, "198.18.1.1", true},
		{"bench-v6", discoveryv1.AddressTypeIPv6, "2001:2::1:1", true},
		{"loopback-v4", discoveryv1.AddressTypeIPv4, "127.0.0.2", false},
		{"loopback-v6", discoveryv1.AddressTypeIPv6, "::1", false},
	} {
		_, err := api.Create(ctx, slice("svc", tc.name, tc.family, tc.addr), metav1.CreateOptions{})
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.True(t, apierrors.IsInvalid(err), "%s: want Invalid, got %v", tc.name, err)
		}
	}
}

func TestNodesAndPodsCanBeCreatedWithoutControllers(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "198.18.0.1"},
			{Type: corev1.NodeInternalIP, Address: "2001:2::1"},
		}},
	}
	created, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Nodes().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	// Status is a subresource: a node agent writes it apart.
	created.Status = node.Status
	created, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Len(t, created.Status.Addresses, 2)

	// No service account exists (no controller manager), and none is needed.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{NodeName: created.Name, Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

func TestAgentUserHasNoRightsUntilBound(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	agent, err := kubernetes.NewForConfig(c.AgentConfig)
	require.NoError(t, err)
	_, err = agent.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
	_, err = c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err, "the admin may list")
}

func TestMeasureWatchLatencyReportsOrderedPercentiles(t *testing.T) {
	c := cluster.Shared(t)
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 100
	l, err := cluster.MeasureWatchLatency(ctx, c.Client, ns, n)
	require.NoError(t, err)
	t.Logf("apiserver write→watch event: %s", l)
	require.Equal(t, n, l.N)
	require.Len(t, l.Samples, n)
	require.Positive(t, l.P50)
	require.LessOrEqual(t, l.P50, l.P99)
	require.LessOrEqual(t, l.P99, l.Max)
	require.Less(t, l.P99, 5*time.Second, "a write's event arrives within seconds on an idle test cluster")
	list, err := c.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, list.Items, "the probe slice is deleted")

	_, err = cluster.MeasureWatchLatency(ctx, c.Client, ns, 0)
	require.ErrorContains(t, err, "n 0 must be positive")
}

func TestStopAndStartAPIServerRefuseTheWrongState(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.ErrorIs(t, c.StartAPIServer(ctx), cluster.ErrAPIServerRunning)
}

func TestFindBinariesNamesTheMakeTarget(t *testing.T) {
	t.Setenv(cluster.BinDirEnv, t.TempDir())
	_, err := cluster.FindBinaries()
	require.ErrorIs(t, err, cluster.ErrNoBinaries)
	require.ErrorContains(t, err, "make kube-tools")
	_, err = cluster.New(context.Background(), cluster.Options{})
	require.True(t, errors.Is(err, cluster.ErrNoBinaries), "New: %v", err)
}

func TestSummarizeUsesNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	l := cluster.Summarize(ms(5, 1, 4, 2, 3))
	require.Equal(t, 5, l.N)
	require.Equal(t, 3*time.Millisecond, l.P50)
	require.Equal(t, 5*time.Millisecond, l.P99)
	require.Equal(t, 5*time.Millisecond, l.Max)
	require.Equal(t, 3*time.Millisecond, l.Mean)
	require.Equal(t, ms(5, 1, 4, 2, 3), l.Samples, "samples stay in write order")

	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	l = cluster.Summarize(ms(hundred...))
	require.Equal(t, 50*time.Millisecond, l.P50)
	require.Equal(t, 99*time.Millisecond, l.P99)
	require.Zero(t, cluster.Summarize(nil).P99)
}
