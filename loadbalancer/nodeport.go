package loadbalancer

import (
	"net/netip"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of L4 ports, Min <= Max, both 1..65535.
type PortRange struct {
	Min, Max uint16
}

// DefaultNodePortRange is the range NodePort frontends take their port from
// unless the agent is told otherwise (--node-port-range), as in Kubernetes.
var DefaultNodePortRange = PortRange{Min: 30000, Max: 32767}

// String returns the range as ParsePortRange reads it: "30000-32767".
func (r PortRange) String() string {
	return strconv.Itoa(int(r.Min)) + "-" + strconv.Itoa(int(r.Max))
}

// Contains reports whether port is in the range.
func (r PortRange) Contains(port uint16) bool { return port >= r.Min && port <= r.Max }

// ParsePortRange parses "MIN-MAX" (decimal ports 1..65535, MIN <= MAX; no
// spaces, signs or leading '+'). A single port "P" is the range P-P.
// Errors are *ValidationError with Field "node-port-range".
func ParsePortRange(s string) (PortRange, error) {
	fail := func(reason string) (PortRange, error) {
		return PortRange{}, invalid("node-port-range", s, reason)
	}
	if s == "" {
		return fail("range is empty, want MIN-MAX like " + DefaultNodePortRange.String())
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	first, reason := parsePort(lo)
	if lo == "" {
		reason = "missing the first port, want MIN-MAX like " + DefaultNodePortRange.String()
	}
	if reason != "" {
		return fail(reason)
	}
	last, reason := parsePort(hi)
	if hi == "" {
		reason = "missing the last port, want MIN-MAX like " + DefaultNodePortRange.String()
	}
	if reason != "" {
		return fail(reason)
	}
	if first > last {
		return fail("the first port " + lo + " is above the last " + hi)
	}
	return PortRange{Min: first, Max: last}, nil
}

// ValidateNodePort checks that port is in r. The error is a
// *ValidationError with Field "node-port" whose reason names the range.
func ValidateNodePort(port uint16, r PortRange) error {
	if r.Contains(port) {
		return nil
	}
	return invalid("node-port", strconv.Itoa(int(port)), "node port must be in the node port range "+r.String())
}

// NodePortFrontends returns the frontends of a NodePort service on fe's
// port and protocol: first the surrogate (0.0.0.0 or :: of fe's family,
// which the datapath uses for any local address), then one per address of
// nodeAddrs of fe's family, in the order given, each once. Unspecified,
// invalid and zoned addresses of nodeAddrs are skipped; IPv4-mapped IPv6
// addresses count as IPv4. The frontends keep fe's scope.
func NodePortFrontends(fe L3n4Addr, nodeAddrs []netip.Addr) []L3n4Addr {
	v6 := fe.Addr.Unmap().Is6()
	surrogate := netip.IPv4Unspecified()
	if v6 {
		surrogate = netip.IPv6Unspecified()
	}
	out := make([]L3n4Addr, 0, len(nodeAddrs)+1)
	out = append(out, L3n4Addr{Addr: surrogate, Port: fe.Port, Protocol: fe.Protocol, Scope: fe.Scope})
	seen := make(map[netip.Addr]bool, len(nodeAddrs))
	for _, a := range nodeAddrs {
		a = a.Unmap()
		if !a.IsValid() || a.IsUnspecified() || a.Zone() != "" || a.Is6() != v6 || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, L3n4Addr{Addr: a, Port: fe.Port, Protocol: fe.Protocol, Scope: fe.Scope})
	}
	return out
}
