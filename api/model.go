package api

// The wire types of the REST API. ServiceSpec, FrontendAddress,
// BackendAddress, Service and ServiceStatus follow the upstream v1 service
// API (field names and JSON spelling); the other types are actorlb's
// extensions. openapi.json documents every field.

// FrontendAddress is the L4 address of a service.
type FrontendAddress struct {
	// IP is an IPv4 or IPv6 address ("0.0.0.0" or "::" for the surrogate
	// NodePort frontend).
	IP string `json:"ip"`
	// Port is 1..65535.
	Port uint16 `json:"port"`
	// Protocol is tcp, udp, sctp or any (case-insensitive); empty means tcp.
	Protocol string `json:"protocol,omitempty"`
	// Scope is external or internal; empty means external.
	Scope string `json:"scope,omitempty"`
}

// BackendAddress is one backend of a service. Its protocol is the
// frontend's.
type BackendAddress struct {
	IP   string `json:"ip"`
	Port uint16 `json:"port"`
	// Weight is 0..65535 (upstream's uint16 weight); nil means 100. 0
	// gives the backend no new connection.
	Weight *uint16 `json:"weight,omitempty"`
	// State is active, terminating, quarantined or maintenance; empty means
	// active.
	State string `json:"state,omitempty"`
	// NodeLocal says the backend runs on this node (actorlb's field): a
	// side whose traffic policy is Local uses only node-local backends.
	NodeLocal bool `json:"nodeLocal,omitempty"`
}

// ServiceFlags are the options of a service.
type ServiceFlags struct {
	// Type is ClusterIP (default), NodePort, ExternalIPs, LoadBalancer,
	// HostPort or LocalRedirect.
	Type string `json:"type,omitempty"`
	// TrafficPolicy is the upstream v1.6 name of ExtTrafficPolicy: Cluster
	// (default) or Local. If both are given they must agree.
	TrafficPolicy string `json:"trafficPolicy,omitempty"`
	// ExtTrafficPolicy is Cluster (default) or Local.
	ExtTrafficPolicy string `json:"extTrafficPolicy,omitempty"`
	// IntTrafficPolicy is Cluster (default) or Local.
	IntTrafficPolicy string `json:"intTrafficPolicy,omitempty"`
	// SessionAffinity turns on client affinity; SessionAffinityTimeout is
	// its timeout in seconds (0: 10800).
	SessionAffinity        bool   `json:"sessionAffinity,omitempty"`
	SessionAffinityTimeout uint32 `json:"sessionAffinityTimeout,omitempty"`
	// LBAlgorithm is default, random or maglev. maglev is stored in the
	// master entry and drives the packet datapath's Maglev table, but has
	// no effect on the socket LB yet: the answer carries a warning
	// (ServiceStatus.Warnings).
	LBAlgorithm string `json:"lbAlgorithm,omitempty"`
	// DSR: the packet datapath forwards the service's connections by L2
	// direct server return (backends hold the frontend address on their
	// loopback) instead of SNAT/DNAT.
	DSR bool `json:"dsr,omitempty"`
	// SourceRanges (loadBalancerSourceRanges): CIDRs of the frontend's
	// family; the packet datapath lets only clients inside them reach the
	// service (with SourceRangesDeny: every client but those).
	SourceRanges     []string `json:"sourceRanges,omitempty"`
	SourceRangesDeny bool     `json:"sourceRangesDeny,omitempty"`
	// NatPolicy is the upstream protocol NAT policy: only None (or left
	// out) is accepted; Nat46 and Nat64 are refused (not supported).
	// Answers leave it out.
	NatPolicy string `json:"natPolicy,omitempty"`
	// HealthCheckNodePort is upstream's health check node port: actorlb
	// serves no health check, so only 0 (or left out) is accepted.
	HealthCheckNodePort uint16 `json:"healthCheckNodePort,omitempty"`
	// Name, Namespace and Cluster are upstream's names of the service
	// (e.g. the Kubernetes service): actorlb names a service by its ID
	// and does not store them, so only empty values are accepted. Answers
	// carry the namespace and name of a Kubernetes source's service.
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// DirectServerReturn is the upstream v1.6 flag that `cilium service
	// update` sends as true by default (its --rev): there it means "add
	// the revNAT entry", which actorlb always does. true is accepted and
	// changes nothing; false (leave the revNAT entry out) is refused.
	// Answers leave it out.
	DirectServerReturn *bool `json:"direct-server-return,omitempty"`
	// Source is who owns the service (actorlb's field): api (the REST API,
	// the CLI, the library) or kubernetes (the Kubernetes sync). Answers
	// carry it. A write may leave it out or give api: a service of another
	// source is changed there, and a write to its frontend is refused
	// (409).
	Source string `json:"source,omitempty"`
}

