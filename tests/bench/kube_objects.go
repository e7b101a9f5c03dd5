package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/actorlb/actorlb/k8s/translate"
	lb "github.com/actorlb/actorlb/loadbalancer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The bench's Kubernetes objects: ClusterIP services of one TCP port
// named http (80 -> the slice port of the same name), each with one IPv4
// EndpointSlice of ready endpoints in 198.18.0.0/16.
const (
	kubePortName = "http"
	kubePort     = 80
)

// endpointAddr is the address of endpoint j of service i of a set whose
// endpoints start at index base of 198.18.0.0/16; with the port of
// endpointPort, every (address, port) of a set of up to 65,530 services
// of 10 endpoints is distinct. Indices stay below 64,000; probes use the
// addresses above (probeAddr).
func endpointAddr(i, j, perService int) netip.Addr {
	idx := (i%6400)*perService + j
	return netip.AddrFrom4([4]byte{198, 18, byte(idx >> 8), byte(idx)})
}

func endpointPort(i int) int32 { return int32(8000 + i/6400) }

// probeAddr is endpoint j of latency probe k (addresses 198.18.250.0 and
// up, which no loaded service uses).
func probeAddr(k, j int) netip.Addr {
	idx := 64000 + (k*4+j)%1500
	return netip.AddrFrom4([4]byte{198, 18, byte(idx >> 8), byte(idx)})
}

// clusterIP is the cluster IP of loaded service idx: 198.19.1.0 and up
// (198.19.0.1 is the apiserver's own service). Loaded services set theirs:
// the apiserver allocates a given IP about three times faster than it
// picks one (about 100 services/s on the 2-core VM whatever the
// concurrency); the probes of the latency scenario let it pick.
func clusterIP(idx int) string {
	v := 256 + idx
	return netip.AddrFrom4([4]byte{198, 19, byte(v >> 8), byte(v)}).String()
}

// maxClusterIPs bounds the loaded services' indices in 198.19.0.0/16.
const maxClusterIPs = 65000

func kubeService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: kubePortName, Port: kubePort, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString(kubePortName)}},
		},
	}
}

func kubeSlice(ns, service, name string, port int32, addrs []netip.Addr) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "actorlb-bench"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(kubePortName), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return s
}

// want is the translation of svc and its slices for svc's ClusterIP
// frontend on port 80: the backends the maps must hold.
func want(svc *corev1.Service, slices ...*discoveryv1.EndpointSlice) (lb.L3n4Addr, []lb.Backend, error) {
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		return lb.L3n4Addr{}, nil, fmt.Errorf("service %s/%s: cluster IP %q: %w", svc.Namespace, svc.Name, svc.Spec.ClusterIP, err)
	}
	fe := lb.L3n4Addr{Addr: ip, Port: kubePort, Protocol: lb.TCP}
	out := translate.Translate(translate.Input{Service: svc, Slices: slices})
	for _, s := range out.Services {
		if s.Frontend.L3n4Addr == fe {
			if s.Backends == nil {
				return fe, []lb.Backend{}, nil
			}
			return fe, s.Backends, nil
		}
	}
	return fe, nil, fmt.Errorf("service %s/%s: no frontend %s in its translation", svc.Namespace, svc.Name, fe)
}

// createLoaded creates services [from, to) of a set in ns (named
// prefix-i, each with its slice of perService endpoints, service i with
// cluster IP ipBase+i) from workers goroutines.
func createLoaded(ctx context.Context, c kubernetes.Interface, ns, prefix string, from, to, ipBase, perService, workers int) error {
	return forEach(max(0, to-from), workers, func(k int) error {
		if ctx.Err() != nil {
			return nil // stop creating; as before, not an error of its own
		}
		i := from + k
		name := prefix + "-" + strconv.Itoa(i)
		addrs := make([]netip.Addr, perService)
		for j := range addrs {
			addrs[j] = endpointAddr(i, j, perService)
		}
		if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, kubeSlice(ns, name, name+"-1", endpointPort(i), addrs), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create slice %s/%s-1: %w", ns, name, err)
		}
		svc := kubeService(ns, name)
		svc.Spec.ClusterIP = clusterIP(ipBase + i)
		if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create service %s/%s: %w", ns, name, err)
		}
		return nil
	})
}

// deleteAllIn deletes every Service and EndpointSlice of ns from workers
// goroutines (services one by one: they have no delete-collection).
func deleteAllIn(ctx context.Context, c kubernetes.Interface, ns string, workers int) error {
	svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("delete services of %s: %w", ns, err)
	}
	if err := forEach(len(svcs.Items), workers, func(i int) error {
		if ctx.Err() != nil {
			return nil
		}
		if err := c.CoreV1().Services(ns).Delete(ctx, svcs.Items[i].Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete service %s/%s: %w", ns, svcs.Items[i].Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := c.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("delete slices of %s: %w", ns, err)
	}
	return nil
}

func createNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// procCPU is the user and system CPU time so far of the process pid, from
// /proc (0 when it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux platform Go targets here.
const clockTicks = 100

// childPIDs returns the processes whose parent is this process (etcd and
// the apiserver, and the sync agent while it runs).
func childPIDs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if pp, _ := strconv.Atoi(f[1]); pp == self {
				out = append(out, pid)
			}
		}
	}
	return out
}

// controlPlaneCPU is the CPU time so far of the given processes.
func controlPlaneCPU(pids []int) time.Duration {
	var t time.Duration
	for _, p := range pids {
		t += procCPU(p)
	}
	return t
}
