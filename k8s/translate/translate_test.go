package translate

import (
	"slices"
	"testing"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	v4    = discoveryv1.AddressTypeIPv4
	v6    = discoveryv1.AddressTypeIPv6
	tcp   = corev1.ProtocolTCP
	udp   = corev1.ProtocolUDP
	sctp  = corev1.ProtocolSCTP
	http  = []discoveryv1.EndpointPort{sport("http", 8080, tcp)}
	local = corev1.ServiceInternalTrafficPolicyLocal
)

func withType(t corev1.ServiceType) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Type = t }
}

func withNodePort(port int32) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Ports[0].NodePort = port }
}

func dualStack(s *corev1.Service) {
	s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
}

func withIngress(ings ...corev1.LoadBalancerIngress) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Status.LoadBalancer.Ingress = ings }
}

func TestTranslateRules(t *testing.T) {
	nodeAddrs := addrs("192.168.1.10", "fd00:1::10", "127.0.0.1")
	cases := []struct {
		name    string
		svc     *corev1.Service
		slices  []*discoveryv1.EndpointSlice
		node    string
		omitSur bool
		want    []string
		skipped []Reason
	}{
		{
			name:   "clusterip port takes the ready endpoints of its slice port",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.2", "", "r"), ep("10.0.0.1", "", "r"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active)"},
		},
		{
			name: "clusterip times ports, each with its own slice port",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: udp})
			}),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4,
				[]discoveryv1.EndpointPort{sport("http", 8080, tcp), sport("dns", 5353, udp)}, ep("10.0.0.1", "", "r"))},
			want: []string{
				"ClusterIP 10.96.0.10:53/UDP -> 10.0.0.1:5353/UDP(active)",
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)",
			},
		},
		{
			name: "a service without slices has frontends without backends",
			svc:  service(),
			want: []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name: "an old object with clusterIP and no clusterIPs uses clusterIP",
			svc:  service(func(s *corev1.Service) { s.Spec.ClusterIPs = nil }),
			want: []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name: "dual stack: one frontend per family, each with the slices of its addressType",
			svc:  service(dualStack),
			slices: []*discoveryv1.EndpointSlice{
				httpSlice("web-v4", ep("10.0.0.1", "", "r")),
				slice("web-v6", v6, http, ep("fd00::1", "", "r")),
			},
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)",
				"ClusterIP [fd00:96::10]:80/TCP -> [fd00::1]:8080/TCP(active)",
			},
		},
		{
			name:   "single stack IPv4: an IPv6 slice has no frontend to serve",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{slice("web-v6", v6, http, ep("fd00::1", "", "r"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name:    "an endpoint not of its slice's addressType is skipped",
			svc:     service(),
			slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("fd00::1", "", "r"), ep("10.0.0.1", "", "r"))},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
			skipped: []Reason{ReasonIPFamily},
		},
		{
			name: "only ready endpoints while any is ready",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1",
				ep("10.0.0.1", "", "r"), ep("10.0.0.2", "", "t"), ep("10.0.0.3", "", "n"), ep("10.0.0.4", "", "x"))},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
		},
		{
			name: "none ready: serving terminating endpoints become terminating backends, never non-serving ones",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1",
				ep("10.0.0.2", "", "t"), ep("10.0.0.3", "", "n"), ep("10.0.0.4", "", "x"), ep("10.0.0.5", "", "t"))},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.2:8080/TCP(terminating) 10.0.0.5:8080/TCP(terminating)"},
		},
		{
			name:   "unset conditions mean ready and serving",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "u"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
		},
		{
			name:   "a slice port of another name gives no backends",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4, []discoveryv1.EndpointPort{sport("web", 8080, tcp)}, ep("10.0.0.1", "", "r"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name:   "a slice port of the same name and another protocol gives no backends",
			svc:    service(),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4, []discoveryv1.EndpointPort{sport("http", 8080, udp)}, ep("10.0.0.1", "", "r"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name:   "targetPort plays no part: the slice port number is the backend port",
			svc:    service(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(9999) }),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
			want:   []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
		},
		{
			name: "unnamed ports match by the empty name",
			svc:  service(func(s *corev1.Service) { s.Spec.Ports[0].Name = "" }),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4, []discoveryv1.EndpointPort{sport("", 8080, tcp)},
				ep("10.0.0.1", "", "r"))},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
		},
		{
			name: "several slices merge; an endpoint in two slices counts once, in its best state",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{
				httpSlice("web-1", ep("10.0.0.1", "", "r"), ep("10.0.0.2", "", "n")),
				httpSlice("web-2", ep("10.0.0.2", "", "r"), ep("10.0.0.3", "", "r"), ep("10.0.0.1", "", "t")),
			},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.2:8080/TCP(active) 10.0.0.3:8080/TCP(active)"},
		},
		{
			name: "an endpoint in two slices is node-local if either says so",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{
				httpSlice("web-1", ep("10.0.0.1", "node-b", "r")),
				httpSlice("web-2", ep("10.0.0.1", testNode, "r")),
			},
			node: testNode,
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active,local)"},
		},
		{
			name: "the same address on two slice port numbers is two backends",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{
				httpSlice("web-1", ep("10.0.0.1", "", "r")),
				slice("web-2", v4, []discoveryv1.EndpointPort{sport("http", 8081, tcp)}, ep("10.0.0.1", "", "r")),
			},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active) 10.0.0.1:8081/TCP(active)"},
		},
		{
			name: "FQDN slices are ignored",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{
				slice("web-fqdn", discoveryv1.AddressTypeFQDN, http, ep("example.com", "", "r")),
				httpSlice("web-1", ep("10.0.0.1", "", "r")),
			},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
			skipped: []Reason{ReasonFQDNSlice},
		},
		{
			name:    "headless services are skipped",
			svc:     service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
			slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
			skipped: []Reason{ReasonHeadless},
		},
		{
			name:    "a service without a ClusterIP is skipped",
			svc:     service(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }),
			skipped: []Reason{ReasonNoClusterIP},
		},
		{
			name: "ExternalName services are skipped",
			svc: service(withType(corev1.ServiceTypeExternalName), func(s *corev1.Service) {
				s.Spec.ExternalName = "db.example.com"
			}),
			skipped: []Reason{ReasonExternalName},
		},
		{
			name: "services labelled service-proxy-name are skipped",
			svc: service(func(s *corev1.Service) {
				s.Labels = map[string]string{LabelServiceProxyName: "other-proxy"}
			}),
			slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
			skipped: []Reason{ReasonServiceProxyName},
		},
		{
			name: "slices labelled headless are skipped",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := httpSlice("web-1", ep("10.0.0.1", "", "r"))
				s.Labels[corev1.IsHeadlessService] = ""
				return s
			}()},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonHeadlessSlice},
		},
		{
			name: "a slice relabelled to another service or in another namespace is skipped",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{
				func() *discoveryv1.EndpointSlice {
					s := httpSlice("web-1", ep("10.0.0.1", "", "r"))
					s.Labels[discoveryv1.LabelServiceName] = "api"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := httpSlice("web-2", ep("10.0.0.2", "", "r"))
					s.Namespace = "other"
					return s
				}(),
			},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonOtherService, ReasonOtherService},
		},
		{
			name:    "slices that arrive before their service give nothing",
			slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r")), nil},
			skipped: []Reason{ReasonNoService, ReasonInvalidSlice},
		},
		{
			name: "a deleted service without slices gives nothing",
		},
		{
			name:   "NodePort: the surrogate and the node addresses of the family",
			svc:    service(withType(corev1.ServiceTypeNodePort), withNodePort(30080)),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
			want: []string{
				"NodePort 0.0.0.0:30080/TCP -> 10.0.0.1:8080/TCP(active)",
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)",
				"NodePort 127.0.0.1:30080/TCP -> 10.0.0.1:8080/TCP(active)",
				"NodePort 192.168.1.10:30080/TCP -> 10.0.0.1:8080/TCP(active)",
			},
		},
		{
			name:    "NodePort without the surrogate",
			svc:     service(withType(corev1.ServiceTypeNodePort), withNodePort(30080)),
			omitSur: true,
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP ->",
				"NodePort 127.0.0.1:30080/TCP ->",
				"NodePort 192.168.1.10:30080/TCP ->",
			},
		},
		{
			name: "NodePort dual stack: a surrogate and node addresses per family",
			svc:  service(withType(corev1.ServiceTypeNodePort), withNodePort(30080), dualStack),
			slices: []*discoveryv1.EndpointSlice{
				httpSlice("web-v4", ep("10.0.0.1", "", "r")),
				slice("web-v6", v6, http, ep("fd00::1", "", "r")),
			},
			want: []string{
				"NodePort 0.0.0.0:30080/TCP -> 10.0.0.1:8080/TCP(active)",
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)",
				"NodePort 127.0.0.1:30080/TCP -> 10.0.0.1:8080/TCP(active)",
				"NodePort 192.168.1.10:30080/TCP -> 10.0.0.1:8080/TCP(active)",
				"NodePort [::]:30080/TCP -> [fd00::1]:8080/TCP(active)",
				"NodePort [fd00:1::10]:30080/TCP -> [fd00::1]:8080/TCP(active)",
				"ClusterIP [fd00:96::10]:80/TCP -> [fd00::1]:8080/TCP(active)",
			},
		},
		{
			name:    "a nodePort on a ClusterIP service is ignored",
			svc:     service(withNodePort(30080)),
			omitSur: true,
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name: "LoadBalancer: ClusterIP, NodePort and the ingress IPs",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), withNodePort(30080),
				withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7", IPMode: ptr(corev1.LoadBalancerIPModeVIP)})),
			omitSur: true,
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP ->",
				"NodePort 127.0.0.1:30080/TCP ->",
				"NodePort 192.168.1.10:30080/TCP ->",
				"LoadBalancer 203.0.113.7:80/TCP ->",
			},
		},
		{
			name: "LoadBalancer with allocateLoadBalancerNodePorts false has no NodePort frontends",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
			}, withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"})),
			want: []string{"ClusterIP 10.96.0.10:80/TCP ->", "LoadBalancer 203.0.113.7:80/TCP ->"},
		},
		{
			name: "LoadBalancer with allocateLoadBalancerNodePorts false and an explicit nodePort serves it, as kube-proxy",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), withNodePort(30080), func(s *corev1.Service) {
				s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
			}),
			omitSur: true,
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->", "NodePort 127.0.0.1:30080/TCP ->", "NodePort 192.168.1.10:30080/TCP ->"},
		},
		{
			name: "LoadBalancer ingresses without an IP, in ipMode Proxy or of another family are skipped",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), withIngress(
				corev1.LoadBalancerIngress{Hostname: "lb.example.com"},
				corev1.LoadBalancerIngress{IP: "203.0.113.8", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
				corev1.LoadBalancerIngress{IP: "2001:db8::8"},
				corev1.LoadBalancerIngress{IP: "not-an-ip"},
			)),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonIngressHostname, ReasonIngressProxyMode, ReasonIPFamily, ReasonInvalidIP},
		},
		{
			name: "LoadBalancer source ranges: the ingress frontends get those of their family, masked, without repeats",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), dualStack, withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"}, corev1.LoadBalancerIngress{IP: "2001:db8::7"}),
				func(s *corev1.Service) {
					s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", " 10.1.2.3/8", "2001:db8:1::/48", "10.0.0.0/8", "::ffff:192.0.2.0/120"}
				}),
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP ->",
				"LoadBalancer 203.0.113.7:80/TCP ranges=198.51.100.0/24,10.0.0.0/8,192.0.2.0/24 ->",
				"LoadBalancer [2001:db8::7]:80/TCP ranges=2001:db8:1::/48 ->",
				"ClusterIP [fd00:96::10]:80/TCP ->",
			},
		},
		{
			name: "LoadBalancer source ranges: a frontend left with none of its family is skipped, not opened",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), dualStack, withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"}, corev1.LoadBalancerIngress{IP: "2001:db8::7"}),
				func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"} }),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->", "LoadBalancer 203.0.113.7:80/TCP ranges=198.51.100.0/24 ->", "ClusterIP [fd00:96::10]:80/TCP ->"},
			skipped: []Reason{ReasonSourceRanges},
		},
		{
			name: "LoadBalancer source ranges: an entry that is not a CIDR skips every ingress frontend",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"}),
				func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "bogus"} }),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonSourceRanges},
		},
		{
			name: "LoadBalancer source ranges do not apply to NodePort and ExternalIPs frontends",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"}),
				func(s *corev1.Service) {
					s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
					s.Spec.ExternalIPs = []string{"198.51.100.5"}
					s.Spec.Ports[0].NodePort = 30080
				}),
			omitSur: true,
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP ->", "NodePort 127.0.0.1:30080/TCP ->", "NodePort 192.168.1.10:30080/TCP ->",
				"ExternalIPs 198.51.100.5:80/TCP ->", "LoadBalancer 203.0.113.7:80/TCP ranges=198.51.100.0/24 ->",
			},
		},
		{
			name: "ExternalIPs frontends, of the service's families only",
			svc: service(func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"198.51.100.5", "2001:db8::5", "bogus", "0.0.0.0"}
			}),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)",
				"ExternalIPs 198.51.100.5:80/TCP -> 10.0.0.1:8080/TCP(active)",
			},
			skipped: []Reason{ReasonIPFamily, ReasonInvalidIP, ReasonInvalidIP},
		},
		{
			name: "a frontend address used twice keeps its first kind",
			svc: service(withType(corev1.ServiceTypeLoadBalancer), func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"203.0.113.7", "10.96.0.10"}
			}, withIngress(corev1.LoadBalancerIngress{IP: "203.0.113.7"})),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->", "LoadBalancer 203.0.113.7:80/TCP ->"},
			skipped: []Reason{ReasonDuplicateFrontend, ReasonDuplicateFrontend},
		},
		{
			name: "internalTrafficPolicy Local: the ClusterIP frontend is int-local, backends on this node are node-local",
			svc:  service(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = ptr(local) }),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1",
				ep("10.0.0.1", testNode, "r"), ep("10.0.0.2", "node-b", "r"), ep("10.0.0.3", "", "r"))},
			node: testNode,
			want: []string{"ClusterIP 10.96.0.10:80/TCP int-local -> 10.0.0.1:8080/TCP(active,local) 10.0.0.2:8080/TCP(active) 10.0.0.3:8080/TCP(active)"},
		},
		{
			name: "internalTrafficPolicy Local: a local serving terminating endpoint stays while only remote ones are ready",
			svc:  service(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = ptr(local) }),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1",
				ep("10.0.0.1", testNode, "t"), ep("10.0.0.2", "node-b", "r"), ep("10.0.0.3", "node-b", "t"))},
			node: testNode,
			want: []string{"ClusterIP 10.96.0.10:80/TCP int-local -> 10.0.0.1:8080/TCP(terminating,local) 10.0.0.2:8080/TCP(active)"},
		},
		{
			name: "without a node name no endpoint is node-local",
			svc:  service(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = ptr(local) }),
			slices: []*discoveryv1.EndpointSlice{httpSlice("web-1",
				ep("10.0.0.1", "", "r"))},
			want: []string{"ClusterIP 10.96.0.10:80/TCP int-local -> 10.0.0.1:8080/TCP(active)"},
		},
		{
			name: "externalTrafficPolicy Local: the frontends with an external side only",
			svc: service(withType(corev1.ServiceTypeNodePort), withNodePort(30080), func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"198.51.100.5"}
			}),
			slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", testNode, "r"), ep("10.0.0.2", "node-b", "r"))},
			node:    testNode,
			omitSur: true,
			want: []string{
				"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active,local) 10.0.0.2:8080/TCP(active)",
				"NodePort 127.0.0.1:30080/TCP ext-local -> 10.0.0.1:8080/TCP(active,local) 10.0.0.2:8080/TCP(active)",
				"NodePort 192.168.1.10:30080/TCP ext-local -> 10.0.0.1:8080/TCP(active,local) 10.0.0.2:8080/TCP(active)",
				"ExternalIPs 198.51.100.5:80/TCP ext-local -> 10.0.0.1:8080/TCP(active,local) 10.0.0.2:8080/TCP(active)",
			},
		},
		{
			name: "externalTrafficPolicy Local on a ClusterIP service is ignored",
			svc: service(func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"198.51.100.5"}
			}),
			want: []string{"ClusterIP 10.96.0.10:80/TCP ->", "ExternalIPs 198.51.100.5:80/TCP ->"},
		},
		{
			name: "sessionAffinity ClientIP without a timeout has the default 10800",
			svc:  service(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
			want: []string{"ClusterIP 10.96.0.10:80/TCP affinity=10800 ->"},
		},
		{
			name: "sessionAffinity ClientIP with timeoutSeconds",
			svc: service(func(s *corev1.Service) {
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](600)}}
			}),
			want: []string{"ClusterIP 10.96.0.10:80/TCP affinity=600 ->"},
		},
		{
			name: "a timeoutSeconds without sessionAffinity ClientIP does nothing",
			svc: service(func(s *corev1.Service) {
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](600)}}
			}),
			want: []string{"ClusterIP 10.96.0.10:80/TCP ->"},
		},
		{
			name: "UDP and SCTP ports",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: udp}, {Name: "sig", Port: 3868, Protocol: sctp}}
			}),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4,
				[]discoveryv1.EndpointPort{sport("dns", 53, udp), sport("sig", 3868, sctp)}, ep("10.0.0.1", "", "r"))},
			want: []string{
				"ClusterIP 10.96.0.10:53/UDP -> 10.0.0.1:53/UDP(active)",
				"ClusterIP 10.96.0.10:3868/SCTP -> 10.0.0.1:3868/SCTP(active)",
			},
		},
		{
			name: "service ports with an unknown protocol, port 0 or repeated are skipped",
			svc: service(func(s *corev1.Service) {
				s.Spec.Ports = append(s.Spec.Ports,
					corev1.ServicePort{Name: "x", Port: 81, Protocol: "ICMP"},
					corev1.ServicePort{Name: "y", Port: 0, Protocol: tcp},
					corev1.ServicePort{Name: "z", Port: 80, Protocol: tcp})
			}),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		},
		{
			name: "malformed slice ports and endpoints are skipped",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4,
				[]discoveryv1.EndpointPort{{Name: nil, Port: ptr[int32](1)}, {Name: ptr("http")}, sport("http", 8080, "ICMP"), {Name: ptr("http"), Port: ptr[int32](8080)}},
				ep("10.0.0.1", "", "r"), discoveryv1.Endpoint{}, ep("garbage", "", "r"), ep("0.0.0.0", "", "r"))},
			want: []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:8080/TCP(active)"},
			skipped: []Reason{ReasonInvalidEndpoint, ReasonInvalidEndpoint, ReasonInvalidEndpoint,
				ReasonInvalidSlicePort, ReasonInvalidSlicePort, ReasonInvalidSlicePort},
		},
		{
			name:    "a slice of an unknown addressType is skipped",
			svc:     service(),
			slices:  []*discoveryv1.EndpointSlice{slice("web-1", "IPX", http, ep("10.0.0.1", "", "r"))},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonInvalidSlice},
		},
		{
			name: "a backend that is the frontend itself is dropped",
			svc:  service(),
			slices: []*discoveryv1.EndpointSlice{slice("web-1", v4, []discoveryv1.EndpointPort{sport("http", 80, tcp)},
				ep("10.96.0.10", "", "r"), ep("10.0.0.1", "", "r"))},
			want:    []string{"ClusterIP 10.96.0.10:80/TCP -> 10.0.0.1:80/TCP(active)"},
			skipped: []Reason{ReasonInvalidBackend},
		},
		{
			name:    "an invalid ClusterIP is skipped, the valid one kept",
			svc:     service(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fe80::1%eth0"} }),
			want:    []string{"ClusterIP 10.96.0.10:80/TCP ->"},
			skipped: []Reason{ReasonInvalidIP},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := Translate(Input{Service: tc.svc, Slices: tc.slices, NodeName: tc.node, NodeAddresses: nodeAddrs, OmitSurrogate: tc.omitSur})
			want := tc.want
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, renderAll(t, out))
			got := reasons(out)
			wantSkips := slices.Clone(tc.skipped)
			slices.Sort(got)
			slices.Sort(wantSkips)
			if len(wantSkips) == 0 {
				wantSkips = []Reason{}
			}
			assert.Equal(t, wantSkips, got, "skipped: %v", out.Skipped)
			for _, s := range out.Services {
				require.NoError(t, s.Validate(), render(s))
				assert.Zero(t, s.Frontend.ID, "the engine allocates IDs")
			}
		})
	}
}

