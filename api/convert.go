package api

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Traffic policies of ServiceFlags.
const (
	PolicyCluster = "Cluster"
	PolicyLocal   = "Local"
)

// jsonPath renames a loadbalancer.ValidationError field to the JSON path
// of the ServiceSpec field it comes from.
func jsonPath(field string) string {
	switch {
	case field == "frontend":
		return "frontend-address.ip"
	case strings.HasPrefix(field, "frontend."):
		return "frontend-address." + strings.TrimPrefix(field, "frontend.")
	case strings.HasPrefix(field, "backends"):
		p := "backend-addresses" + strings.TrimPrefix(field, "backends")
		if strings.HasSuffix(p, ".address") {
			p = strings.TrimSuffix(p, ".address") + ".ip"
		}
		return p
	case field == "type":
		return "flags.type"
	case field == "session-affinity-timeout":
		return "flags.sessionAffinityTimeout"
	case field == "lb-algorithm":
		return "flags.lbAlgorithm"
	case field == "external-traffic-policy":
		return "flags.extTrafficPolicy"
	case field == "internal-traffic-policy":
		return "flags.intTrafficPolicy"
	case field == "session-affinity":
		return "flags.sessionAffinity"
	case strings.HasPrefix(field, "source-ranges-deny"):
		return "flags.sourceRangesDeny"
	case strings.HasPrefix(field, "source-ranges"):
		return "flags.sourceRanges" + strings.TrimPrefix(field, "source-ranges")
	}
	return field
}

// fieldError turns err (a *lb.ValidationError from a parser or validator)
// into a *FieldError at path; path "" renames the error's own field.
func fieldError(path string, err error) error {
	var ve *lb.ValidationError
	if !errors.As(err, &ve) {
		return &FieldError{Path: path, Reason: err.Error()}
	}
	if path == "" {
		path = jsonPath(ve.Field)
	}
	return &FieldError{Path: path, Value: ve.Value, Reason: ve.Reason}
}

func parseIP(path, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, &FieldError{Path: path, Reason: "IP address is required"}
	}
	if strings.Contains(s, "%") {
		return netip.Addr{}, &FieldError{Path: path, Value: s, Reason: "IP address must not have a zone"}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, &FieldError{Path: path, Value: s, Reason: "not an IP address"}
	}
	return a.Unmap(), nil
}

func parsePolicy(path, s string) (bool, error) {
	switch {
	case s == "" || strings.EqualFold(s, PolicyCluster):
		return false, nil
	case strings.EqualFold(s, PolicyLocal):
		return true, nil
	}
	return false, &FieldError{Path: path, Value: s, Reason: "must be Cluster or Local"}
}

