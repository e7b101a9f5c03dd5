package translate

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	lb "github.com/actorlb/actorlb/loadbalancer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// LabelServiceProxyName on a service means that another proxy handles it;
// kube-proxy and actorlb leave it alone.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Input is one service and what Translate needs to know about the node.
type Input struct {
	// Service is the service; nil means it does not exist (deleted, or
	// its slices arrived first): no frontends.
	Service *corev1.Service
	// Slices are the EndpointSlices labelled kubernetes.io/service-name
	// for the service, in any order. Slices of another service are
	// skipped.
	Slices []*discoveryv1.EndpointSlice
	// NodeName is this node's name: endpoints whose nodeName equals it are
	// node-local. Empty: no endpoint is node-local.
	NodeName string
	// NodeAddresses are the node's addresses that NodePort frontends get,
	// besides the surrogate, in the order given.
	NodeAddresses []netip.Addr
	// OmitSurrogate leaves out the surrogate NodePort frontend (0.0.0.0 or
	// ::, which the datapath uses for any local address without an exact
	// match); by default it is the first NodePort frontend of a family.
	OmitSurrogate bool
}

// Output is the desired state of one service.
type Output struct {
	// Services has one entry per frontend, sorted by frontend address,
	// port, protocol, then type. Frontend IDs are 0: the engine allocates
	// them. Backends are sorted by address, port and protocol.
	Services []*lb.Service
	// Skipped lists what was left out and why, sorted.
	Skipped []Skip
}

// Translate returns the frontends and backends of in.Service, with
// kube-proxy's semantics (see the package documentation).
func Translate(in Input) Output {
	t := translator{in: in}
	t.run()
	slices.SortFunc(t.out.Services, func(a, b *lb.Service) int {
		return cmp.Or(a.Frontend.L3n4Addr.Compare(b.Frontend.L3n4Addr), cmp.Compare(a.Type, b.Type))
	})
	t.out.Skipped = sortSkips(t.out.Skipped)
	return t.out
}

type family uint8

const (
	famV4 family = iota
	famV6
)

func familyOf(a netip.Addr) family {
	if a.Unmap().Is6() {
		return famV6
	}
	return famV4
}

func (f family) String() string {
	if f == famV6 {
		return "IPv6"
	}
	return "IPv4"
}

// endpoint is one endpoint of one slice port, after merging.
type endpoint struct {
	addr        netip.Addr
	port        uint16
	ready       bool
	serving     bool
	terminating bool
	local       bool
}

// rank orders duplicates: the node-local one first (as kube-proxy), then
// the one in the best state.
func (e endpoint) rank() int {
	r := 0
	if e.local {
		r += 4
	}
	switch {
	case e.ready:
		r += 2
	case e.serving && e.terminating:
		r++
	}
	return r
}

// portKey names a slice port: a service port matches the slice port with
// the same name and protocol.
type portKey struct {
	name  string
	proto lb.L4Type
	fam   family
}

// The translator allocates little per service (a source translates every
// service of the cluster at once when it starts): no maps, field names
// and object names formatted only for a skip.
type translator struct {
	in   Input
	out  Output
	name string // namespace/name of the service, set by svcName
	// endpoints by slice port and family, merged across slices: each
	// set sorted by address and port, without duplicates.
	endpoints []portSet
	seenFE    []seenFrontend
}

// portSet is the endpoints of one slice port and family.
type portSet struct {
	key portKey
	eps []endpoint
}

type seenFrontend struct {
	addr lb.L3n4Addr
	typ  lb.ServiceType
}

// svcName is namespace/name of the service.
func (t *translator) svcName() string {
	if t.name == "" {
		t.name = t.in.Service.Namespace + "/" + t.in.Service.Name
	}
	return t.name
}

func (t *translator) skipService(r Reason, detail string) {
	t.out.Skipped = append(t.out.Skipped, Skip{Kind: KindService, Name: t.svcName(), Reason: r, Detail: detail})
}

func (t *translator) skipSlice(name string, r Reason, detail string) {
	t.out.Skipped = append(t.out.Skipped, Skip{Kind: KindEndpointSlice, Name: name, Reason: r, Detail: detail})
}

