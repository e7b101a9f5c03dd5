package loadbalancer

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ServiceType is the kind of a service frontend; it selects the flag bits of
// the master slot.
type ServiceType uint8

const (
	SVCTypeClusterIP ServiceType = iota
	SVCTypeNodePort
	SVCTypeExternalIPs
	SVCTypeLoadBalancer
	SVCTypeHostPort
	SVCTypeLocalRedirect
)

var serviceTypeNames = [...]string{
	SVCTypeClusterIP:     "ClusterIP",
	SVCTypeNodePort:      "NodePort",
	SVCTypeExternalIPs:   "ExternalIPs",
	SVCTypeLoadBalancer:  "LoadBalancer",
	SVCTypeHostPort:      "HostPort",
	SVCTypeLocalRedirect: "LocalRedirect",
}

// ParseServiceType parses "ClusterIP", "NodePort", "ExternalIPs",
// "LoadBalancer", "HostPort" or "LocalRedirect", in any case. The empty
// string means ClusterIP.
func ParseServiceType(s string) (ServiceType, error) {
	if s == "" {
		return SVCTypeClusterIP, nil
	}
	for t, name := range serviceTypeNames {
		if strings.EqualFold(s, name) {
			return ServiceType(t), nil
		}
	}
	return 0, invalid("type", s, "must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer, HostPort, LocalRedirect")
}

// String returns the name as ParseServiceType reads it, or "ServiceType(n)".
func (t ServiceType) String() string {
	if t.IsValid() {
		return serviceTypeNames[t]
	}
	return "ServiceType(" + strconv.Itoa(int(t)) + ")"
}

// IsValid reports whether t is a known service type.
func (t ServiceType) IsValid() bool { return int(t) < len(serviceTypeNames) }

// HasExternalSide reports whether a service of type t is reached from
// outside the node (NodePort, ExternalIPs, LoadBalancer, HostPort), so
// that it has an external traffic policy besides the internal one.
// ClusterIP and LocalRedirect services are reached only from inside.
func (t ServiceType) HasExternalSide() bool {
	return t.IsValid() && t != SVCTypeClusterIP && t != SVCTypeLocalRedirect
}

// LBAlgorithm is the backend selection algorithm, stored in bits 24-31 of the
// master slot.
type LBAlgorithm uint8

const (
	// LBAlgDefault leaves the choice to the datapath's configured default.
	LBAlgDefault LBAlgorithm = 0
	LBAlgRandom  LBAlgorithm = 1
	LBAlgMaglev  LBAlgorithm = 2
)

// ParseLBAlgorithm parses "default", "random" or "maglev", in any case. The
// empty string means default.
func ParseLBAlgorithm(s string) (LBAlgorithm, error) {
	switch strings.ToLower(s) {
	case "", "default":
		return LBAlgDefault, nil
	case "random":
		return LBAlgRandom, nil
	case "maglev":
		return LBAlgMaglev, nil
	}
	return 0, invalid("lb-algorithm", s, "must be one of default, random, maglev")
}

// String returns "default", "random", "maglev", or "LBAlgorithm(n)".
func (a LBAlgorithm) String() string {
	switch a {
	case LBAlgDefault:
		return "default"
	case LBAlgRandom:
		return "random"
	case LBAlgMaglev:
		return "maglev"
	}
	return "LBAlgorithm(" + strconv.Itoa(int(a)) + ")"
}

// IsValid reports whether a is a known algorithm.
func (a LBAlgorithm) IsValid() bool { return a <= LBAlgMaglev }

// Frontend is the address of a service and its ID.
type Frontend struct {
	L3n4Addr
	// ID is the service ID (rev_nat_index); 0 means "allocate one".
	ID ServiceID
}

