package datapath

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/tests/kube/cluster"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const otherNode = "some-other-node"

// Every translation rule, end to end: a Service and its EndpointSlices
// written to the apiserver become the engine's services (the maps equal
// the translation of the cluster's objects) and connections from the
// node's network namespace reach exactly the backends the rule says.
func TestKubeServicesServeAsKubeProxyWould(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 3, 0)
	port := a[0].addr.Port()
	b := k.pool(t, "b", true, 0, 3, port)
	k.startSource(t)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}

	// withSlices creates svc with one IPv4 and one IPv6 slice.
	withSlices := func(t *testing.T, svc *corev1.Service, v4, v6 []ep) *corev1.Service {
		t.Helper()
		s := k.createService(t, svc)
		k.putSlice(t, svc.Name, svc.Name+"-v4", false, http, v4)
		k.putSlice(t, svc.Name, svc.Name+"-v6", true, http, v6)
		return s
	}

	t.Run("ClusterIPDualStackReachesEachFamilysBackends", func(t *testing.T) {
		s := withSlices(t, dualStack("web", tcpPort("http", 80)), eps(kubeNode, a...), eps(otherNode, b...))
		ips := clusterIPs(t, s)
		require.Len(t, ips, 2)
		for i, fam := range [][]*echo{a, b} {
			svc := k.waitService(t, frontend(ips[i], 80), "all backends", func(s *lb.Service) bool {
				return s != nil && len(s.Backends) == 3
			})
			require.Equal(t, lb.SVCTypeClusterIP, svc.Type)
			require.Equal(t, lb.SourceKubernetes, svc.Source)
			require.Equal(t, addrPorts(fam...), backendAddrs(svc))
			k.requireServedBy(t, ips[i], 80, 60, fam...)
		}
	})

	t.Run("NodePortOnTheNodeAddressesAndTheSurrogate", func(t *testing.T) {
		svc := dualStack("np", tcpPort("http", 80))
		svc.Spec.Type = corev1.ServiceTypeNodePort
		s := withSlices(t, svc, eps(kubeNode, a[:2]...), eps(kubeNode, b[:1]...))
		np := uint16(s.Spec.Ports[0].NodePort)
		require.NotZero(t, np)
		for _, c := range []struct {
			node, loop, unspec netip.Addr
			want               []*echo
		}{
			{nodeIPv4, netip.MustParseAddr("127.0.0.1"), netip.IPv4Unspecified(), a[:2]},
			{nodeIPv6, netip.IPv6Loopback(), netip.IPv6Unspecified(), b[:1]},
		} {
			for _, fe := range []netip.Addr{c.node, c.unspec} {
				got := k.waitService(t, frontend(fe, np), "NodePort", func(s *lb.Service) bool {
					return s != nil && len(s.Backends) == len(c.want)
				})
				require.Equal(t, lb.SVCTypeNodePort, got.Type)
			}
			k.requireServedBy(t, c.node, np, 30, c.want...)
			k.requireServedBy(t, c.loop, np, 30, c.want...) // the surrogate
		}
	})

	t.Run("ExternalIPs", func(t *testing.T) {
		ext4, ext6 := netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("2001:2::c8:1")
		svc := dualStack("ext", tcpPort("http", 8080))
		svc.Spec.ExternalIPs = []string{ext4.String(), ext6.String()}
		withSlices(t, svc, eps(kubeNode, a[1:]...), eps(kubeNode, b[1:]...))
		for _, c := range []struct {
			ip   netip.Addr
			want []*echo
		}{{ext4, a[1:]}, {ext6, b[1:]}} {
			got := k.waitService(t, frontend(c.ip, 8080), "ExternalIPs", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 2 })
			require.Equal(t, lb.SVCTypeExternalIPs, got.Type)
			k.requireServedBy(t, c.ip, 8080, 30, c.want...)
		}
	})

	t.Run("LoadBalancerIngressIPs", func(t *testing.T) {
		in4, in6 := netip.MustParseAddr("198.18.201.1"), netip.MustParseAddr("2001:2::c9:1")
		svc := dualStack("lbs", tcpPort("http", 443))
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
		s := withSlices(t, svc, eps(kubeNode, a[:1]...), eps(kubeNode, b[2:]...))
		require.Zero(t, s.Spec.Ports[0].NodePort)
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: in4.String()}, {IP: in6.String()}}
		_, err := k.c.Client.CoreV1().Services(k.ns).UpdateStatus(kctx(t), s, metav1.UpdateOptions{})
		require.NoError(t, err)
		for _, c := range []struct {
			ip   netip.Addr
			want []*echo
		}{{in4, a[:1]}, {in6, b[2:]}} {
			got := k.waitService(t, frontend(c.ip, 443), "LoadBalancer", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 1 })
			require.Equal(t, lb.SVCTypeLoadBalancer, got.Type)
			k.requireServedBy(t, c.ip, 443, 30, c.want...)
		}
	})

	t.Run("InternalTrafficPolicyLocalUsesThisNodesEndpointsOnly", func(t *testing.T) {
		svc := dualStack("itp", tcpPort("http", 80))
		svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		v4 := append(eps(kubeNode, a[0], a[2]), eps(otherNode, a[1])...)
		s := withSlices(t, svc, v4, eps(otherNode, b...))
		ips := clusterIPs(t, s)
		got := k.waitService(t, frontend(ips[0], 80), "ITP Local", func(s *lb.Service) bool { return s != nil && len(s.Backends) > 0 })
		require.True(t, got.IntTrafficPolicyLocal)
		k.requireServedBy(t, ips[0], 80, 60, a[0], a[2])
		// IPv6: every endpoint is on another node: refused, no fallback.
		k.waitService(t, frontend(ips[1], 80), "ITP Local", func(s *lb.Service) bool { return s != nil && s.IntTrafficPolicyLocal })
		k.requireRefused(t, ips[1], 80, eperm)
	})

	t.Run("ExternalTrafficPolicyLocalLeavesNodeTrafficOnEveryEndpoint", func(t *testing.T) {
		svc := dualStack("etp", tcpPort("http", 80))
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s := withSlices(t, svc, append(eps(kubeNode, a[0]), eps(otherNode, a[1:]...)...), eps(otherNode, b...))
		np := uint16(s.Spec.Ports[0].NodePort)
		got := k.waitService(t, frontend(nodeIPv4, np), "ETP Local", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 3 })
		require.True(t, got.ExtTrafficPolicyLocal)
		require.False(t, got.IntTrafficPolicyLocal)
		for _, be := range got.Backends {
			require.Equal(t, be.AddrPort() == a[0].addr, be.NodeLocal, "%s", be)
		}
		// The ClusterIP frontend is another frontend of the same service:
		// the engine may commit it after the NodePort one.
		ci := k.waitService(t, frontend(clusterIPs(t, s)[0], 80), "ClusterIP of ETP Local", func(s *lb.Service) bool { return s != nil })
		require.NotNil(t, ci)
		require.False(t, ci.ExtTrafficPolicyLocal, "a ClusterIP frontend has no external side")
		// From the node, every endpoint (kube-proxy's short circuit).
		k.requireServedBy(t, nodeIPv4, np, 60, a...)
		k.requireServedBy(t, nodeIPv6, np, 60, b...)
	})

	t.Run("SessionAffinityClientIPKeepsOneBackend", func(t *testing.T) {
		svc := dualStack("aff", tcpPort("http", 80))
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](300)}}
		s := withSlices(t, svc, eps(kubeNode, a...), eps(kubeNode, b...))
		for _, ip := range clusterIPs(t, s) {
			got := k.waitService(t, frontend(ip, 80), "affinity", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 3 })
			require.True(t, got.SessionAffinity)
			require.EqualValues(t, 300, got.SessionAffinityTimeout)
			r := k.connects(t, ip, 80, 30)
			require.Equal(t, 30, r.OK, "errors: %v", r.Errors)
			require.Len(t, r.Names, 1, "every connect reaches the same backend: %v", r.Names)
		}
	})

	t.Run("PortNameMismatchMeansNoBackends", func(t *testing.T) {
		s := k.createService(t, dualStack("mismatch", tcpPort("http", 80)))
		k.putSlice(t, "mismatch", "mismatch-v4", false, []discoveryv1.EndpointPort{slicePort("web", port)}, eps(kubeNode, a...))
		// Same name, other protocol: no match either.
		udp := slicePort("http", port)
		udp.Protocol = ptr.To(corev1.ProtocolUDP)
		k.putSlice(t, "mismatch", "mismatch-v6", true, []discoveryv1.EndpointPort{udp}, eps(kubeNode, b...))
		for _, ip := range clusterIPs(t, s) {
			k.waitService(t, frontend(ip, 80), "frontend without backends", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 0 })
			k.requireRefused(t, ip, 80, eperm)
		}
	})

	// Nothing else: the engine holds exactly the translation.
	k.converge(t)
}