func sliceName(s *discoveryv1.EndpointSlice) string {
	return s.Namespace + "/" + s.Name
}

func (t *translator) run() {
	svc := t.in.Service
	if svc == nil {
		for _, s := range t.in.Slices {
			if s == nil {
				t.skipSlice("(nil)", ReasonInvalidSlice, "a nil slice was given")
				continue
			}
			t.skipSlice(sliceName(s), ReasonNoService, "service "+s.Namespace+"/"+s.Labels[discoveryv1.LabelServiceName]+" is not known")
		}
		return
	}
	if v, ok := svc.Labels[LabelServiceProxyName]; ok {
		t.skipService(ReasonServiceProxyName, "label "+LabelServiceProxyName+"="+strconv.Quote(v))
		return
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		t.skipService(ReasonExternalName, "type ExternalName has no frontends")
		return
	}
	clusterIPs := t.clusterIPs()
	if len(clusterIPs) == 0 {
		return
	}
	t.collectEndpoints()

	opts := t.options()
	for i, p := range svc.Spec.Ports {
		proto, ok := parseProtocol(p.Protocol)
		if !ok {
			t.skipService(ReasonInvalidPort, portField(i)+".protocol "+strconv.Quote(string(p.Protocol))+": want TCP, UDP or SCTP")
			continue
		}
		if p.Port < 1 || p.Port > 65535 {
			t.skipService(ReasonInvalidPort, portField(i)+".port "+strconv.Itoa(int(p.Port))+": want 1..65535")
			continue
		}
		if slices.ContainsFunc(svc.Spec.Ports[:i], func(q corev1.ServicePort) bool {
			qp, ok := parseProtocol(q.Protocol)
			return ok && q.Port == p.Port && qp == proto
		}) {
			t.skipService(ReasonInvalidPort, portField(i)+" "+strconv.Itoa(int(p.Port))+"/"+proto.String()+": repeated")
			continue
		}
		t.servicePort(i, p, proto, clusterIPs, opts)
	}
}

// portField names spec.ports[i].
func portField(i int) string { return "spec.ports[" + strconv.Itoa(i) + "]" }

// clusterIPs returns the service's ClusterIPs, at most one per family, in
// the order given (the first is the primary family).
func (t *translator) clusterIPs() []netip.Addr {
	spec := &t.in.Service.Spec
	ips := spec.ClusterIPs
	if len(ips) == 0 && spec.ClusterIP != "" {
		ips = []string{spec.ClusterIP}
	}
	if len(ips) == 0 {
		t.skipService(ReasonNoClusterIP, "spec.clusterIP is not set")
		return nil
	}
	if ips[0] == corev1.ClusterIPNone || spec.ClusterIP == corev1.ClusterIPNone {
		t.skipService(ReasonHeadless, "spec.clusterIP is None")
		return nil
	}
	var out []netip.Addr
	have := [2]bool{}
	for i, s := range ips {
		a, ok := frontendIP(s)
		if !ok {
			t.skipService(ReasonInvalidIP, "spec.clusterIPs["+strconv.Itoa(i)+"] "+strconv.Quote(s)+": not a usable IP address")
			continue
		}
		if f := familyOf(a); !have[f] {
			have[f] = true
			out = append(out, a)
		}
	}
	return out
}

// frontendIP parses s as an address that can be a frontend or backend:
// valid, no zone, not unspecified, IPv4-mapped IPv6 as IPv4.
func frontendIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

func parseProtocol(p corev1.Protocol) (lb.L4Type, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return lb.TCP, true
	case corev1.ProtocolUDP:
		return lb.UDP, true
	case corev1.ProtocolSCTP:
		return lb.SCTP, true
	}
	return 0, false
}

