package datapath

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	"github.com/actorlb/actorlb/k8s/translate"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The Kubernetes-mode end-to-end tests (kube_test.go) run the engine with
// the Kubernetes source against a real kube-apiserver (tests/kube/cluster)
// and check the maps and real connections through the socket LB.
//
// The apiserver refuses loopback endpoint addresses, so everything lives
// in the helper's network namespace: backends listen on addresses of
// cluster.EndpointCIDRv4/v6 put on its lo (as /32 and /128: no other
// address of those ranges is reachable), the node addresses too, and the
// ClusterIPs (cluster.ServiceCIDRv4/v6) have no route there at all, so a
// VIP the maps do not serve fails at once.

// kubeNode is the name of the node the engine runs on, in every test.
const kubeNode = "actorlb-e2e-node"

// The node's addresses (on the namespace's lo): the source's NodeAddresses.
var (
	nodeIPv4 = netip.MustParseAddr("198.18.255.1")
	nodeIPv6 = netip.MustParseAddr("2001:2::ff:1")
)

// kenv is one Kubernetes-mode test's world: the env of the socket-LB
// tests (pinned maps, engine, cgroup, helper in a network namespace), a
// namespace of its own in the cluster, and the source feeding the engine.
type kenv struct {
	*env
	c  *cluster.Cluster
	ns string
	// src is the running source (nil when stopped).
	src *runningSource
}

// newKubeEnv builds a kenv on cluster c (the shared one unless the test
// stops the apiserver). The source is not started.
func newKubeEnv(t *testing.T, c *cluster.Cluster) *kenv {
	t.Helper()
	e := newEnv(t, true)
	k := &kenv{env: e, c: c, ns: c.Namespace(t)}
	k.addLocal(t, nodeIPv4, nodeIPv6)
	t.Cleanup(func() { k.stopSource(t) }) // before the engine closes
	return k
}

func kctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// addLocal puts addrs on the namespace's lo, each alone (/32, /128).
func (k *kenv) addLocal(t testing.TB, addrs ...netip.Addr) {
	t.Helper()
	var script strings.Builder
	for _, a := range addrs {
		if a.Is4() {
			fmt.Fprintf(&script, "addr replace %s/32 dev lo\n", a)
		} else {
			fmt.Fprintf(&script, "addr replace %s/128 dev lo nodad\n", a)
		}
	}
	k.helper.do(t, request{Op: "exec", Argv: []string{"sh", "-c", "ip -batch - <<'EOF'\n" + script.String() + "EOF\n"}}, 30*time.Second)
}

// kubeBackendIP is backend i's address (0-based) in each family.
func kubeBackendIP(v6 bool, i int) netip.Addr {
	if v6 {
		return netip.MustParseAddr(fmt.Sprintf("2001:2::1:%x", i+1))
	}
	return netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)})
}

// pool starts n echo backends named prefix1..prefixN (TCP and UDP) on
// kubeBackendIP(v6, first..first+n-1), all on one port (an EndpointSlice
// gives one port to all its endpoints): port, or the kernel's choice for
// the first if 0.
func (k *kenv) pool(t testing.TB, prefix string, v6 bool, first, n int, port uint16) []*echo {
	t.Helper()
	var addrs []netip.Addr
	for i := range n {
		addrs = append(addrs, kubeBackendIP(v6, first+i))
	}
	k.addLocal(t, addrs...)
	var out []*echo
	for i, a := range addrs {
		e := startEchoAt(t, k.netNS, fmt.Sprintf("%s%d", prefix, first+i+1), netip.AddrPortFrom(a, port), true, true)
		port = e.addr.Port()
		out = append(out, e)
	}
	return out
}

// ---- Kubernetes objects ----

// tcpPort is a service port named name, port port, protocol TCP.
func tcpPort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9999)}
}

// dualStack is a dual-stack ClusterIP service (IPv4 first).
func dualStack(name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:          ports,
		},
	}
}

// createService creates svc in the test's namespace and returns it as
// the apiserver stored it (ClusterIPs and node ports allocated).
func (k *kenv) createService(t testing.TB, svc *corev1.Service) *corev1.Service {
	t.Helper()
	got, err := k.c.Client.CoreV1().Services(k.ns).Create(kctx(t), svc, metav1.CreateOptions{})
	require.NoError(t, err, "create service %s", svc.Name)
	return got
}