// Scaling a service 3 -> 10 -> 1 endpoints: a backend that stays keeps its
// ID and its place in slot order (slots follow address order), the maps
// hold no backend that left, and connections reach exactly the endpoints.
func TestKubeScalingKeepsTheIDsAndSlotOrderOfSurvivors(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "s", false, 0, 10, 0)
	port := a[0].addr.Port()
	b := k.pool(t, "t", true, 0, 10, port)
	k.startSource(t)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	s := k.createService(t, dualStack("scale", tcpPort("http", 80)))
	ips := clusterIPs(t, s)

	scale := func(v4, v6 []*echo) map[netip.AddrPort]uint32 {
		t.Helper()
		k.putSlice(t, "scale", "scale-v4", false, http, eps(kubeNode, v4...))
		k.putSlice(t, "scale", "scale-v6", true, http, eps(kubeNode, v6...))
		for i, want := range [][]*echo{v4, v6} {
			k.waitService(t, frontend(ips[i], 80), fmt.Sprintf("%d backends", len(want)), func(s *lb.Service) bool {
				return slices.Equal(backendAddrs(s), addrPorts(want...))
			})
		}
		d := k.dump(t)
		ids := backendIDs(d)
		require.Len(t, ids, len(v4)+len(v6), "the maps hold exactly the endpoints: %v", ids)
		for i, want := range [][]*echo{v4, v6} {
			_, slots, ok := slotsOf(d, frontend(ips[i], 80))
			require.True(t, ok)
			var inOrder []uint32 // the IDs of the endpoints by address
			for _, ap := range addrPorts(want...) {
				inOrder = append(inOrder, ids[ap])
			}
			require.Equal(t, inOrder, slots, "slot order is address order")
			k.requireServedBy(t, ips[i], 80, 20*len(want), want...)
		}
		return ids
	}
	keeps := func(before, after map[netip.AddrPort]uint32) {
		t.Helper()
		n := 0
		for ap, id := range after {
			if old, ok := before[ap]; ok {
				require.Equal(t, old, id, "backend %s changed ID", ap)
				n++
			}
		}
		require.NotZero(t, n, "no survivor to compare")
	}
	ids3 := scale(a[:3], b[:3])
	ids10 := scale(a, b)
	keeps(ids3, ids10)
	ids1 := scale(a[5:6], b[9:])
	keeps(ids10, ids1)
	k.converge(t)
}