// collectEndpoints reads the slices into t.endpoints.
func (t *translator) collectEndpoints() {
	svc := t.in.Service
	for _, s := range t.in.Slices {
		if s == nil {
			t.skipSlice("(nil)", ReasonInvalidSlice, "a nil slice was given")
			continue
		}
		if owner := s.Labels[discoveryv1.LabelServiceName]; owner != svc.Name || s.Namespace != svc.Namespace {
			t.skipSlice(sliceName(s), ReasonOtherService, "label "+discoveryv1.LabelServiceName+"="+strconv.Quote(owner)+" in namespace "+
				strconv.Quote(s.Namespace)+" is not service "+t.svcName())
			continue
		}
		if _, ok := s.Labels[corev1.IsHeadlessService]; ok {
			t.skipSlice(sliceName(s), ReasonHeadlessSlice, "label "+corev1.IsHeadlessService)
			continue
		}
		var fam family
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
			fam = famV4
		case discoveryv1.AddressTypeIPv6:
			fam = famV6
		case discoveryv1.AddressTypeFQDN:
			t.skipSlice(sliceName(s), ReasonFQDNSlice, "addressType FQDN is not load-balanced")
			continue
		default:
			t.skipSlice(sliceName(s), ReasonInvalidSlice, "addressType "+strconv.Quote(string(s.AddressType))+": want IPv4 or IPv6")
			continue
		}
		eps := t.sliceEndpoints(s, fam)
		for j, p := range s.Ports {
			field := func() string { return "ports[" + strconv.Itoa(j) + "]" }
			if p.Name == nil {
				t.skipSlice(sliceName(s), ReasonInvalidSlicePort, field()+".name is not set")
				continue
			}
			if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
				t.skipSlice(sliceName(s), ReasonInvalidSlicePort, field()+".port is not set or not 1..65535")
				continue
			}
			proto := lb.TCP // the API's default
			if p.Protocol != nil {
				var ok bool
				if proto, ok = parseProtocol(*p.Protocol); !ok {
					t.skipSlice(sliceName(s), ReasonInvalidSlicePort, field()+".protocol "+strconv.Quote(string(*p.Protocol))+": want TCP, UDP or SCTP")
					continue
				}
			}
			set := t.portSet(portKey{name: *p.Name, proto: proto, fam: fam}, len(eps))
			for _, e := range eps {
				e.port = uint16(*p.Port)
				set.eps = append(set.eps, e)
			}
		}
	}
	for i := range t.endpoints {
		t.endpoints[i].eps = mergeEndpoints(t.endpoints[i].eps)
	}
}

// portSet returns the set of k in t.endpoints, added if new, with room
// for n more endpoints.
func (t *translator) portSet(k portKey, n int) *portSet {
	for i := range t.endpoints {
		if t.endpoints[i].key == k {
			t.endpoints[i].eps = slices.Grow(t.endpoints[i].eps, n)
			return &t.endpoints[i]
		}
	}
	if t.endpoints == nil {
		t.endpoints = make([]portSet, 0, 2)
	}
	t.endpoints = append(t.endpoints, portSet{key: k, eps: make([]endpoint, 0, n)})
	return &t.endpoints[len(t.endpoints)-1]
}

// mergeEndpoints sorts eps by address and port and keeps one endpoint per
// address and port: the node-local one first (as kube-proxy), then the
// one in the best state, else the first given.
func mergeEndpoints(eps []endpoint) []endpoint {
	slices.SortStableFunc(eps, func(a, b endpoint) int {
		return cmp.Or(a.addr.Compare(b.addr), cmp.Compare(a.port, b.port), cmp.Compare(b.rank(), a.rank()))
	})
	return slices.CompactFunc(eps, func(a, b endpoint) bool { return a.addr == b.addr && a.port == b.port })
}