// updateService reads service name, applies mut and writes it back
// (retried on a conflict), returning what the apiserver stored.
func (k *kenv) updateService(t testing.TB, name string, mut func(*corev1.Service)) *corev1.Service {
	t.Helper()
	cl := k.c.Client.CoreV1().Services(k.ns)
	for range 10 {
		s, err := cl.Get(kctx(t), name, metav1.GetOptions{})
		require.NoError(t, err)
		mut(s)
		got, err := cl.Update(kctx(t), s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		require.NoError(t, err, "update service %s", name)
		return got
	}
	t.Fatalf("update service %s: conflicts", name)
	return nil
}

func (k *kenv) deleteService(t testing.TB, name string) {
	t.Helper()
	require.NoError(t, k.c.Client.CoreV1().Services(k.ns).Delete(kctx(t), name, metav1.DeleteOptions{}))
}

// ep is one endpoint of a slice; nil conditions are left unset.
type ep struct {
	addr                        netip.Addr
	node                        string
	ready, serving, terminating *bool
}

// eps are the endpoints of echoes, ready, on node.
func eps(node string, es ...*echo) []ep {
	var out []ep
	for _, e := range es {
		out = append(out, ep{addr: e.addr.Addr(), node: node, ready: ptr.To(true)})
	}
	return out
}

// terminatingEPs are the endpoints of echoes, not ready, serving and
// terminating (a pod being deleted that still serves).
func terminatingEPs(node string, es ...*echo) []ep {
	var out []ep
	for _, e := range es {
		out = append(out, ep{addr: e.addr.Addr(), node: node, ready: ptr.To(false), serving: ptr.To(true), terminating: ptr.To(true)})
	}
	return out
}

// slicePort is an EndpointSlice port of protocol TCP.
func slicePort(name string, port uint16) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}
}

// putSlice creates or replaces the EndpointSlice name of service svc, of
// the family of its endpoints (IPv4 if it has none, unless v6).
func (k *kenv) putSlice(t testing.TB, svc, name string, v6 bool, ports []discoveryv1.EndpointPort, endpoints []ep) {
	t.Helper()
	at := discoveryv1.AddressTypeIPv4
	if v6 {
		at = discoveryv1.AddressTypeIPv6
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "actorlb-e2e"},
		},
		AddressType: at,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, e := range endpoints {
		require.Equal(t, v6, e.addr.Is6(), "slice %s: endpoint %s of the other family", name, e.addr)
		x := discoveryv1.Endpoint{Addresses: []string{e.addr.String()}, Conditions: discoveryv1.EndpointConditions{
			Ready: e.ready, Serving: e.serving, Terminating: e.terminating,
		}}
		if e.node != "" {
			x.NodeName = ptr.To(e.node)
		}
		es.Endpoints = append(es.Endpoints, x)
	}
	cl := k.c.Client.DiscoveryV1().EndpointSlices(k.ns)
	for range 10 {
		old, err := cl.Get(kctx(t), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cl.Create(kctx(t), es, metav1.CreateOptions{})
			require.NoError(t, err, "create slice %s", name)
			return
		}
		require.NoError(t, err)
		es.ResourceVersion = old.ResourceVersion
		_, err = cl.Update(kctx(t), es, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		require.NoError(t, err, "update slice %s", name)
		return
	}
	t.Fatalf("put slice %s: conflicts", name)
}

func (k *kenv) deleteSlice(t testing.TB, name string) {
	t.Helper()
	require.NoError(t, k.c.Client.DiscoveryV1().EndpointSlices(k.ns).Delete(kctx(t), name, metav1.DeleteOptions{}))
}

// clusterIPs returns the service's ClusterIPs (IPv4 first for dual
// stack).
func clusterIPs(t testing.TB, svc *corev1.Service) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, s := range svc.Spec.ClusterIPs {
		out = append(out, netip.MustParseAddr(s))
	}
	require.NotEmpty(t, out, "service %s has no ClusterIP", svc.Name)
	return out
}

// ---- what the engine should hold, and what it holds ----

// desired is the translation of every service of the cluster with its
// slices, for this node: the oracle the engine's Kubernetes-owned
// services must equal once the source has caught up.
func (k *kenv) desired(t testing.TB) []*lb.Service {
	t.Helper()
	out, err := k.desiredErr(kctx(t))
	require.NoError(t, err)
	return out
}