// Terminating endpoints: when no endpoint of a service port is ready, the
// serving and terminating ones keep serving (backends in state
// terminating); once one is ready, only the ready ones get connections;
// non-serving endpoints never do.
func TestKubeTerminatingEndpointsServeOnlyWhenNoneIsReady(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 3, 0)
	port := a[0].addr.Port()
	k.startSource(t)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	svc := dualStack("term", tcpPort("http", 80))
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	ip := clusterIPs(t, k.createService(t, svc))[0]
	fe := frontend(ip, 80)
	states := func(s *lb.Service) map[netip.AddrPort]lb.BackendState {
		out := map[netip.AddrPort]lb.BackendState{}
		if s != nil {
			for _, b := range s.Backends {
				out[b.AddrPort()] = b.State
			}
		}
		return out
	}

	// All terminating: they serve, as terminating backends.
	k.putSlice(t, "term", "term-v4", false, http, terminatingEPs(kubeNode, a[:2]...))
	k.waitService(t, fe, "two terminating backends", func(s *lb.Service) bool {
		return maps.Equal(states(s), map[netip.AddrPort]lb.BackendState{a[0].addr: lb.BackendStateTerminating, a[1].addr: lb.BackendStateTerminating})
	})
	k.requireServedBy(t, ip, 80, 60, a[:2]...)
	d := k.dump(t)
	ids := backendIDs(d)
	for _, be := range append(slices.Clone(d.Backends4), d.Backends6...) {
		require.EqualValues(t, lb.BackendStateTerminating, be.Value.State, "backend %d in the map", be.ID)
	}
	_, slots, _ := slotsOf(d, fe)
	require.ElementsMatch(t, []uint32{ids[a[0].addr], ids[a[1].addr]}, slots)

	// One ready: only it.
	k.putSlice(t, "term", "term-v4", false, http, append(terminatingEPs(kubeNode, a[:2]...), eps(kubeNode, a[2])...))
	k.waitService(t, fe, "the ready endpoint only", func(s *lb.Service) bool {
		return maps.Equal(states(s), map[netip.AddrPort]lb.BackendState{a[2].addr: lb.BackendStateActive})
	})
	k.requireServedBy(t, ip, 80, 30, a[2])

	// Not serving (and not ready): never a backend, even with none ready.
	notServing := terminatingEPs(kubeNode, a[:2]...)
	for i := range notServing {
		notServing[i].serving = ptr.To(false)
	}
	k.putSlice(t, "term", "term-v4", false, http, notServing)
	k.waitService(t, fe, "no backend", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 0 })
	k.requireRefused(t, ip, 80, eperm)
	k.converge(t)
}

