package loadbalancer

import (
	"strconv"
	"strings"
)

// L4Type is the L4 protocol of a frontend or backend. Its values are the IP
// protocol numbers written to the BPF maps; ANY (0) matches every protocol.
type L4Type uint8

const (
	ANY  L4Type = 0
	TCP  L4Type = 6
	UDP  L4Type = 17
	SCTP L4Type = 132
)

// ParseL4Type parses "tcp", "udp", "sctp" or "any", in any case. The empty
// string is an error: defaults belong to the callers (ParseL3n4Addr uses TCP).
func ParseL4Type(s string) (L4Type, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return TCP, nil
	case "udp":
		return UDP, nil
	case "sctp":
		return SCTP, nil
	case "any":
		return ANY, nil
	}
	return 0, invalid("protocol", s, "must be one of tcp, udp, sctp, any")
}

// String returns "TCP", "UDP", "SCTP", "ANY", or "L4Type(n)" for an unknown
// value.
func (t L4Type) String() string {
	switch t {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	case SCTP:
		return "SCTP"
	case ANY:
		return "ANY"
	}
	return "L4Type(" + strconv.Itoa(int(t)) + ")"
}

// IsValid reports whether t is one of ANY, TCP, UDP, SCTP.
func (t L4Type) IsValid() bool {
	return t == ANY || t == TCP || t == UDP || t == SCTP
}

// Scope selects which of the two backend sets of a service a frontend uses:
// external (traffic from outside the node) or internal (from inside).
type Scope uint8

const (
	ScopeExternal Scope = 0
	ScopeInternal Scope = 1
)

// ParseScope parses "external" or "internal", in any case. The empty string
// is an error.
func ParseScope(s string) (Scope, error) {
	switch strings.ToLower(s) {
	case "external":
		return ScopeExternal, nil
	case "internal":
		return ScopeInternal, nil
	}
	return 0, invalid("scope", s, "must be external or internal")
}

// String returns "external", "internal", or "Scope(n)" for an unknown value.
func (s Scope) String() string {
	switch s {
	case ScopeExternal:
		return "external"
	case ScopeInternal:
		return "internal"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// IsValid reports whether s is ScopeExternal or ScopeInternal.
func (s Scope) IsValid() bool {
	return s == ScopeExternal || s == ScopeInternal
}
