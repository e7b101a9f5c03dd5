package translate

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/actorlb/actorlb/internal/testutil"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func pick[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

func maybe[T any](r *rand.Rand, v T) *T {
	if r.IntN(4) == 0 {
		return nil
	}
	return &v
}

var (
	randIPs = []string{"10.96.0.10", "10.0.0.1", "10.0.0.2", "10.0.0.3", "192.168.1.10", "fd00::1", "fd00::2",
		"fd00:96::10", "0.0.0.0", "::", "None", "", "bogus", "::ffff:10.0.0.4", "fe80::1%eth0", "255.255.255.255", "127.0.0.1"}
	randNames  = []string{"http", "dns", "", "web"}
	randProtos = []corev1.Protocol{tcp, udp, sctp, "", "ICMP"}
	randPorts  = []int32{80, 53, 8080, 0, -1, 70000, 30080}
	randTypes  = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer,
		corev1.ServiceTypeExternalName, ""}
	randAddrTypes = []discoveryv1.AddressType{v4, v6, discoveryv1.AddressTypeFQDN, "IPX"}
)

// randomInput returns a service (or nil) and slices built from a small
// vocabulary, so that names, ports and addresses often meet.
func randomInput(r *rand.Rand) Input {
	in := Input{NodeName: pick(r, "", testNode, "node-b"), OmitSurrogate: r.IntN(2) == 0,
		NodeAddresses: addrs(pick(r, "192.168.1.10", "10.96.0.10"), pick(r, "fd00:1::10", "::ffff:192.168.1.11", "0.0.0.0"))}
	if r.IntN(8) != 0 {
		s := service()
		s.Spec.Type = pick(r, randTypes...)
		s.Spec.ClusterIPs = nil
		for range r.IntN(3) + 0 {
			s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, pick(r, randIPs...))
		}
		s.Spec.ClusterIP = pick(r, append(slices.Clone(s.Spec.ClusterIPs), "")...)
		s.Spec.Ports = nil
		for range r.IntN(4) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: pick(r, randNames...), Port: pick(r, randPorts...),
				Protocol: pick(r, randProtos...), NodePort: pick(r, randPorts...)})
		}
		for range r.IntN(3) {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, pick(r, randIPs...))
		}
		for range r.IntN(3) {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{
				IP: pick(r, randIPs...), IPMode: maybe(r, pick(r, corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy))})
		}
		if r.IntN(2) == 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		s.Spec.InternalTrafficPolicy = maybe(r, pick(r, local, corev1.ServiceInternalTrafficPolicyCluster))
		if r.IntN(2) == 0 {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{
				TimeoutSeconds: maybe(r, pick[int32](r, 0, -5, 600, 86400, 1<<30))}}
		}
		if r.IntN(10) == 0 {
			s.Labels = map[string]string{LabelServiceProxyName: "x"}
		}
		in.Service = s
	}
	for i := range r.IntN(4) {
		if r.IntN(20) == 0 {
			in.Slices = append(in.Slices, nil)
			continue
		}
		var ports []discoveryv1.EndpointPort
		for range r.IntN(3) {
			ports = append(ports, discoveryv1.EndpointPort{Name: maybe(r, pick(r, randNames...)),
				Port: maybe(r, pick(r, randPorts...)), Protocol: maybe(r, pick(r, randProtos...))})
		}
		var eps []discoveryv1.Endpoint
		for range r.IntN(5) {
			e := ep(pick(r, randIPs...), pick(r, "", testNode, "node-b"), pick(r, "r", "t", "n", "u", "x"))
			if r.IntN(10) == 0 {
				e.Addresses = nil
			}
			eps = append(eps, e)
		}
		s := slice("web-"+strconv.Itoa(i), pick(r, randAddrTypes...), ports, eps...)
		if r.IntN(10) == 0 {
			s.Labels[corev1.IsHeadlessService] = ""
		}
		if r.IntN(10) == 0 {
			s.Labels[discoveryv1.LabelServiceName] = "api"
		}
		in.Slices = append(in.Slices, s)
	}
	return in
}

