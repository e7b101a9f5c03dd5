package translate

import (
	"cmp"
	"slices"
)

// Reason says why Translate left an object, or part of one, out. Its values
// are short and fixed, fit for a metric label; Skip.Detail carries the rest.
type Reason string

const (
	// ReasonNoService: a slice was given without its service (not yet
	// created, or deleted).
	ReasonNoService Reason = "no-service"
	// ReasonHeadless: the service has clusterIP None.
	ReasonHeadless Reason = "headless"
	// ReasonNoClusterIP: the service has no ClusterIP at all.
	ReasonNoClusterIP Reason = "no-cluster-ip"
	// ReasonExternalName: the service is of type ExternalName (DNS only).
	ReasonExternalName Reason = "external-name"
	// ReasonServiceProxyName: the service is labelled
	// service.kubernetes.io/service-proxy-name (another proxy owns it).
	ReasonServiceProxyName Reason = "service-proxy-name"
	// ReasonInvalidIP: a ClusterIP, external IP or load balancer ingress
	// IP is not an IP address usable as a frontend.
	ReasonInvalidIP Reason = "invalid-ip"
	// ReasonIPFamily: an external or ingress IP whose family the service
	// has no ClusterIP of, or an endpoint address not of its slice's
	// addressType.
	ReasonIPFamily Reason = "ip-family"
	// ReasonInvalidPort: a service port with a port number or protocol
	// that cannot be a frontend, or a repeated port.
	ReasonInvalidPort Reason = "invalid-port"
	// ReasonIngressHostname: a load balancer ingress with a hostname and
	// no IP.
	ReasonIngressHostname Reason = "ingress-hostname"
	// ReasonIngressProxyMode: a load balancer ingress with ipMode Proxy:
	// the load balancer delivers to the node, not to the ingress IP.
	ReasonIngressProxyMode Reason = "ingress-ip-mode-proxy"
	// ReasonSourceRanges: a load balancer ingress frontend whose
	// loadBalancerSourceRanges cannot be enforced: an entry is not a CIDR,
	// or none is of the frontend's family. It is left out rather than
	// opened to every client.
	ReasonSourceRanges Reason = "source-ranges"
	// ReasonDuplicateFrontend: a frontend address another frontend of the
	// service already has.
	ReasonDuplicateFrontend Reason = "duplicate-frontend"
	// ReasonInvalidFrontend: loadbalancer.Service.Validate refused a
	// frontend.
	ReasonInvalidFrontend Reason = "invalid-frontend"
	// ReasonOtherService: a slice whose kubernetes.io/service-name label or
	// namespace names another service (relabelled, or given by mistake).
	ReasonOtherService Reason = "other-service"
	// ReasonHeadlessSlice: a slice labelled service.kubernetes.io/headless.
	ReasonHeadlessSlice Reason = "headless-slice"
	// ReasonFQDNSlice: a slice of addressType FQDN.
	ReasonFQDNSlice Reason = "fqdn-slice"
	// ReasonInvalidSlice: a nil slice or one of an unknown addressType.
	ReasonInvalidSlice Reason = "invalid-slice"
	// ReasonInvalidSlicePort: a slice port without a name, port number or
	// with an unknown protocol.
	ReasonInvalidSlicePort Reason = "invalid-slice-port"
	// ReasonInvalidEndpoint: an endpoint without an address or whose first
	// address is not an IP usable as a backend.
	ReasonInvalidEndpoint Reason = "invalid-endpoint"
	// ReasonInvalidBackend: loadbalancer.Service.Validate refused a
	// backend of a frontend (for example the frontend itself).
	ReasonInvalidBackend Reason = "invalid-backend"
)

// Kinds of the objects a Skip names.
const (
	KindService       = "Service"
	KindEndpointSlice = "EndpointSlice"
)

// Skip is one object, or part of one, that Translate left out.
type Skip struct {
	// Kind is KindService or KindEndpointSlice.
	Kind string
	// Name is namespace/name of the object.
	Name   string
	Reason Reason
	// Detail names the field and value, in lower case.
	Detail string
}

// String formats the skip for a log line.
func (s Skip) String() string {
	return s.Kind + " " + s.Name + ": " + string(s.Reason) + ": " + s.Detail
}

func compareSkips(a, b Skip) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Detail, b.Detail))
}

func sortSkips(s []Skip) []Skip {
	slices.SortFunc(s, compareSkips)
	return slices.Compact(s)
}
