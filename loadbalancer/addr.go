package loadbalancer

import (
	"cmp"
	"net/netip"
	"strconv"
	"strings"
)

// L3n4Addr is an IP address, an L4 port and protocol, and a scope: the key of
// a frontend, or (with scope external) the address of a backend.
//
// In a valid L3n4Addr, Addr is valid, has no zone and is not an IPv4-mapped
// IPv6 address (IPv4 is always stored as a 4-byte address), Port is 1..65535,
// Protocol is one of ANY, TCP, UDP, SCTP and Scope is external or internal.
// L3n4Addr is comparable with ==.
type L3n4Addr struct {
	Addr     netip.Addr
	Port     uint16
	Protocol L4Type
	Scope    Scope
}

// NewL3n4Addr returns an L3n4Addr with addr unmapped (an IPv4-mapped IPv6
// address becomes IPv4). It does not validate; a zone, if any, is kept so
// that Validate reports it instead of silently changing the address.
func NewL3n4Addr(addr netip.Addr, port uint16, proto L4Type, scope Scope) L3n4Addr {
	return L3n4Addr{Addr: addr.Unmap(), Port: port, Protocol: proto, Scope: scope}
}

// ParseL3n4Addr parses "IP:PORT[/PROTOCOL[/SCOPE]]":
//
//	10.96.0.10:53/udp
//	[fd00::a]:443/tcp
//	10.0.1.5:8080               protocol defaults to TCP
//	10.96.0.10:53/udp/internal  scope after the protocol; defaults to external
//
// IPv6 addresses must be in brackets and must not have a zone; IPv4-mapped
// IPv6 addresses are converted to IPv4. The port must be 1..65535, the
// protocol one of tcp, udp, sctp, any and the scope external or internal (all
// case-insensitive). Errors are *ValidationError with Field "address".
func ParseL3n4Addr(s string) (L3n4Addr, error) {
	return parseL3n4Addr("address", s, true)
}

func parseL3n4Addr(field, s string, allowScope bool) (L3n4Addr, error) {
	fail := func(reason string) (L3n4Addr, error) {
		return L3n4Addr{}, invalid(field, s, reason)
	}
	if s == "" {
		return fail("address is empty")
	}
	maxParts := 2
	if allowScope {
		maxParts = 3
	}
	parts := strings.SplitN(s, "/", maxParts+1)
	if len(parts) > maxParts {
		if allowScope {
			return fail("too many '/' parts, want IP:PORT[/PROTOCOL[/SCOPE]]")
		}
		return fail("too many '/' parts, want IP:PORT[/PROTOCOL]")
	}

	addr, port, reason := splitAddrPort(parts[0])
	if reason != "" {
		return fail(reason)
	}

	proto := TCP
	if len(parts) > 1 {
		p, err := ParseL4Type(parts[1])
		if err != nil {
			if parts[1] == "" {
				return fail("missing protocol after '/'")
			}
			return fail("unknown protocol " + strconv.Quote(parts[1]) + ", want tcp, udp, sctp or any")
		}
		proto = p
	}

	scope := ScopeExternal
	if len(parts) > 2 {
		sc, err := ParseScope(parts[2])
		if err != nil {
			if parts[2] == "" {
				return fail("missing scope after '/'")
			}
			return fail("unknown scope " + strconv.Quote(parts[2]) + ", want external or internal")
		}
		scope = sc
	}
	return L3n4Addr{Addr: addr, Port: port, Protocol: proto, Scope: scope}, nil
}

// splitAddrPort parses "IP:PORT" or "[IPv6]:PORT". It returns a non-empty
// reason on failure.
func splitAddrPort(s string) (netip.Addr, uint16, string) {
	var host, rest string
	bracketed := strings.HasPrefix(s, "[")
	if bracketed {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, 0, "missing ']' after IPv6 address"
		}
		host, rest = s[1:end], s[end+1:]
	} else {
		if s == "" {
			return netip.Addr{}, 0, "missing IP:PORT"
		}
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			if _, err := netip.ParseAddr(s); err == nil {
				return netip.Addr{}, 0, "missing port"
			}
			return netip.Addr{}, 0, strconv.Quote(s) + " is not an IP address"
		}
		host, rest = s[:i], s[i:]
		if strings.IndexByte(host, ':') >= 0 {
			_, err1 := netip.ParseAddr(s)
			_, err2 := netip.ParseAddr(host)
			if err1 == nil || err2 == nil {
				return netip.Addr{}, 0, "IPv6 address must be in brackets, like [fd00::1]:80"
			}
			return netip.Addr{}, 0, strconv.Quote(host) + " is not an IP address"
		}
	}

	if strings.IndexByte(host, '%') >= 0 {
		return netip.Addr{}, 0, "IP address must not have a zone"
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, strconv.Quote(host) + " is not an IP address"
	}
	if bracketed && !addr.Is6() {
		return netip.Addr{}, 0, "only IPv6 addresses go in brackets"
	}
	if rest == "" || rest == ":" {
		return netip.Addr{}, 0, "missing port"
	}
	if rest[0] != ':' {
		return netip.Addr{}, 0, "unexpected " + strconv.Quote(rest) + " after IP address"
	}
	port, reason := parsePort(rest[1:])
	if reason != "" {
		return netip.Addr{}, 0, reason
	}
	return addr.Unmap(), port, ""
}