// ToService converts spec, for the service with ID id, into a validated
// loadbalancer.Service. A non-zero spec.ID must equal id. Errors are
// *FieldError naming the JSON path.
func ToService(id lb.ServiceID, spec *ServiceSpec) (*lb.Service, error) {
	if spec.ID != 0 && spec.ID != int64(id) {
		return nil, &FieldError{Path: "id", Value: strconv.FormatInt(spec.ID, 10),
			Reason: "does not match the service ID " + id.String() + " in the path"}
	}
	fe := spec.FrontendAddress
	if fe == nil {
		return nil, &FieldError{Path: "frontend-address", Reason: "required"}
	}
	svc := &lb.Service{Frontend: lb.Frontend{ID: id}}
	addr, err := parseIP("frontend-address.ip", fe.IP)
	if err != nil {
		return nil, err
	}
	proto := lb.TCP
	if fe.Protocol != "" {
		if proto, err = lb.ParseL4Type(fe.Protocol); err != nil {
			return nil, fieldError("frontend-address.protocol", err)
		}
	}
	scope := lb.ScopeExternal
	if fe.Scope != "" {
		if scope, err = lb.ParseScope(fe.Scope); err != nil {
			return nil, fieldError("frontend-address.scope", err)
		}
	}
	svc.Frontend.L3n4Addr = lb.NewL3n4Addr(addr, fe.Port, proto, scope)

	for i, b := range spec.BackendAddresses {
		path := "backend-addresses[" + strconv.Itoa(i) + "]"
		a, err := parseIP(path+".ip", b.IP)
		if err != nil {
			return nil, err
		}
		be := lb.Backend{L3n4Addr: lb.NewL3n4Addr(a, b.Port, proto, lb.ScopeExternal), Weight: lb.DefaultBackendWeight}
		if b.Weight != nil {
			be.Weight = *b.Weight
		}
		be.NodeLocal = b.NodeLocal
		if be.State, err = lb.ParseBackendState(b.State); err != nil {
			return nil, fieldError(path+".state", err)
		}
		svc.Backends = append(svc.Backends, be)
	}

	if f := spec.Flags; f != nil {
		if svc.Type, err = lb.ParseServiceType(f.Type); err != nil {
			return nil, fieldError("flags.type", err)
		}
		ext, err := parsePolicy("flags.extTrafficPolicy", f.ExtTrafficPolicy)
		if err != nil {
			return nil, err
		}
		legacy, err := parsePolicy("flags.trafficPolicy", f.TrafficPolicy)
		if err != nil {
			return nil, err
		}
		if f.TrafficPolicy != "" && f.ExtTrafficPolicy != "" && legacy != ext {
			return nil, &FieldError{Path: "flags.trafficPolicy", Value: f.TrafficPolicy,
				Reason: "disagrees with flags.extTrafficPolicy " + strconv.Quote(f.ExtTrafficPolicy) + " (give one of them)"}
		}
		svc.ExtTrafficPolicyLocal = ext || legacy
		if svc.IntTrafficPolicyLocal, err = parsePolicy("flags.intTrafficPolicy", f.IntTrafficPolicy); err != nil {
			return nil, err
		}
		svc.SessionAffinity = f.SessionAffinity
		svc.SessionAffinityTimeout = f.SessionAffinityTimeout
		if f.SessionAffinityTimeout != 0 && !f.SessionAffinity {
			return nil, &FieldError{Path: "flags.sessionAffinityTimeout", Value: strconv.FormatUint(uint64(f.SessionAffinityTimeout), 10),
				Reason: "needs flags.sessionAffinity true"}
		}
		if svc.SessionAffinity && svc.SessionAffinityTimeout == 0 {
			// What the master entry holds, and so what a restore reads back.
			svc.SessionAffinityTimeout = lb.DefaultSessionAffinityTimeout
		}
		if svc.LBAlgorithm, err = lb.ParseLBAlgorithm(f.LBAlgorithm); err != nil {
			return nil, fieldError("flags.lbAlgorithm", err)
		}
		svc.DSR = f.DSR
		for i, r := range f.SourceRanges {
			pfx, err := netip.ParsePrefix(strings.TrimSpace(r))
			if err != nil {
				return nil, &FieldError{Path: "flags.sourceRanges[" + strconv.Itoa(i) + "]", Value: r, Reason: "not a CIDR (e.g. 192.0.2.0/24)"}
			}
			svc.SourceRanges = append(svc.SourceRanges, pfx)
		}
		svc.SourceRangesDeny = f.SourceRangesDeny
		if err := checkUpstreamFlags(f); err != nil {
			return nil, err
		}
		if f.Source != "" {
			src, err := lb.ParseSource(f.Source)
			if err != nil {
				return nil, fieldError("flags.source", err)
			}
			if src != lb.SourceAPI {
				return nil, &FieldError{Path: "flags.source", Value: f.Source,
					Reason: "only the " + src.String() + " sync writes " + src.String() + " services (leave it out or give api)"}
			}
		}
		if f.DirectServerReturn != nil && !*f.DirectServerReturn {
			return nil, &FieldError{Path: "flags.direct-server-return", Value: "false",
				Reason: "actorlb always creates the revNAT entry with the service (what true means in upstream v1.6); leave the flag out or set it true"}
		}
	}
	if err := svc.Validate(); err != nil {
		return nil, fieldError("", err)
	}
	return svc, nil
}