// BatchResult is the outcome of one service of PUT /v1/services: the
// status a PUT /v1/service/{id} of it alone would have answered (201
// created, 200 updated, 460/461 invalid, 500 map failure, ...) and the
// error, if any.
type BatchResult struct {
	ID    int64  `json:"id"`
	Code  int    `json:"code"`
	Error string `json:"error,omitempty"`
	// Warnings say what of the service is accepted but not honoured
	// (see ServiceStatus.Warnings).
	Warnings []string `json:"warnings,omitempty"`
}

// ServiceSpec is the configuration of a service.
type ServiceSpec struct {
	// ID is the service ID, 1..65535. In a PUT it may be left out (0); if
	// given it must equal the ID in the path.
	ID int64 `json:"id,omitempty"`
	// FrontendAddress is required.
	FrontendAddress *FrontendAddress `json:"frontend-address"`
	// BackendAddresses may be empty.
	BackendAddresses []BackendAddress `json:"backend-addresses"`
	Flags            *ServiceFlags    `json:"flags,omitempty"`
}

// ServiceStatus is what the maps hold for a service.
type ServiceStatus struct {
	Realized *ServiceSpec `json:"realized"`
	// Warnings say what of the service is stored but not honoured by the
	// datapath (today: lbAlgorithm maglev, which the socket LB ignores).
	Warnings []string `json:"warnings,omitempty"`
}

// Service is a service with its realized state. The agent answers a write
// only once the maps hold it, so Realized equals Spec; backends are in slot
// order (active, terminating, quarantined, then maintenance).
type Service struct {
	Spec   *ServiceSpec   `json:"spec"`
	Status *ServiceStatus `json:"status"`
}

// RevNATEntry is one reverse-NAT entry.
type RevNATEntry struct {
	ID   uint16 `json:"id"`
	IP   string `json:"ip"`
	Port uint16 `json:"port"`
	// Service is true when the entry belongs to a service: it was created
	// with it and is deleted with it.
	Service bool `json:"service"`
}

// MapsDump is the raw content of the six BPF maps, decoded, with the field
// names of the datapath's C structs. Every list is sorted: services by
// frontend then slot, backends and revNAT entries by ID.
type MapsDump struct {
	// Root is the bpffs directory the maps are pinned in ("" in a dry run).
	Root      string            `json:"root"`
	Services4 []ServiceMapEntry `json:"lb4_services"`
	Backends4 []BackendMapEntry `json:"lb4_backends"`
	RevNAT4   []RevNATMapEntry  `json:"lb4_reverse_nat"`
	Services6 []ServiceMapEntry `json:"lb6_services"`
	Backends6 []BackendMapEntry `json:"lb6_backends"`
	RevNAT6   []RevNATMapEntry  `json:"lb6_reverse_nat"`
}

// ServiceMapEntry is one lb4_services / lb6_services entry.
type ServiceMapEntry struct {
	Key   ServiceMapKey   `json:"key"`
	Value ServiceMapValue `json:"value"`
}

// ServiceMapKey is lb4_key / lb6_key.
type ServiceMapKey struct {
	Address     string `json:"address"`
	Dport       uint16 `json:"dport"`
	BackendSlot uint16 `json:"backend_slot"`
	Proto       uint8  `json:"proto"`
	Scope       uint8  `json:"scope"`
}

// ServiceMapValue is lb4_service / lb6_service.
type ServiceMapValue struct {
	BackendID   uint32 `json:"backend_id"`
	Count       uint16 `json:"count"`
	RevNATIndex uint16 `json:"rev_nat_index"`
	Flags       uint8  `json:"flags"`
	Flags2      uint8  `json:"flags2"`
	QCount      uint16 `json:"qcount"`
}

// BackendMapEntry is one lb4_backends / lb6_backends entry.
type BackendMapEntry struct {
	ID    uint32          `json:"id"`
	Value BackendMapValue `json:"value"`
}

// BackendMapValue is lb4_backend / lb6_backend; Flags is the state.
type BackendMapValue struct {
	Address   string `json:"address"`
	Port      uint16 `json:"port"`
	Proto     uint8  `json:"proto"`
	Flags     uint8  `json:"flags"`
	ClusterID uint16 `json:"cluster_id"`
	Zone      uint8  `json:"zone"`
}