// sliceEndpoints returns the usable endpoints of slice s (port not set).
func (t *translator) sliceEndpoints(s *discoveryv1.EndpointSlice, fam family) []endpoint {
	out := make([]endpoint, 0, len(s.Endpoints))
	for i, e := range s.Endpoints {
		field := func() string { return "endpoints[" + strconv.Itoa(i) + "]" }
		if len(e.Addresses) == 0 {
			t.skipSlice(sliceName(s), ReasonInvalidEndpoint, field()+" has no address")
			continue
		}
		a, ok := frontendIP(e.Addresses[0])
		if !ok {
			t.skipSlice(sliceName(s), ReasonInvalidEndpoint, field()+".addresses[0] "+strconv.Quote(e.Addresses[0])+": not a usable IP address")
			continue
		}
		if familyOf(a) != fam {
			t.skipSlice(sliceName(s), ReasonIPFamily, field()+".addresses[0] "+a.String()+" in a slice of addressType "+fam.String())
			continue
		}
		c := e.Conditions
		out = append(out, endpoint{
			addr:        a,
			ready:       c.Ready == nil || *c.Ready,
			serving:     c.Serving == nil || *c.Serving,
			terminating: c.Terminating != nil && *c.Terminating,
			local:       t.in.NodeName != "" && e.NodeName != nil && *e.NodeName == t.in.NodeName,
		})
	}
	return out
}

// options are the per-service settings shared by its frontends.
type options struct {
	extLocal, intLocal bool
	affinity           bool
	timeout            uint32
	allowNodePort      bool
	allowIngress       bool
}

func (t *translator) options() options {
	spec := &t.in.Service.Spec
	o := options{}
	external := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer
	o.allowNodePort = external
	o.allowIngress = spec.Type == corev1.ServiceTypeLoadBalancer
	// As kube-proxy: the external policy exists only for NodePort and
	// LoadBalancer services (their external IPs follow it too).
	o.extLocal = external && spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	o.intLocal = spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		o.affinity = true
		o.timeout = lb.DefaultSessionAffinityTimeout
		if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			// The apiserver allows 1..86400; anything else (only from a
			// client that bypassed validation) gets the default or the
			// largest timeout the datapath stores.
			switch s := *c.ClientIP.TimeoutSeconds; {
			case s <= 0:
			case uint64(s) > uint64(lb.MaxSessionAffinityTimeout):
				o.timeout = lb.MaxSessionAffinityTimeout
			default:
				o.timeout = uint32(s)
			}
		}
	}
	return o
}

// frontend is one frontend to emit.
type frontend struct {
	addr  lb.L3n4Addr
	typ   lb.ServiceType
	field fieldRef
	// ranges are a LoadBalancer frontend's source ranges (of its family).
	ranges []netip.Prefix
}

// fieldRef names the field a frontend comes from, formatted only for a
// skip.
type fieldRef struct {
	kind uint8 // fieldClusterIPs...
	idx  int   // of the ingress, external IP or service port
}

const (
	fieldClusterIPs uint8 = iota
	fieldIngress
	fieldExternalIP
	fieldNodePort
)

func (f fieldRef) String() string {
	switch f.kind {
	case fieldIngress:
		return "status.loadBalancer.ingress[" + strconv.Itoa(f.idx) + "]"
	case fieldExternalIP:
		return "spec.externalIPs[" + strconv.Itoa(f.idx) + "]"
	case fieldNodePort:
		return portField(f.idx) + ".nodePort"
	}
	return "spec.clusterIPs"
}