// checkUpstreamFlags refuses the upstream flags actorlb cannot honour:
// a NAT46/64 policy, a health check node port, service names.
func checkUpstreamFlags(f *ServiceFlags) error {
	if f.NatPolicy != "" && !strings.EqualFold(f.NatPolicy, "None") {
		return &FieldError{Path: "flags.natPolicy", Value: f.NatPolicy,
			Reason: "NAT46/64 services are not supported (leave it out or give None)"}
	}
	if f.HealthCheckNodePort != 0 {
		return &FieldError{Path: "flags.healthCheckNodePort", Value: strconv.Itoa(int(f.HealthCheckNodePort)),
			Reason: "actorlb serves no health check node port (leave it out or give 0)"}
	}
	for _, n := range []struct{ path, v string }{{"flags.name", f.Name}, {"flags.namespace", f.Namespace}, {"flags.cluster", f.Cluster}} {
		if n.v != "" {
			return &FieldError{Path: n.path, Value: n.v,
				Reason: "actorlb names a service by its ID and does not store names (leave it out)"}
		}
	}
	return nil
}

// MaglevWarning is the warning of a service with lbAlgorithm maglev.
const MaglevWarning = "lbAlgorithm maglev is stored in the service map but has no effect on the socket LB yet: it selects backends at random (weighted); the packet datapath (agent --datapath-devices) uses the Maglev table"

// Warnings says what of svc is accepted but not honoured by the
// datapath (nil if nothing).
func Warnings(svc *lb.Service) []string {
	if svc != nil && svc.LBAlgorithm == lb.LBAlgMaglev {
		return []string{MaglevWarning}
	}
	return nil
}

func policyName(local bool) string {
	if local {
		return PolicyLocal
	}
	return PolicyCluster
}

// FromService converts an engine service into its ServiceSpec.
func FromService(svc *lb.Service) *ServiceSpec {
	fe := svc.Frontend
	spec := &ServiceSpec{
		ID: int64(fe.ID),
		FrontendAddress: &FrontendAddress{
			IP: fe.Addr.String(), Port: fe.Port,
			Protocol: strings.ToLower(fe.Protocol.String()), Scope: fe.Scope.String(),
		},
		BackendAddresses: make([]BackendAddress, len(svc.Backends)),
		Flags: &ServiceFlags{
			Type:                   svc.Type.String(),
			TrafficPolicy:          policyName(svc.ExtTrafficPolicyLocal),
			ExtTrafficPolicy:       policyName(svc.ExtTrafficPolicyLocal),
			IntTrafficPolicy:       policyName(svc.IntTrafficPolicyLocal),
			SessionAffinity:        svc.SessionAffinity,
			SessionAffinityTimeout: svc.SessionAffinityTimeout,
			LBAlgorithm:            svc.LBAlgorithm.String(),
			DSR:                    svc.DSR,
			SourceRangesDeny:       svc.SourceRangesDeny,
			Source:                 svc.Source.String(),
		},
	}
	for _, r := range svc.SourceRanges {
		spec.Flags.SourceRanges = append(spec.Flags.SourceRanges, r.String())
	}
	for i, b := range svc.Backends {
		w := b.Weight
		spec.BackendAddresses[i] = BackendAddress{IP: b.Addr.String(), Port: b.Port, Weight: &w, State: b.State.String(), NodeLocal: b.NodeLocal}
	}
	return spec
}

// NewService wraps the spec of an engine service with its status.
func NewService(svc *lb.Service) *Service {
	spec := FromService(svc)
	return &Service{Spec: spec, Status: &ServiceStatus{Realized: FromService(svc), Warnings: Warnings(svc)}}
}