func (k *kenv) desiredErr(ctx context.Context) ([]*lb.Service, error) {
	svcs, err := k.c.Client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	sls, err := k.c.Client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list endpointslices: %w", err)
	}
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for i := range sls.Items {
		s := &sls.Items[i]
		key := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
		bySvc[key] = append(bySvc[key], s)
	}
	var out []*lb.Service
	for i := range svcs.Items {
		s := &svcs.Items[i]
		o := translate.Translate(translate.Input{
			Service: s, Slices: bySvc[s.Namespace+"/"+s.Name],
			NodeName: kubeNode, NodeAddresses: []netip.Addr{nodeIPv4, nodeIPv6},
		})
		for _, x := range o.Services {
			x.Source = lb.SourceKubernetes
			out = append(out, x)
		}
	}
	return canonical(out), nil
}

// owned returns the engine's services of source src, canonical.
func (k *kenv) owned(t testing.TB, src lb.Source) []*lb.Service {
	t.Helper()
	all, err := k.engine.List(kctx(t))
	require.NoError(t, err)
	var out []*lb.Service
	for _, s := range all {
		if s.Source == src {
			out = append(out, s)
		}
	}
	return canonical(out)
}

// canonical copies svcs without IDs, sorted by frontend, backends sorted.
func canonical(svcs []*lb.Service) []*lb.Service {
	out := make([]*lb.Service, 0, len(svcs))
	for _, s := range svcs {
		c := s.DeepCopy()
		c.Frontend.ID = 0
		slices.SortFunc(c.Backends, func(a, b lb.Backend) int { return a.L3n4Addr.Compare(b.L3n4Addr) })
		if len(c.Backends) == 0 {
			c.Backends = nil
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *lb.Service) int {
		return cmp.Or(a.Frontend.L3n4Addr.Compare(b.Frontend.L3n4Addr), cmp.Compare(a.Type, b.Type))
	})
	return out
}

// eventually polls cond every 20ms until it holds or timeout passes, then
// fails t with cond's last explanation.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, timeout, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// converge waits until the engine's Kubernetes-owned services are exactly
// the translation of the cluster's objects.
func (k *kenv) converge(t testing.TB) []*lb.Service {
	t.Helper()
	var want []*lb.Service
	eventually(t, 20*time.Second, "the engine holds the cluster's services", func() (bool, string) {
		want = k.desired(t)
		got := k.owned(t, lb.SourceKubernetes)
		if equalServices(want, got) {
			return true, ""
		}
		return false, fmt.Sprintf("want\n%s\ngot\n%s", describe(want), describe(got))
	})
	return want
}

func equalServices(a, b []*lb.Service) bool {
	return slices.EqualFunc(a, b, func(x, y *lb.Service) bool {
		return fmt.Sprintf("%+v", *x) == fmt.Sprintf("%+v", *y)
	})
}

func describe(svcs []*lb.Service) string {
	var b strings.Builder
	for _, s := range svcs {
		if s == nil {
			b.WriteString("  (none)\n")
			continue
		}
		fmt.Fprintf(&b, "  %s type=%v src=%v ext=%v int=%v aff=%v/%d backends=%v\n", s.Frontend.L3n4Addr, s.Type, s.Source,
			s.ExtTrafficPolicyLocal, s.IntTrafficPolicyLocal, s.SessionAffinity, s.SessionAffinityTimeout, s.Backends)
	}
	return b.String()
}

// frontend is addr:port/TCP at scope external.
func frontend(a netip.Addr, port uint16) lb.L3n4Addr {
	return lb.L3n4Addr{Addr: a, Port: port, Protocol: lb.TCP}
}

// service returns the engine's service on fe (nil if none).
func (k *kenv) service(t testing.TB, fe lb.L3n4Addr) *lb.Service {
	t.Helper()
	all, err := k.engine.List(kctx(t))
	require.NoError(t, err)
	for _, s := range all {
		if s.Frontend.L3n4Addr == fe {
			return s
		}
	}
	return nil
}

// waitService waits until the engine's service on fe satisfies cond
// (nil: the service is absent) and returns it.
func (k *kenv) waitService(t testing.TB, fe lb.L3n4Addr, what string, cond func(*lb.Service) bool) *lb.Service {
	t.Helper()
	var s *lb.Service
	eventually(t, 20*time.Second, fmt.Sprintf("%s: %s", fe, what), func() (bool, string) {
		s = k.service(t, fe)
		if cond(s) {
			return true, ""
		}
		if s == nil {
			return false, "no service"
		}
		return false, describe([]*lb.Service{s})
	})
	return s
}

