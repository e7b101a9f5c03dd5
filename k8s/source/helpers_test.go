package source

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const testNode = "node-a"

// t0 is the creation time of test services; svcAt shifts it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// service returns a ClusterIP service ns/name on ip with port http
// 80/TCP, created at t0, changed by mods.
func service(ns, name, ip string, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			CreationTimestamp: metav1.NewTime(t0),
		},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func createdAt(d time.Duration) func(*corev1.Service) {
	return func(s *corev1.Service) { s.CreationTimestamp = metav1.NewTime(t0.Add(d)) }
}

func externalIPs(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
}

func nodePort(port int32) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = port
	}
}

func rv(v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.ResourceVersion = v }
}

// ep is an endpoint: address, node and conditions as "r" (ready), "t"
// (serving, terminating), "n" (not serving, terminating).
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
	}
	return e
}

// slice returns an IPv4 EndpointSlice ns/name for service svcName with
// port http 8080/TCP and ready endpoints on addrs.
func slice(ns, name, svcName string, addrs ...string) *discoveryv1.EndpointSlice {
	eps := make([]discoveryv1.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = ep(a, "", "r")
	}
	return sliceOf(ns, name, svcName, eps...)
}

func sliceOf(ns, name, svcName string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-slice-" + ns + "-" + name),
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func fe(s string) lb.L3n4Addr {
	a, err := lb.ParseL3n4Addr(s)
	if err != nil {
		panic(err)
	}
	return a
}

// render writes a service on one line:
//
//	ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active,local) ...
func render(s *lb.Service) string {
	var b strings.Builder
	b.WriteString(s.Type.String() + " " + s.Frontend.String())
	if s.ExtTrafficPolicyLocal {
		b.WriteString(" ext-local")
	}
	if s.IntTrafficPolicyLocal {
		b.WriteString(" int-local")
	}
	if s.SessionAffinity {
		b.WriteString(" affinity=" + strconv.Itoa(int(s.SessionAffinityTimeout)))
	}
	b.WriteString(" ->")
	for _, be := range s.Backends {
		b.WriteString(" " + be.String() + "(" + be.State.String())
		if be.NodeLocal {
			b.WriteString(",local")
		}
		b.WriteString(")")
	}
	return b.String()
}

// renderChange writes a change as "+ service" and "- frontend" lines.
func renderChange(c Change) []string {
	var out []string
	for _, fe := range c.Deletes {
		out = append(out, "- "+fe.String())
	}
	for _, s := range c.Upserts {
		out = append(out, "+ "+render(s))
	}
	return out
}

// ok returns the results of a round in which every call and item worked.
func ok(c Change) Round {
	return Round{
		Change:        c,
		DeleteResults: make([]actorlb.DeleteResult, len(c.Deletes)),
		UpsertResults: make([]actorlb.UpsertResult, len(c.Upserts)),
	}
}

// applyAll applies whatever is pending, successfully, and returns it.
func applyAll(tb testing.TB, st *State) []string {
	tb.Helper()
	c := st.Pending()
	for _, s := range c.Upserts {
		if s.Source != lb.SourceKubernetes {
			tb.Fatalf("service %s has source %s", s.Frontend, s.Source)
		}
	}
	rep := st.Commit(ok(c))
	if rep.Failed != 0 {
		tb.Fatalf("commit of a clean round failed: %v", rep.FirstError)
	}
	if p := st.Pending(); !p.Empty() {
		tb.Fatalf("still pending after a clean commit: %v", renderChange(p))
	}
	return renderChange(c)
}