// An address that was a terminating backend comes back as a ready
// endpoint, beside a new one: a new pod on the old address (a hostNetwork
// pod's rolling update on this node, or an address reused) and another
// replica. kube-proxy serves both as ready; the engine must take the
// backend from terminating back to active (today it refuses the whole
// update: "terminating is final", and the new replica is never added).
func TestKubeTerminatingAddressReusedByAReadyEndpointServes(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 2, 0)
	port := a[0].addr.Port()
	k.startSource(t)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	svc := dualStack("reuse", tcpPort("http", 80))
	svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	ip := clusterIPs(t, k.createService(t, svc))[0]
	fe := frontend(ip, 80)

	k.putSlice(t, "reuse", "reuse-v4", false, http, terminatingEPs(kubeNode, a[0]))
	k.waitService(t, fe, "a terminating backend", func(s *lb.Service) bool {
		return s != nil && len(s.Backends) == 1 && s.Backends[0].State == lb.BackendStateTerminating
	})
	k.putSlice(t, "reuse", "reuse-v4", false, http, eps(kubeNode, a...))
	eventually(t, 5*time.Second, "both backends active", func() (bool, string) {
		s := k.service(t, fe)
		ok := s != nil && len(s.Backends) == 2
		for i := 0; ok && i < len(s.Backends); i++ {
			ok = s.Backends[i].State == lb.BackendStateActive
		}
		return ok, fmt.Sprintf("engine: %ssource: %+v", describe([]*lb.Service{s}), k.src.src.Status())
	})
	k.requireServedBy(t, ip, 80, 40, a...)
	k.converge(t)
}

// frontendID returns the service ID of fe in the maps (its master's
// revNAT index), failing t if fe has no master.
func (k *kenv) frontendID(t testing.TB, fe lb.L3n4Addr) uint16 {
	t.Helper()
	id, _, ok := slotsOf(k.dump(t), fe)
	require.True(t, ok, "no master for %s", fe)
	return id
}

// Renaming a port (the service's and the slices' together) and changing
// the service's type keep the frontend and backend IDs; NodePort
// frontends appear with the type and go with it.
func TestKubePortRenameAndTypeChanges(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 2, 0)
	port := a[0].addr.Port()
	b := k.pool(t, "b", true, 0, 2, port)
	k.startSource(t)
	s := k.createService(t, dualStack("ren", tcpPort("http", 80)))
	ips := clusterIPs(t, s)
	put := func(name string) {
		k.putSlice(t, "ren", "ren-v4", false, []discoveryv1.EndpointPort{slicePort(name, port)}, eps(kubeNode, a...))
		k.putSlice(t, "ren", "ren-v6", true, []discoveryv1.EndpointPort{slicePort(name, port)}, eps(kubeNode, b...))
	}
	served := func() {
		t.Helper()
		for i, want := range [][]*echo{a, b} {
			k.waitService(t, frontend(ips[i], 80), "served", func(s *lb.Service) bool { return slices.Equal(backendAddrs(s), addrPorts(want...)) })
			k.requireServedBy(t, ips[i], 80, 30, want...)
		}
	}
	put("http")
	served()
	id4, id6 := k.frontendID(t, frontend(ips[0], 80)), k.frontendID(t, frontend(ips[1], 80))
	beIDs := backendIDs(k.dump(t))
	same := func(what string) {
		t.Helper()
		require.Equal(t, id4, k.frontendID(t, frontend(ips[0], 80)), "%s: IPv4 frontend ID", what)
		require.Equal(t, id6, k.frontendID(t, frontend(ips[1], 80)), "%s: IPv6 frontend ID", what)
		require.Equal(t, beIDs, backendIDs(k.dump(t)), "%s: backend IDs", what)
	}

	t.Run("PortRename", func(t *testing.T) {
		k.updateService(t, "ren", func(s *corev1.Service) { s.Spec.Ports[0].Name = "web" })
		put("web")
		served()
		k.converge(t)
		// Between the two writes the names differ and the service has no
		// backends (as with kube-proxy): their IDs may be given anew.
		beIDs = backendIDs(k.dump(t))
		same("after the rename")
	})

	t.Run("ClusterIPToNodePortAndBack", func(t *testing.T) {
		s := k.updateService(t, "ren", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort })
		np := uint16(s.Spec.Ports[0].NodePort)
		require.NotZero(t, np)
		nodePorts := []lb.L3n4Addr{frontend(netip.IPv4Unspecified(), np), frontend(nodeIPv4, np), frontend(netip.IPv6Unspecified(), np), frontend(nodeIPv6, np)}
		for _, fe := range nodePorts {
			k.waitService(t, fe, "NodePort frontend", func(s *lb.Service) bool { return s != nil && s.Type == lb.SVCTypeNodePort && len(s.Backends) == 2 })
		}
		k.requireServedBy(t, nodeIPv4, np, 30, a...)
		k.requireServedBy(t, nodeIPv6, np, 30, b...)
		k.converge(t)
		same("as NodePort")

		k.updateService(t, "ren", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.Ports[0].NodePort = 0
		})
		for _, fe := range nodePorts {
			k.waitService(t, fe, "NodePort frontend gone", func(s *lb.Service) bool { return s == nil })
			_, _, ok := slotsOf(k.dump(t), fe)
			require.False(t, ok, "%s still has a master", fe)
		}
		// The node address is local and nothing listens there.
		k.requireRefused(t, nodeIPv4, np, "connection refused")
		served()
		k.converge(t)
		same("back to ClusterIP")
	})
}