// RevNATMapEntry is one lb4_reverse_nat / lb6_reverse_nat entry.
type RevNATMapEntry struct {
	ID    uint16         `json:"id"`
	Value RevNATMapValue `json:"value"`
}

// RevNATMapValue is lb4_reverse_nat / lb6_reverse_nat.
type RevNATMapValue struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
}

// Status is the agent's health and figures (GET /v1/healthz).
type Status struct {
	// State is Ok when the engine serves, Warning when it serves but a pin,
	// a full map or a failed reconcile needs an operator (Msg says what;
	// still 200), Failure otherwise (503).
	State string `json:"state"`
	// Msg says why the state is not Ok.
	Msg   string `json:"msg,omitempty"`
	Ready bool   `json:"ready"`
	// Uptime of the agent in seconds.
	UptimeSeconds float64 `json:"uptime-seconds"`
	// BPFRoot is where the maps are pinned ("" in a dry run).
	BPFRoot string `json:"bpf-root"`
	DryRun  bool   `json:"dry-run"`
	// Listen lists the addresses the API is served on (unix:///path,
	// http://IP:PORT).
	Listen   []string `json:"listen"`
	Services int      `json:"services"`
	Backends int      `json:"backends"`
	RevNAT   int      `json:"revnat"`
	// Maps holds each map's entries and fill.
	Maps []MapStatus `json:"maps"`
	// Restore holds the figures of the restore at start.
	Restore RestoreStatus `json:"restore"`
	// ActorRestarts counts restarts per actor.
	ActorRestarts map[string]int `json:"actor-restarts"`
	OpsInFlight   int            `json:"ops-in-flight"`
	// Steps is the time the engine's operations spent in each step since
	// start, by step name ("wait in queue", "acquire IDs", "write
	// backends and revNAT", "write service", ...): where time goes.
	Steps map[string]StepStatus `json:"steps"`
	// SocketLB says what socket-LB datapath is attached ("" if unknown).
	SocketLB string `json:"socket-lb,omitempty"`
	// PacketLB says on which devices the packet (XDP/tc) datapath is
	// attached ("" if not asked).
	PacketLB string `json:"packet-lb,omitempty"`
	// Reconcile holds the figures of the drift checks.
	Reconcile ReconcileStatus `json:"reconcile"`
	// UDPSockets counts the connected UDP sockets moved off backends that
	// left their service.
	UDPSockets UDPSocketsStatus `json:"udp-sockets"`
	// Sources are the sources that feed the engine besides the API (the
	// Kubernetes source), absent when there is none.
	Sources []SourceStatus `json:"sources,omitempty"`
	// ServicesBySource counts the services by source (api, kubernetes),
	// absent when the API is the only source.
	ServicesBySource map[string]int `json:"services-by-source,omitempty"`
}

// SourceStatus is the state of a source of services (the Kubernetes
// source: services and endpoints watched on the cluster's apiserver).
type SourceStatus struct {
	// Name is the source, as in flags.source: kubernetes.
	Name string `json:"name"`
	// Node is the node the source programs (its Kubernetes node name).
	Node string `json:"node,omitempty"`
	// NodeAddresses are the addresses NodePort frontends get.
	NodeAddresses []string `json:"node-addresses"`
	// Connected: the source's last list/watch worked.
	Connected bool `json:"connected"`
	// Synced: the source listed everything and applied the full state;
	// changes are applied as they come.
	Synced bool `json:"synced"`
	// LastEvent is when the source last received an event (RFC 3339;
	// absent before the first).
	LastEvent string `json:"last-event,omitempty"`
	// LastError is the last list/watch error, at LastErrorTime.
	LastError     string `json:"last-error,omitempty"`
	LastErrorTime string `json:"last-error-time,omitempty"`
	// LastApplyError is the last failure to apply a change (retried).
	LastApplyError string `json:"last-apply-error,omitempty"`
	// Services and Frontends count the source's services (Kubernetes
	// services) and the engine services (frontends) it holds; Pending
	// those still to apply.
	Services  int `json:"services"`
	Frontends int `json:"frontends"`
	Pending   int `json:"pending"`
	// LastSyncSeconds is how long the last apply took.
	LastSyncSeconds float64 `json:"last-sync-seconds"`
	// Conflicts are the frontends the source cannot program (held by
	// another source or another of its services).
	Conflicts []SourceConflict `json:"conflicts,omitempty"`
}

// SourceConflict is a frontend a source cannot program.
type SourceConflict struct {
	Frontend string `json:"frontend"`
	// Service is the source's service that does not get it
	// (namespace/name).
	Service string `json:"service"`
	Reason  string `json:"reason"`
}