const portRangeReason = "port must be between 1 and 65535"

func parsePort(s string) (uint16, string) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "port " + strconv.Quote(s) + " is not a decimal number"
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, portRangeReason
	}
	return uint16(n), ""
}

// String returns the canonical form: "10.96.0.10:53/UDP", "[fd00::a]:443/TCP",
// with "/internal" appended for the internal scope. For every valid a,
// ParseL3n4Addr(a.String()) returns a.
func (a L3n4Addr) String() string {
	var b strings.Builder
	b.WriteString(a.AddrPort().String())
	b.WriteByte('/')
	b.WriteString(a.Protocol.String())
	if a.Scope != ScopeExternal {
		b.WriteByte('/')
		b.WriteString(a.Scope.String())
	}
	return b.String()
}

// AddrPort returns the address and port as a netip.AddrPort.
func (a L3n4Addr) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(a.Addr, a.Port)
}

// IsIPv6 reports whether the address is IPv6 (and so goes to the lb6 maps).
func (a L3n4Addr) IsIPv6() bool {
	return a.Addr.Is6()
}

// IsSurrogate reports whether the address is unspecified (0.0.0.0 or ::): the
// surrogate frontend of a NodePort or HostPort service, which matches every node IP.
func (a L3n4Addr) IsSurrogate() bool {
	return a.Addr.IsUnspecified()
}

// Validate checks that a is valid (see L3n4Addr). The unspecified address is
// allowed (surrogate NodePort frontend). Errors are *ValidationError whose
// Field is field for the address and field+".port", field+".protocol" or
// field+".scope" for the others.
func (a L3n4Addr) Validate(field string) error {
	if err := validateAddr(field, "", a.Addr); err != nil {
		return err
	}
	return a.validateRest(field, true)
}

// validateAddr checks addr; field+sub names it in errors (joined only
// for an error: a backend's checks build no string when all is well).
func validateAddr(field, sub string, addr netip.Addr) error {
	switch {
	case !addr.IsValid():
		return invalid(field+sub, "", "address is not set")
	case addr.Zone() != "":
		return invalid(field+sub, addr.String(), "IP address must not have a zone")
	case addr.Is4In6():
		return invalid(field+sub, addr.String(), "IPv4-mapped IPv6 address, use the IPv4 form "+addr.Unmap().String())
	}
	return nil
}

// validateRest checks port, protocol and (if withScope) scope.
func (a *L3n4Addr) validateRest(field string, withScope bool) error {
	if a.Port == 0 {
		return invalid(field+".port", "0", portRangeReason)
	}
	if !a.Protocol.IsValid() {
		return invalid(field+".protocol", strconv.Itoa(int(a.Protocol)), "unknown protocol, want TCP (6), UDP (17), SCTP (132) or ANY (0)")
	}
	if withScope && !a.Scope.IsValid() {
		return invalid(field+".scope", strconv.Itoa(int(a.Scope)), "unknown scope, want external (0) or internal (1)")
	}
	return nil
}

// identityLess reports whether a comes before b by address, port and
// protocol (a backend's identity: its scope aside).
func (a *L3n4Addr) identityLess(b *L3n4Addr) bool {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c < 0
	}
	if a.Port != b.Port {
		return a.Port < b.Port
	}
	return a.Protocol < b.Protocol
}

// Compare returns -1, 0 or +1. The order is total: IPv4 before IPv6, then
// address bytes, port, protocol and scope.
func (a L3n4Addr) Compare(b L3n4Addr) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
		return c
	}
	return cmp.Compare(a.Scope, b.Scope)
}
