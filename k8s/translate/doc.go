// Package translate turns one Kubernetes Service and the EndpointSlices
// labelled for it into the loadbalancer.Services that program the node, with
// kube-proxy's semantics. It is a pure function: no client-go, no informers,
// no state. The same Input always gives the same Output, in sorted order,
// and no input makes it panic.
//
// # Frontends
//
// One loadbalancer.Service per frontend: each ClusterIP (spec.clusterIPs,
// else spec.clusterIP; IPv4 and IPv6 for dual stack) × each port; for
// NodePort and LoadBalancer services with a nodePort (a LoadBalancer with
// allocateLoadBalancerNodePorts false has none, unless one was set
// explicitly, which kube-proxy serves too), the NodePort frontends of each
// ClusterIP family (the surrogate 0.0.0.0 or :: unless
// Input.OmitSurrogate, and the node addresses of that family); each
// spec.externalIPs address (type ExternalIPs) and, for LoadBalancer
// services, each status.loadBalancer.ingress IP (type LoadBalancer) whose
// family has a ClusterIP. A frontend address that appears twice keeps the
// first kind in the order ClusterIP, LoadBalancer, ExternalIPs, NodePort.
// Ingress IPs in ipMode Proxy are left out.
//
// # Source ranges
//
// The LoadBalancer (ingress IP) frontends of a service with
// spec.loadBalancerSourceRanges get them as SourceRanges: each CIDR masked
// to its network address, without repeats, those of the frontend's family
// only (the packet datapath lets only those clients in). A frontend left
// with no range of its family, or any entry that is not a CIDR, skips the
// frontend (ReasonSourceRanges): closed rather than open to every client.
// The ranges apply to LoadBalancer frontends only, as kube-proxy's do.
//
// # Traffic policies and affinity
//
// internalTrafficPolicy Local sets IntTrafficPolicyLocal on the ClusterIP
// frontends; externalTrafficPolicy Local (NodePort and LoadBalancer
// services only) sets ExtTrafficPolicyLocal on the NodePort, ExternalIPs and
// LoadBalancer frontends, whose connections from inside the node keep using
// every endpoint, as kube-proxy's short circuit does (no internal policy on
// them). sessionAffinity ClientIP sets SessionAffinity with timeoutSeconds,
// 10800 when unset (or not positive), at most MaxSessionAffinityTimeout.
//
// # Backends
//
// A service port takes its backends from the slice ports of the same name
// and protocol (targetPort plays no part once slices exist), from slices
// whose addressType is the frontend's family (FQDN slices are ignored),
// using the first address of each endpoint. Endpoints present in several
// slices count once (the node-local one, then the one in the best state).
// Ready endpoints (unset conditions mean ready and serving) are active
// backends. Serving, terminating, not-ready endpoints become backends in
// state terminating only where kube-proxy would use them: when no endpoint
// of the service port is ready, or, for a service whose traffic policy is
// Local on some side, when the endpoint is on this node and no endpoint of
// this node is ready. Non-serving endpoints are never backends. The
// datapath itself sends new connections to terminating backends only when
// no backend of the set is active, which is kube-proxy's fallback.
// Backends have DefaultBackendWeight and NodeLocal set when the endpoint's
// nodeName is Input.NodeName.
//
// # Skipped objects
//
// Headless services (clusterIP None or unset), ExternalName services,
// services labelled service.kubernetes.io/service-proxy-name, slices
// labelled service.kubernetes.io/headless, slices of another service and
// anything malformed are left out; Output.Skipped says what and why, with a
// Reason constant short enough for a metric label.
package translate