const (
	// DefaultSessionAffinityTimeout is used when SessionAffinity is set and
	// SessionAffinityTimeout is 0 (seconds, as in Kubernetes).
	DefaultSessionAffinityTimeout uint32 = 10800
	// MaxSessionAffinityTimeout is the largest timeout that fits the 24 bits
	// of the master slot.
	MaxSessionAffinityTimeout uint32 = 0xFFFFFF
)

// Service is the desired state of one frontend: its backends and options.
// A Service passed to the engine must not be modified; use DeepCopy.
type Service struct {
	Frontend Frontend
	// Backends in the order given by the user; the engine computes slot
	// order itself.
	Backends []Backend
	Type     ServiceType
	// ExtTrafficPolicyLocal: connections from outside the node go only to
	// node-local backends (none: refused). Sets FlagExtLocalScope. Only
	// for types with an external side (ServiceType.HasExternalSide).
	ExtTrafficPolicyLocal bool
	// IntTrafficPolicyLocal: connections from inside the node go only to
	// node-local backends (none: refused). Sets Flag2IntLocalScope.
	IntTrafficPolicyLocal bool
	// SessionAffinity sets FlagAffinity.
	SessionAffinity bool
	// SessionAffinityTimeout in seconds, at most MaxSessionAffinityTimeout;
	// 0 with SessionAffinity means DefaultSessionAffinityTimeout.
	SessionAffinityTimeout uint32
	LBAlgorithm            LBAlgorithm
	// DSR: the packet datapath (bpf/packetlb) forwards this service's
	// connections by direct server return (L2: only the destination MAC
	// changes; each backend must hold the frontend address on its
	// loopback and listen on the frontend port) instead of SNAT/DNAT.
	// Sets Flag2FwdModeDSR. The socket LB ignores it.
	DSR bool
	// SourceRanges (loadBalancerSourceRanges): when not empty, the packet
	// datapath lets only clients inside one of them reach the frontend
	// (with SourceRangesDeny: every client except those). Prefixes of the
	// frontend's family, network addresses (no host bits), at most
	// MaxSourceRanges. Sets FlagSourceRange (and Flag2SourceRangeDeny).
	// Only for types with an external side. The socket LB ignores them.
	SourceRanges []netip.Prefix
	// SourceRangesDeny makes SourceRanges a deny list.
	SourceRangesDeny bool
	// Source owns the frontend: only writes from the same source change
	// or delete the service (the engine refuses the others with
	// ErrFrontendOwned). The zero value is SourceAPI.
	Source Source
}

// Source is who owns a service: the REST API, the CLI and the library
// (SourceAPI), or the Kubernetes sync (SourceKubernetes). The engine
// records it in lb_members, so it survives a restart.
type Source uint8

const (
	// SourceAPI is the REST API, the CLI and the library: the default.
	SourceAPI Source = 0
	// SourceKubernetes is the Kubernetes sync (actorlb as kube-proxy).
	SourceKubernetes Source = 1
)

var sourceNames = [...]string{SourceAPI: "api", SourceKubernetes: "kubernetes"}