// UDPSocketsStatus counts the connected UDP sockets closed because their
// backend left the service they reached it through (their clients
// reconnect), the backends dropped because too many waited, and the
// failed attempts with the last error.
type UDPSocketsStatus struct {
	Terminated uint64 `json:"terminated"`
	Dropped    uint64 `json:"dropped"`
	Failures   uint64 `json:"failures"`
	LastError  string `json:"last-error,omitempty"`
}

// ReconcileStatus counts the reconciles (drift checks) and what they
// repaired, by map then kind (missing, changed, extra, pin).
type ReconcileStatus struct {
	Runs      uint64                       `json:"runs"`
	Last      string                       `json:"last,omitempty"` // RFC 3339
	LastError string                       `json:"last-error,omitempty"`
	Repairs   map[string]map[string]uint64 `json:"repairs"`
}

// MapDrift is what one reconcile found in one map and repaired: the pin's
// state before the repair (ok, missing, replaced: re-pinned; unpinned),
// entries missing from the map, holding another value, or there without
// having been written (extra, deleted).
type MapDrift struct {
	Map     string `json:"map"`
	Pin     string `json:"pin"`
	Missing int    `json:"missing"`
	Changed int    `json:"changed"`
	Extra   int    `json:"extra"`
	Error   string `json:"error,omitempty"`
}

// StepStatus counts the runs of one step and their total duration.
type StepStatus struct {
	Count   uint64  `json:"count"`
	Seconds float64 `json:"seconds"`
}

// MapStatus is the fill of one map.
type MapStatus struct {
	Name       string  `json:"name"`
	Entries    int     `json:"entries"`
	MaxEntries int     `json:"max-entries"`
	Fill       float64 `json:"fill"`
	// Updated and Deleted count the entries written and deleted since the
	// agent started.
	Updated uint64 `json:"updated"`
	Deleted uint64 `json:"deleted"`
	// Pin is what the map's pin names now: ok, missing, replaced (then
	// healthz says Warning), unpinned (dry run).
	Pin string `json:"pin,omitempty"`
}

// RestoreStatus are the figures of the restore from the pinned maps.
type RestoreStatus struct {
	Services      int            `json:"services"`
	Backends      int            `json:"backends"`
	OrphanRevNAT  int            `json:"orphan-revnat"`
	Repairs       int            `json:"repairs"`
	RepairsByKind map[string]int `json:"repairs-by-kind"`
	// Writes is the number of map entries written or deleted to repair.
	Writes int `json:"writes"`
}

// DaemonConfiguration is the answer of GET /v1/config, in upstream's
// shape (spec and status); only the status is filled.
type DaemonConfiguration struct {
	Spec   *DaemonConfigurationSpec   `json:"spec"`
	Status *DaemonConfigurationStatus `json:"status"`
}

// DaemonConfigurationSpec is the changeable configuration: actorlb has
// none (it is always empty).
type DaemonConfigurationSpec struct{}

// DaemonConfigurationStatus is the agent's configuration as it runs.
type DaemonConfigurationStatus struct {
	// Addressing is upstream's node addressing: the first global unicast
	// node address of each family ("" when the family has none).
	Addressing *NodeAddressing `json:"addressing"`
	// NodeAddresses are the addresses NodePort frontends may use besides
	// the surrogate (--node-addresses), in the agent's order.
	NodeAddresses []string `json:"node-addresses"`
	// NodePortRange is the range NodePort frontends take their port from
	// (--node-port-range), "MIN-MAX"; NodePortMin and NodePortMax are its
	// ends. All empty when the agent does not check NodePort services.
	NodePortRange string `json:"node-port-range,omitempty"`
	NodePortMin   uint16 `json:"node-port-min,omitempty"`
	NodePortMax   uint16 `json:"node-port-max,omitempty"`
	// BPFRoot is where the maps are pinned ("" in a dry run).
	BPFRoot string `json:"bpf-root"`
	DryRun  bool   `json:"dry-run"`
}

// NodeAddressing is the node's address per family.
type NodeAddressing struct {
	IPv4 *NodeAddressingElement `json:"ipv4"`
	IPv6 *NodeAddressingElement `json:"ipv6"`
}

// NodeAddressingElement is one family's address: Enabled when the node
// has an address of the family among its node addresses.
type NodeAddressingElement struct {
	Enabled bool   `json:"enabled"`
	IP      string `json:"ip,omitempty"`
}