func TestBackendsHaveTheDefaultWeight(t *testing.T) {
	out := Translate(Input{Service: service(), Slices: []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"), ep("10.0.0.2", "", "t"))}})
	require.Len(t, out.Services, 1)
	require.NotEmpty(t, out.Services[0].Backends)
	for _, be := range out.Services[0].Backends {
		assert.Equal(t, lb.DefaultBackendWeight, be.Weight, be.String())
	}
}

func TestFrontendsOfOneServiceShareNoBackendSlice(t *testing.T) {
	out := Translate(Input{
		Service: service(withType(corev1.ServiceTypeNodePort), withNodePort(30080)),
		Slices:  []*discoveryv1.EndpointSlice{httpSlice("web-1", ep("10.0.0.1", "", "r"))},
	})
	require.Len(t, out.Services, 2)
	out.Services[0].Backends[0].Weight = 7
	assert.Equal(t, lb.DefaultBackendWeight, out.Services[1].Backends[0].Weight, "a change to one service's backends shows in another's")
}

func TestSkipsNameTheObjectAndField(t *testing.T) {
	out := Translate(Input{Service: service(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"bogus"} })})
	require.Len(t, out.Skipped, 1)
	assert.Equal(t, `Service default/web: invalid-ip: spec.externalIPs[0] "bogus": not a usable IP address`, out.Skipped[0].String())
}