func compareServiceKey(a, b maps.ServiceKey) int {
	return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto),
		cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Slot, b.Slot))
}

func sortServiceEntries(es []maps.ServiceEntry) {
	slices.SortFunc(es, func(a, b maps.ServiceEntry) int { return compareServiceKey(a.Key, b.Key) })
}

func sortBackendEntries(es []maps.BackendEntry) {
	slices.SortFunc(es, func(a, b maps.BackendEntry) int { return cmp.Compare(a.ID, b.ID) })
}

func sortRevNATEntries(es []maps.RevNATEntry) {
	slices.SortFunc(es, func(a, b maps.RevNATEntry) int { return cmp.Compare(a.ID, b.ID) })
}

func serviceEntry(e maps.ServiceEntry) ServiceMapEntry {
	k, v := e.Key, e.Value
	return ServiceMapEntry{
		Key: ServiceMapKey{Address: k.Address.Unmap().String(), Dport: k.Port, BackendSlot: k.Slot, Proto: k.Proto, Scope: k.Scope},
		Value: ServiceMapValue{BackendID: v.BackendID, Count: v.Count, RevNATIndex: v.RevNATIndex,
			Flags: v.Flags, Flags2: v.Flags2, QCount: v.QCount},
	}
}

func backendEntry(e maps.BackendEntry) BackendMapEntry {
	v := e.Value
	return BackendMapEntry{ID: e.ID, Value: BackendMapValue{Address: v.Address.Unmap().String(), Port: v.Port,
		Proto: v.Proto, Flags: v.State, ClusterID: v.ClusterID, Zone: v.Zone}}
}

func revNATEntry(e maps.RevNATEntry) RevNATMapEntry {
	return RevNATMapEntry{ID: e.ID, Value: RevNATMapValue{Address: e.Value.Address.Unmap().String(), Port: e.Value.Port}}
}

// convertAll sorts a copy of es and converts every entry.
func convertAll[E, T any](es []E, sortFn func([]E), conv func(E) T) []T {
	es = slices.Clone(es)
	sortFn(es)
	out := make([]T, len(es))
	for i, e := range es {
		out[i] = conv(e)
	}
	return out
}

// NewMapsDump converts the entries read from the maps pinned under root
// into a MapsDump (every list non-nil and sorted).
func NewMapsDump(root string, d actorlb.MapEntries) *MapsDump {
	return &MapsDump{
		Root:      root,
		Services4: convertAll(d.Services4, sortServiceEntries, serviceEntry),
		Backends4: convertAll(d.Backends4, sortBackendEntries, backendEntry),
		RevNAT4:   convertAll(d.RevNAT4, sortRevNATEntries, revNATEntry),
		Services6: convertAll(d.Services6, sortServiceEntries, serviceEntry),
		Backends6: convertAll(d.Backends6, sortBackendEntries, backendEntry),
		RevNAT6:   convertAll(d.RevNAT6, sortRevNATEntries, revNATEntry),
	}
}

// RevNATFromDump lists the revNAT entries of both families sorted by ID;
// an entry belongs to a service when a master of its family has its ID.
func RevNATFromDump(d actorlb.MapEntries) []RevNATEntry {
	out := []RevNATEntry{}
	for _, fam := range []struct {
		svcs []maps.ServiceEntry
		revs []maps.RevNATEntry
	}{{d.Services4, d.RevNAT4}, {d.Services6, d.RevNAT6}} {
		owned := map[uint16]bool{}
		for _, e := range fam.svcs {
			if e.Key.Slot == 0 {
				owned[e.Value.RevNATIndex] = true
			}
		}
		for _, e := range fam.revs {
			out = append(out, RevNATEntry{ID: e.ID, IP: e.Value.Address.Unmap().String(), Port: e.Value.Port, Service: owned[e.ID]})
		}
	}
	slices.SortStableFunc(out, func(a, b RevNATEntry) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