func (t *translator) servicePort(pi int, p corev1.ServicePort, proto lb.L4Type, clusterIPs []netip.Addr, o options) {
	spec := &t.in.Service.Spec
	var fam [2]bool
	for _, ip := range clusterIPs {
		fam[familyOf(ip)] = true
	}
	port := uint16(p.Port)
	fes := make([]frontend, 0, len(clusterIPs))
	for _, ip := range clusterIPs {
		fes = append(fes, frontend{addr: lb.L3n4Addr{Addr: ip, Port: port, Protocol: proto}, typ: lb.SVCTypeClusterIP, field: fieldRef{kind: fieldClusterIPs}})
	}
	if o.allowIngress {
		ranges, badRange := sourceRanges(spec.LoadBalancerSourceRanges)
		for i, ing := range t.in.Service.Status.LoadBalancer.Ingress {
			f := fieldRef{kind: fieldIngress, idx: i}
			switch {
			case ing.IP == "":
				t.skipService(ReasonIngressHostname, f.String()+" hostname "+strconv.Quote(ing.Hostname)+" has no IP")
				continue
			case ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy:
				t.skipService(ReasonIngressProxyMode, f.String()+" "+ing.IP+": ipMode Proxy")
				continue
			case badRange != "":
				t.skipService(ReasonSourceRanges, f.String()+" "+ing.IP+": "+badRange+": left out rather than open to every client")
				continue
			}
			a, ok := t.externalIP(f, ing.IP, fam)
			if !ok {
				continue
			}
			rs := ranges[familyOf(a)]
			if len(spec.LoadBalancerSourceRanges) > 0 && len(rs) == 0 {
				t.skipService(ReasonSourceRanges, f.String()+" "+ing.IP+": spec.loadBalancerSourceRanges has no "+familyOf(a).String()+
					" range: left out rather than open to every client")
				continue
			}
			fes = append(fes, frontend{addr: lb.L3n4Addr{Addr: a, Port: port, Protocol: proto}, typ: lb.SVCTypeLoadBalancer, field: f, ranges: rs})
		}
	}
	for i, s := range spec.ExternalIPs {
		f := fieldRef{kind: fieldExternalIP, idx: i}
		if a, ok := t.externalIP(f, s, fam); ok {
			fes = append(fes, frontend{addr: lb.L3n4Addr{Addr: a, Port: port, Protocol: proto}, typ: lb.SVCTypeExternalIPs, field: f})
		}
	}
	if o.allowNodePort && p.NodePort != 0 {
		if p.NodePort < 1 || p.NodePort > 65535 {
			t.skipService(ReasonInvalidPort, portField(pi)+".nodePort "+strconv.Itoa(int(p.NodePort))+": want 1..65535")
		} else {
			for _, ip := range clusterIPs {
				nps := lb.NodePortFrontends(lb.L3n4Addr{Addr: ip, Port: uint16(p.NodePort), Protocol: proto}, t.in.NodeAddresses)
				if t.in.OmitSurrogate {
					nps = nps[1:]
				}
				for _, a := range nps {
					fes = append(fes, frontend{addr: a, typ: lb.SVCTypeNodePort, field: fieldRef{kind: fieldNodePort, idx: pi}})
				}
			}
		}
	}

	// The backend sets by family and locality, computed once: the first
	// frontend of a set gets it, the others a copy (emit never writes to
	// a set: it copies before dropping a backend).
	var cache [2][2][]lb.Backend
	var given [2][2]bool
	for _, fe := range fes {
		if i := slices.IndexFunc(t.seenFE, func(x seenFrontend) bool { return x.addr == fe.addr }); i >= 0 {
			t.skipService(ReasonDuplicateFrontend, fe.field.String()+" "+fe.addr.String()+": already a "+t.seenFE[i].typ.String()+" frontend")
			continue
		}
		t.seenFE = append(t.seenFE, seenFrontend{addr: fe.addr, typ: fe.typ})
		s := &lb.Service{
			Frontend:        lb.Frontend{L3n4Addr: fe.addr},
			Type:            fe.typ,
			SessionAffinity: o.affinity,
		}
		if o.affinity {
			s.SessionAffinityTimeout = o.timeout
		}
		if len(fe.ranges) > 0 {
			s.SourceRanges = slices.Clone(fe.ranges)
		}
		if fe.typ == lb.SVCTypeClusterIP {
			s.IntTrafficPolicyLocal = o.intLocal
		} else {
			// Connections from outside the node follow the external
			// policy; those from inside (the node, its pods) use every
			// endpoint, as kube-proxy's short circuit does.
			s.ExtTrafficPolicyLocal = o.extLocal
		}
		local := s.IntTrafficPolicyLocal || s.ExtTrafficPolicyLocal
		f, l := familyOf(fe.addr.Addr), 0
		if local {
			l = 1
		}
		if cache[f][l] == nil {
			cache[f][l] = t.backends(p.Name, proto, f, local)
		}
		if s.Backends = cache[f][l]; given[f][l] {
			s.Backends = slices.Clone(s.Backends)
		}
		given[f][l] = true
		t.emit(s)
	}
}

