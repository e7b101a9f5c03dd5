package translate

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	testNS   = "default"
	testName = "web"
	testNode = "node-a"
)

func ptr[T any](v T) *T { return &v }

// service returns a ClusterIP service default/web on 10.96.0.10 with port
// http 80/TCP, changed by mods.
func service(mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testName},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// ep is an endpoint: address, node and conditions as "r" (ready), "t"
// (serving, terminating), "n" (not serving, terminating), "u" (unset), "x"
// (not ready, serving, not terminating).
func ep(addr, node, cond string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}}
	if node != "" {
		e.NodeName = ptr(node)
	}
	switch cond {
	case "r":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case "t":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	case "n":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	case "x":
		e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(false)}
	}
	return e
}

// sport is a slice port.
func sport(name string, port int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(proto)}
}

// slice returns an EndpointSlice of default/web.
func slice(name string, at discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: testName}},
		AddressType: at,
		Ports:       ports,
		Endpoints:   eps,
	}
}

// httpSlice is an IPv4 slice with port http 8080/TCP.
func httpSlice(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return slice(name, discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{sport("http", 8080, corev1.ProtocolTCP)}, eps...)
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// render writes a service on one line:
//
//	ClusterIP 10.96.0.10:80/TCP [ext-local] [int-local] [affinity=N] [ranges=P,P] -> 10.0.0.1:8080/TCP(active,local) ...
//
// with weight=N only when it is not the default.
func render(s *lb.Service) string {
	var b strings.Builder
	b.WriteString(s.Type.String() + " " + s.Frontend.String())
	if s.Frontend.ID != 0 {
		b.WriteString(" id=" + strconv.Itoa(int(s.Frontend.ID)))
	}
	if s.ExtTrafficPolicyLocal {
		b.WriteString(" ext-local")
	}
	if s.IntTrafficPolicyLocal {
		b.WriteString(" int-local")
	}
	if s.SessionAffinity {
		b.WriteString(" affinity=" + strconv.Itoa(int(s.SessionAffinityTimeout)))
	}
	if s.LBAlgorithm != lb.LBAlgDefault {
		b.WriteString(" algo=" + s.LBAlgorithm.String())
	}
	if len(s.SourceRanges) > 0 {
		var ps []string
		for _, p := range s.SourceRanges {
			ps = append(ps, p.String())
		}
		b.WriteString(" ranges=" + strings.Join(ps, ","))
	}
	b.WriteString(" ->")
	for _, be := range s.Backends {
		b.WriteString(" " + be.String() + "(" + be.State.String())
		if be.NodeLocal {
			b.WriteString(",local")
		}
		if be.Weight != lb.DefaultBackendWeight {
			b.WriteString(",weight=" + strconv.Itoa(int(be.Weight)))
		}
		b.WriteString(")")
	}
	return b.String()
}

func renderAll(tb testing.TB, out Output) []string {
	tb.Helper()
	lines := make([]string, len(out.Services))
	for i, s := range out.Services {
		lines[i] = render(s)
	}
	return lines
}

func reasons(out Output) []Reason {
	rs := make([]Reason, len(out.Skipped))
	for i, s := range out.Skipped {
		rs[i] = s.Reason
	}
	return rs
}