// String returns "api", "kubernetes", or "Source(n)".
func (s Source) String() string {
	if s.IsValid() {
		return sourceNames[s]
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// IsValid reports whether s is a known source.
func (s Source) IsValid() bool { return int(s) < len(sourceNames) }

// ParseSource parses "api" or "kubernetes" (also "k8s"), in any case.
func ParseSource(v string) (Source, error) {
	switch strings.ToLower(v) {
	case "api":
		return SourceAPI, nil
	case "kubernetes", "k8s":
		return SourceKubernetes, nil
	}
	return 0, invalid("source", v, "must be api or kubernetes")
}

// Validate checks the whole service and returns the first problem found, in
// this order: the frontend, each backend in order, then type, session
// affinity timeout and LB algorithm. Errors are *ValidationError naming the
// field ("frontend.port", "backends[2].address", "type", ...).
func (s *Service) Validate() error {
	if s == nil {
		return invalid("service", "", "service is not set")
	}
	fe := s.Frontend.L3n4Addr
	if err := fe.Validate("frontend"); err != nil {
		return err
	}
	switch {
	case fe.IsSurrogate() && s.Type != SVCTypeNodePort && s.Type != SVCTypeHostPort:
		return invalid("frontend", fe.Addr.String(),
			"the unspecified address is only the surrogate frontend of a NodePort or HostPort service (every node address); give the service's own address")
	case fe.Addr == ipv4Broadcast:
		return invalid("frontend", fe.Addr.String(), "the broadcast address cannot be a service frontend")
	}

	// Backends in increasing address order (a list kept sorted, the
	// common case) hold no duplicate: each is compared with the one
	// before it alone, until one is out of order. From there on, each is
	// compared with every earlier one (a map for long lists).
	ordered := true
	var seen map[L3n4Addr]int // only for long lists out of order
	for i := range s.Backends {
		be := &s.Backends[i]
		// Checked without a field name first: building it for every
		// backend of every upsert would be most of the call's garbage.
		if err := be.validateIn("", &fe); err != nil {
			return be.validateIn("backends["+strconv.Itoa(i)+"]", &fe)
		}
		k := be.L3n4Addr
		k.Scope = ScopeExternal
		if ordered && (i == 0 || s.Backends[i-1].L3n4Addr.identityLess(&k)) {
			continue
		}
		if ordered {
			ordered = false
			if len(s.Backends) > 16 {
				seen = make(map[L3n4Addr]int, len(s.Backends))
				for x := range i {
					o := s.Backends[x].L3n4Addr
					o.Scope = ScopeExternal
					seen[o] = x
				}
			}
		}
		j, dup := -1, false
		if seen != nil {
			j, dup = seen[k]
			seen[k] = i
		} else {
			for x := range i {
				if o := s.Backends[x].L3n4Addr; o.Addr == k.Addr && o.Port == k.Port && o.Protocol == k.Protocol {
					j, dup = x, true
					break
				}
			}
		}
		if dup {
			return invalid("backends["+strconv.Itoa(i)+"]", be.String(), "duplicate of backends["+strconv.Itoa(j)+"]")
		}
	}

	if !s.Type.IsValid() {
		return invalid("type", strconv.Itoa(int(s.Type)), "unknown service type")
	}
	if s.ExtTrafficPolicyLocal && !s.Type.HasExternalSide() {
		return invalid("external-traffic-policy", "Local",
			"a "+s.Type.String()+" service is reached only from inside the node: it has no external traffic policy (use the internal traffic policy)")
	}
	if s.SessionAffinityTimeout > MaxSessionAffinityTimeout {
		return invalid("session-affinity-timeout", strconv.FormatUint(uint64(s.SessionAffinityTimeout), 10),
			"timeout must be at most 16777215 seconds")
	}
	if !s.LBAlgorithm.IsValid() {
		return invalid("lb-algorithm", strconv.Itoa(int(s.LBAlgorithm)), "unknown algorithm, want default (0), random (1) or maglev (2)")
	}
	if err := s.validateSourceRanges(); err != nil {
		return err
	}
	if !s.Source.IsValid() {
		return invalid("source", strconv.Itoa(int(s.Source)), "unknown source, want api (0) or kubernetes (1)")
	}
	return nil
}

// validateIn checks one backend of a service with frontend fe; field
// names the backend in errors. It builds no string unless something is
// wrong, and copies neither address.
func (be *Backend) validateIn(field string, fe *L3n4Addr) error {
	if err := validateAddr(field, ".address", be.Addr); err != nil {
		return err
	}
	switch {
	case be.Addr.IsUnspecified():
		return invalid(field+".address", be.Addr.String(), "backend address must not be unspecified")
	case be.IsIPv6() != fe.IsIPv6():
		return invalid(field+".address", be.Addr.String(),
			familyName(be.IsIPv6())+" backend "+be.AddrPort().String()+" for "+
				familyName(fe.IsIPv6())+" frontend "+fe.AddrPort().String())
	}
	if err := be.validateRest(field, false); err != nil {
		return err
	}
	if be.Addr == fe.Addr && be.Port == fe.Port && (fe.Protocol == ANY || be.Protocol == ANY || be.Protocol == fe.Protocol) {
		return invalid(field, be.String(), "backend is the frontend itself (connections to it would loop back to the service)")
	}
	if fe.Protocol != ANY && be.Protocol != fe.Protocol {
		return invalid(field+".protocol", be.Protocol.String(),
			"backend protocol must equal the frontend protocol "+fe.Protocol.String())
	}
	if !be.State.IsValid() {
		return invalid(field+".state", strconv.Itoa(int(be.State)),
			"unknown state, want active (0), terminating (1), quarantined (2) or maintenance (3)")
	}
	return nil
}

// ipv4Broadcast is the limited broadcast address, never a frontend.
var ipv4Broadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// DeepCopy returns a copy that shares no memory with s.
func (s *Service) DeepCopy() *Service {
	if s == nil {
		return nil
	}
	c := *s
	c.Backends = slices.Clone(s.Backends)
	c.SourceRanges = slices.Clone(s.SourceRanges)
	return &c
}

// Bits of the flags byte of a service map value.
const (
	FlagExternalIP    uint8 = 1 << 0
	FlagNodePort      uint8 = 1 << 1
	FlagExtLocalScope uint8 = 1 << 2
	FlagHostPort      uint8 = 1 << 3
	FlagAffinity      uint8 = 1 << 4
	FlagLoadBalancer  uint8 = 1 << 5
	FlagRoutable      uint8 = 1 << 6
	FlagSourceRange   uint8 = 1 << 7
)

// Bits of the flags2 byte of a service map value.
const (
	Flag2LocalRedirect   uint8 = 1 << 0
	Flag2NAT46x64        uint8 = 1 << 1
	Flag2L7LoadBalancer  uint8 = 1 << 2
	Flag2L7Delegate      uint8 = 1 << 3
	Flag2IntLocalScope   uint8 = 1 << 4
	Flag2TwoScopes       uint8 = 1 << 5
	Flag2SourceRangeDeny uint8 = 1 << 6
	Flag2FwdModeDSR      uint8 = 1 << 7
)

// Flags returns the flags and flags2 bytes of the service's map values.
//
// The type sets one bit (ClusterIP none, NodePort FlagNodePort, ExternalIPs
// FlagExternalIP, LoadBalancer FlagLoadBalancer, HostPort FlagHostPort,
// LocalRedirect Flag2LocalRedirect). FlagRoutable is set for every type
// except LocalRedirect and a NodePort service on the surrogate frontend
// (0.0.0.0 or ::), which only stands for the node's own addresses.
// FlagExtLocalScope, Flag2IntLocalScope and FlagAffinity follow the options;
// Flag2TwoScopes is set when the service has two backend sets (TwoScopes).
// DSR sets Flag2FwdModeDSR; source ranges FlagSourceRange, and
// Flag2SourceRangeDeny for a deny list. NAT46/64 and L7 are not supported
// yet and their bits stay 0.
func (s *Service) Flags() (flags, flags2 uint8) {
	if s == nil {
		return 0, 0
	}
	switch s.Type {
	case SVCTypeNodePort:
		flags |= FlagNodePort
	case SVCTypeExternalIPs:
		flags |= FlagExternalIP
	case SVCTypeLoadBalancer:
		flags |= FlagLoadBalancer
	case SVCTypeHostPort:
		flags |= FlagHostPort
	case SVCTypeLocalRedirect:
		flags2 |= Flag2LocalRedirect
	}
	surrogateNodePort := s.Type == SVCTypeNodePort && s.Frontend.IsSurrogate()
	if !surrogateNodePort && s.Type != SVCTypeLocalRedirect {
		flags |= FlagRoutable
	}
	if s.ExtTrafficPolicyLocal {
		flags |= FlagExtLocalScope
	}
	if s.SessionAffinity {
		flags |= FlagAffinity
	}
	if s.IntTrafficPolicyLocal {
		flags2 |= Flag2IntLocalScope
	}
	if s.TwoScopes() {
		flags2 |= Flag2TwoScopes
	}
	if s.DSR {
		flags2 |= Flag2FwdModeDSR
	}
	if len(s.SourceRanges) > 0 {
		flags |= FlagSourceRange
		if s.SourceRangesDeny {
			flags2 |= Flag2SourceRangeDeny
		}
	}
	return flags, flags2
}

// TwoScopes reports whether the service carries two backend sets: it has
// an external side and exactly one of its two traffic policies is Local.
// The external set (key scope ScopeExternal) then serves connections from
// outside the node, the internal one (ScopeInternal) those from inside.
// Otherwise one set serves both: the node-local backends if a policy is
// Local, all of them if not.
func (s *Service) TwoScopes() bool {
	return s != nil && s.Type.HasExternalSide() && s.ExtTrafficPolicyLocal != s.IntTrafficPolicyLocal
}

// ScopeLocal reports whether the backend set at scope sc holds only the
// node-local backends. Without two scopes there is one set (at
// ScopeExternal), local when either policy is Local.
func (s *Service) ScopeLocal(sc Scope) bool {
	if s == nil {
		return false
	}
	if !s.TwoScopes() {
		return s.ExtTrafficPolicyLocal || s.IntTrafficPolicyLocal
	}
	if sc == ScopeInternal {
		return s.IntTrafficPolicyLocal
	}
	return s.ExtTrafficPolicyLocal
}

// AffinityAlgo returns the backend_id union of the master slot: bits 0-23
// the session affinity timeout in seconds (0 without affinity,
// DefaultSessionAffinityTimeout when the timeout is 0), bits 24-31 the LB
// algorithm.
func (s *Service) AffinityAlgo() uint32 {
	if s == nil {
		return 0
	}
	var timeout uint32
	if s.SessionAffinity {
		timeout = s.SessionAffinityTimeout
		if timeout == 0 {
			timeout = DefaultSessionAffinityTimeout
		}
	}
	return timeout&MaxSessionAffinityTimeout | uint32(s.LBAlgorithm)<<24
}

// MaxSourceRanges bounds a service's SourceRanges.
const MaxSourceRanges = 256

func (s *Service) validateSourceRanges() error {
	if len(s.SourceRanges) == 0 {
		if s.SourceRangesDeny {
			return invalid("source-ranges-deny", "true", "a deny list needs source-ranges")
		}
		return nil
	}
	if !s.Type.HasExternalSide() {
		return invalid("source-ranges", s.SourceRanges[0].String(),
			"a "+s.Type.String()+" service is reached only from inside the node: source ranges apply to traffic from outside (LoadBalancer, NodePort, ExternalIPs, HostPort)")
	}
	if len(s.SourceRanges) > MaxSourceRanges {
		return invalid("source-ranges", strconv.Itoa(len(s.SourceRanges))+" prefixes", "at most "+strconv.Itoa(MaxSourceRanges))
	}
	v4 := s.Frontend.Addr.Unmap().Is4()
	for i, p := range s.SourceRanges {
		field := "source-ranges[" + strconv.Itoa(i) + "]"
		switch {
		case !p.IsValid():
			return invalid(field, p.String(), "not a valid prefix")
		case p.Addr().Is4() != v4 || p.Addr().Is4In6():
			return invalid(field, p.String(), "not of the frontend's address family")
		case p != p.Masked():
			return invalid(field, p.String(), "has host bits set: did you mean "+p.Masked().String()+"?")
		}
		for j := range i {
			if s.SourceRanges[j] == p {
				return invalid(field, p.String(), "duplicate of source-ranges["+strconv.Itoa(j)+"]")
			}
		}
	}
	return nil
}