// sourceRanges parses spec.loadBalancerSourceRanges into each family's
// ranges (by family index), masked to their network address (Kubernetes
// accepts host bits) and without repeats. bad describes the first entry
// that is not a CIDR ("" when all are).
func sourceRanges(in []string) (out [2][]netip.Prefix, bad string) {
	for i, s := range in {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil || p.Addr().Zone() != "" {
			return [2][]netip.Prefix{}, "spec.loadBalancerSourceRanges[" + strconv.Itoa(i) + "] " + strconv.Quote(s) + " is not a CIDR"
		}
		if p.Addr().Is4In6() {
			// An IPv4 range written in IPv6 form.
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		p = p.Masked()
		f := familyOf(p.Addr())
		if !slices.Contains(out[f], p) {
			out[f] = append(out[f], p)
		}
	}
	return out, ""
}

// externalIP parses an external or ingress IP and checks that the service
// has a ClusterIP of its family.
func (t *translator) externalIP(field fieldRef, s string, fam [2]bool) (netip.Addr, bool) {
	a, ok := frontendIP(s)
	if !ok {
		t.skipService(ReasonInvalidIP, field.String()+" "+strconv.Quote(s)+": not a usable IP address")
		return netip.Addr{}, false
	}
	if !fam[familyOf(a)] {
		t.skipService(ReasonIPFamily, field.String()+" "+a.String()+": the service has no "+familyOf(a).String()+" ClusterIP")
		return netip.Addr{}, false
	}
	return a, true
}

// backends returns the backends of the service port named name for family
// f, sorted. local says the frontend has a node-local backend set, whose
// terminating fallback kube-proxy decides on the local endpoints alone.
func (t *translator) backends(name string, proto lb.L4Type, f family, local bool) []lb.Backend {
	var set []endpoint
	for i := range t.endpoints {
		if k := t.endpoints[i].key; k.name == name && k.proto == proto && k.fam == f {
			set = t.endpoints[i].eps
			break
		}
	}
	var anyReady, localReady bool
	for _, e := range set {
		if e.ready {
			anyReady = true
			localReady = localReady || e.local
		}
	}
	out := make([]lb.Backend, 0, len(set))
	for _, e := range set { // sorted by address and port: so are the backends
		be := lb.Backend{
			L3n4Addr:  lb.L3n4Addr{Addr: e.addr, Port: e.port, Protocol: proto},
			Weight:    lb.DefaultBackendWeight,
			NodeLocal: e.local,
		}
		switch {
		case e.ready:
			be.State = lb.BackendStateActive
		case e.serving && e.terminating && (!anyReady || local && e.local && !localReady):
			be.State = lb.BackendStateTerminating
		default:
			continue
		}
		out = append(out, be)
	}
	return out
}

// emit validates s, drops the backends Validate refuses and appends it.
func (t *translator) emit(s *lb.Service) {
	for range len(s.Backends) + 1 {
		err := s.Validate()
		if err == nil {
			t.out.Services = append(t.out.Services, s)
			return
		}
		var ve *lb.ValidationError
		i := -1
		if errors.As(err, &ve) && ve.IsBackend() {
			i = backendIndex(ve.Field)
		}
		if i < 0 || i >= len(s.Backends) {
			t.skipService(ReasonInvalidFrontend, s.Type.String()+" frontend "+s.Frontend.String()+": "+err.Error())
			return
		}
		t.skipService(ReasonInvalidBackend, s.Type.String()+" frontend "+s.Frontend.String()+": "+err.Error())
		s.Backends = slices.Delete(slices.Clone(s.Backends), i, i+1) // the set may be shared with other frontends
	}
	t.skipService(ReasonInvalidFrontend, s.Type.String()+" frontend "+s.Frontend.String()+": backends keep failing validation")
}

// backendIndex reads N from a field "backends[N]..." (-1 if none).
func backendIndex(field string) int {
	const pfx = "backends["
	if len(field) <= len(pfx) || field[:len(pfx)] != pfx {
		return -1
	}
	rest := field[len(pfx):]
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	if end == 0 || end >= len(rest) || rest[end] != ']' {
		return -1
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil {
		return -1
	}
	return n
}