// A deleted slice leaves the frontend without backends (connects refused
// with EPERM, its backends gone from the maps); a deleted service leaves
// nothing in the maps, and its service ID can be taken again.
func TestKubeDeletedSliceAndService(t *testing.T) {
	k := newKubeEnv(t, cluster.Shared(t))
	a := k.pool(t, "a", false, 0, 2, 0)
	port := a[0].addr.Port()
	b := k.pool(t, "b", true, 0, 2, port)
	k.startSource(t)
	http := []discoveryv1.EndpointPort{slicePort("http", port)}
	ips := clusterIPs(t, k.createService(t, dualStack("del", tcpPort("http", 80))))
	k.putSlice(t, "del", "del-v4", false, http, eps(kubeNode, a...))
	k.putSlice(t, "del", "del-v6", true, http, eps(kubeNode, b...))
	fe4, fe6 := frontend(ips[0], 80), frontend(ips[1], 80)
	for i, want := range [][]*echo{a, b} {
		k.waitService(t, frontend(ips[i], 80), "served", func(s *lb.Service) bool { return len(backendAddrs(s)) == len(want) })
		k.requireServedBy(t, ips[i], 80, 20, want...)
	}
	id4 := k.frontendID(t, fe4)

	k.deleteSlice(t, "del-v4")
	k.waitService(t, fe4, "no backends", func(s *lb.Service) bool { return s != nil && len(s.Backends) == 0 })
	k.requireRefused(t, ips[0], 80, eperm)
	k.requireServedBy(t, ips[1], 80, 20, b...) // the other family's slice stays
	ids := backendIDs(k.dump(t))
	for _, e := range a {
		require.NotContains(t, ids, e.addr, "the deleted slice's backend is gone from the maps")
	}
	require.Equal(t, id4, k.frontendID(t, fe4), "the frontend stays, with its ID")

	k.deleteService(t, "del")
	for _, fe := range []lb.L3n4Addr{fe4, fe6} {
		k.waitService(t, fe, "gone", func(s *lb.Service) bool { return s == nil })
	}
	d := k.dump(t)
	for _, fe := range []lb.L3n4Addr{fe4, fe6} {
		_, _, ok := slotsOf(d, fe)
		require.False(t, ok, "%s still has a master", fe)
	}
	for _, r := range append(slices.Clone(d.RevNAT4), d.RevNAT6...) {
		require.NotEqual(t, id4, r.ID, "the revNAT entry of the deleted service is gone")
	}
	require.Empty(t, backendIDs(d), "no backend left")
	k.requireRefused(t, ips[0], 80, unreachable)
	k.requireRefused(t, ips[1], 80, unreachable)

	// The ID is free: an API service may take it.
	id, _, err := k.engine.Upsert(kctx(t), &lb.Service{
		Frontend: lb.Frontend{L3n4Addr: frontend(netip.MustParseAddr("198.18.250.1"), 80), ID: lb.ServiceID(id4)},
		Backends: []lb.Backend{a[0].backend(lb.TCP, lb.BackendStateActive)},
	})
	require.NoError(t, err)
	require.EqualValues(t, id4, id)
	k.requireServedBy(t, netip.MustParseAddr("198.18.250.1"), 80, 10, a[0])
	k.converge(t)
}