// backendAddrs is the sorted address:port list of svc's backends.
func backendAddrs(svc *lb.Service) []netip.AddrPort {
	if svc == nil {
		return nil
	}
	var out []netip.AddrPort
	for _, b := range svc.Backends {
		out = append(out, b.AddrPort())
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// addrPorts is the sorted address:port list of echoes.
func addrPorts(es ...*echo) []netip.AddrPort {
	var out []netip.AddrPort
	for _, e := range es {
		out = append(out, e.addr)
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// ---- the maps ----

// dump reads the six maps.
func (k *kenv) dump(t testing.TB) actorlb.MapEntries {
	t.Helper()
	// The engine's view (List, which waitService reads) drops a deleted
	// service, or a removed backend, when the table does, before the op's
	// last map deletes (freed backends, the revNAT entry): the maps are
	// read once no op is in flight.
	eventually(t, 20*time.Second, "the engine has no operation in flight", func() (bool, string) {
		st, err := k.engine.Stats(kctx(t))
		require.NoError(t, err)
		return st.OpsInFlight == 0, fmt.Sprintf("%d in flight", st.OpsInFlight)
	})
	d, err := k.engine.DumpMaps(kctx(t))
	require.NoError(t, err)
	return d
}

// backendIDs maps each backend address in the maps to its ID.
func backendIDs(d actorlb.MapEntries) map[netip.AddrPort]uint32 {
	out := map[netip.AddrPort]uint32{}
	for _, b := range append(slices.Clone(d.Backends4), d.Backends6...) {
		out[netip.AddrPortFrom(b.Value.Address, b.Value.Port)] = b.ID
	}
	return out
}

// slotsOf returns the master of fe (scope external) and the backend IDs
// of its slots 1..count+qcount, in slot order; ok is false without a
// master.
func slotsOf(d actorlb.MapEntries, fe lb.L3n4Addr) (rev uint16, ids []uint32, ok bool) {
	svcs := d.Services4
	if fe.IsIPv6() {
		svcs = d.Services6
	}
	slots := map[uint16]uint32{}
	var count uint16 = 0
	for _, s := range svcs {
		if s.Key.Address != fe.Addr || s.Key.Port != fe.Port || s.Key.Proto != uint8(fe.Protocol) || s.Key.Scope != 0 {
			continue
		}
		if s.Key.Slot == 0 {
			rev, count, ok = s.Value.RevNATIndex, s.Value.Count+s.Value.QCount, true
			continue
		}
		slots[s.Key.Slot] = s.Value.BackendID
	}
	for i := uint16(1); i <= count; i++ {
		ids = append(ids, slots[i])
	}
	return rev, ids, ok
}

// writes is the number of map entries written and deleted since the
// engine started.
func (k *kenv) writes(t testing.TB) uint64 {
	t.Helper()
	st, err := k.engine.Stats(kctx(t))
	require.NoError(t, err)
	var n uint64
	for _, m := range st.Maps {
		n += m.Updated + m.Deleted
	}
	return n
}

// ---- connections ----

// connects makes n TCP connects to a:port from the helper.
func (k *kenv) connects(t *testing.T, a netip.Addr, port uint16, n int) response {
	t.Helper()
	return k.ask(t, request{Op: "tcp", Addr: addr(a, port), N: n, Timeout: time.Second})
}

// requireServedBy requires n connects to a:port all to succeed, reaching
// exactly the backends named (each at least once). n is raised to 20 per
// backend, so that a backend is missed by chance with probability below
// 1e-8.
func (k *kenv) requireServedBy(t *testing.T, a netip.Addr, port uint16, n int, es ...*echo) {
	t.Helper()
	n = max(n, 20*len(es))
	r := k.connects(t, a, port, n)
	require.Equal(t, n, r.OK, "connects to %s: %d failed: %v (served %v)", addr(a, port), r.Failed, r.Errors, r.Names)
	got := slices.Sorted(func(yield func(string) bool) {
		for n := range r.Names {
			if !yield(n) {
				return
			}
		}
	})
	want := names(es...)
	slices.Sort(want)
	require.Equal(t, want, got, "backends reached through %s: %v", addr(a, port), r.Names)
}

// requireRefused requires connects to a:port to fail with an error
// containing want ("operation not permitted": a frontend without backends;
// "network is unreachable": no frontend, no route).
func (k *kenv) requireRefused(t *testing.T, a netip.Addr, port uint16, want string) {
	t.Helper()
	r := k.connects(t, a, port, 3)
	require.Equal(t, 3, r.Failed, "connects to %s succeeded: %v", addr(a, port), r.Names)
	require.Contains(t, strings.Join(r.Errors, "; "), want, "connects to %s", addr(a, port))
}

const (
	eperm       = "operation not permitted"
	unreachable = "network is unreachable"
)