// checkOutput asserts what holds for every output.
func checkOutput(tb testing.TB, in Input, out Output) {
	tb.Helper()
	seen := make(map[lb.L3n4Addr]bool)
	for i, s := range out.Services {
		require.NoError(tb, s.Validate(), render(s))
		require.Zero(tb, s.Frontend.ID, render(s))
		require.False(tb, seen[s.Frontend.L3n4Addr], "duplicate frontend %s", render(s))
		seen[s.Frontend.L3n4Addr] = true
		if i > 0 {
			require.Negative(tb, out.Services[i-1].Frontend.L3n4Addr.Compare(s.Frontend.L3n4Addr), "not sorted at %d", i)
		}
		require.True(tb, slices.IsSortedFunc(s.Backends, func(a, b lb.Backend) int { return a.L3n4Addr.Compare(b.L3n4Addr) }))
		if s.Type == lb.SVCTypeClusterIP {
			require.False(tb, s.ExtTrafficPolicyLocal, render(s))
		} else {
			require.False(tb, s.IntTrafficPolicyLocal, render(s))
		}
		for _, be := range s.Backends {
			require.Equal(tb, lb.DefaultBackendWeight, be.Weight, render(s))
			require.Contains(tb, []lb.BackendState{lb.BackendStateActive, lb.BackendStateTerminating}, be.State, render(s))
			require.True(tb, servingEndpoint(in, be.Addr), "backend %s is no serving endpoint", be)
		}
	}
	require.True(tb, slices.IsSortedFunc(out.Skipped, compareSkips))
	for _, sk := range out.Skipped {
		require.NotEmpty(tb, sk.Reason)
		require.NotEmpty(tb, sk.Detail, sk.String())
	}
}

func servingEndpoint(in Input, a netip.Addr) bool {
	for _, s := range in.Slices {
		if s == nil {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) > 0 && e.Addresses[0] != "" {
				if b, err := netip.ParseAddr(e.Addresses[0]); err == nil && b.Unmap() == a &&
					(e.Conditions.Serving == nil || *e.Conditions.Serving) {
					return true
				}
			}
		}
	}
	return false
}

func TestTranslateRandomInputsKeepTheInvariants(t *testing.T) {
	r := testutil.Rand(t)
	for i := range 3000 {
		in := randomInput(r)
		out := Translate(in)
		checkOutput(t, in, out)
		// Same input, slices in another order: same output.
		in2 := in
		in2.Slices = slices.Clone(in.Slices)
		r.Shuffle(len(in2.Slices), func(a, b int) { in2.Slices[a], in2.Slices[b] = in2.Slices[b], in2.Slices[a] })
		require.Equal(t, out, Translate(in2), "iteration %d", i)
	}
}

func FuzzTranslate(f *testing.F) {
	f.Add("10.96.0.10", "fd00:96::10", "198.51.100.5", "10.0.0.1", "http", "http", "TCP", "IPv4", int32(80), int32(8080), int32(30080), uint8(0), uint8(1))
	f.Add("None", "", "", "fd00::1", "", "", "UDP", "IPv6", int32(53), int32(53), int32(0), uint8(2), uint8(3))
	f.Add("::ffff:10.0.0.1", "10.0.0.2", "10.96.0.10", "10.96.0.10", "a", "a", "SCTP", "FQDN", int32(80), int32(80), int32(80), uint8(7), uint8(2))
	f.Fuzz(func(t *testing.T, ip1, ip2, extIP, epAddr, svcPortName, slicePortName, proto, addrType string,
		port, slicePort, nodePort int32, cond, typ uint8) {
		s := service()
		s.Spec.Type = randTypes[int(typ)%len(randTypes)]
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ip1, []string{ip1, ip2}
		s.Spec.Ports = []corev1.ServicePort{{Name: svcPortName, Port: port, NodePort: nodePort, Protocol: corev1.Protocol(proto)}}
		s.Spec.ExternalIPs = []string{extIP}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: extIP}}
		if cond&8 != 0 {
			s.Spec.InternalTrafficPolicy = ptr(local)
		}
		if cond&16 != 0 {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}
		e := ep(epAddr, pick(rand.New(rand.NewPCG(uint64(cond), 0)), "", testNode), string("rtnux"[int(cond)%5]))
		sl := slice("web-1", discoveryv1.AddressType(addrType),
			[]discoveryv1.EndpointPort{{Name: &slicePortName, Port: &slicePort, Protocol: ptr(corev1.Protocol(proto))}}, e, e)
		in := Input{Service: s, Slices: []*discoveryv1.EndpointSlice{sl, sl}, NodeName: testNode,
			NodeAddresses: addrs("192.168.1.10", "fd00:1::10")}
		checkOutput(t, in, Translate(in))
	})
}