func TestOutputDoesNotDependOnSliceOrder(t *testing.T) {
	a := httpSlice("web-1", ep("10.0.0.3", "", "r"), ep("10.0.0.1", testNode, "t"))
	b := httpSlice("web-2", ep("10.0.0.1", "", "r"), ep("10.0.0.2", "", "n"))
	c := slice("web-3", discoveryv1.AddressTypeFQDN, http)
	in := Input{Service: service(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = ptr(local) }), NodeName: testNode}
	in.Slices = []*discoveryv1.EndpointSlice{a, b, c}
	first := Translate(in)
	in.Slices = []*discoveryv1.EndpointSlice{c, b, a}
	assert.Equal(t, first, Translate(in))
}

func TestTranslateDoesNotModifyItsInput(t *testing.T) {
	svc := service(withType(corev1.ServiceTypeNodePort), withNodePort(30080))
	sl := httpSlice("web-1", ep("10.0.0.2", "", "r"), ep("10.0.0.1", "", "r"))
	svcCopy, slCopy := svc.DeepCopy(), sl.DeepCopy()
	nodeAddrs := addrs("192.168.1.10", "::ffff:192.168.1.11")
	Translate(Input{Service: svc, Slices: []*discoveryv1.EndpointSlice{sl}, NodeAddresses: nodeAddrs})
	assert.Equal(t, svcCopy, svc)
	assert.Equal(t, slCopy, sl)
	assert.Equal(t, addrs("192.168.1.10", "::ffff:192.168.1.11"), nodeAddrs)
}
