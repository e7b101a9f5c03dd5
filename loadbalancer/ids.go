package loadbalancer

import (
	"math"
	"strconv"
)

// ServiceID identifies a service in the BPF maps (rev_nat_index): 1..65535,
// one ID space for IPv4 and IPv6. 0 is invalid; in a Frontend it means
// "allocate one".
type ServiceID uint16

// BackendID identifies a backend in the backend maps: 1..2^32-1. 0 is
// invalid (the datapath reads it as "no backend").
type BackendID uint32

const (
	MaxServiceID = math.MaxUint16
	MaxBackendID = math.MaxUint32
)

// NewServiceID checks that n is in 1..MaxServiceID (never truncates).
func NewServiceID(n uint64) (ServiceID, error) {
	if n == 0 || n > MaxServiceID {
		return 0, invalid("id", strconv.FormatUint(n, 10), "service ID must be between 1 and 65535")
	}
	return ServiceID(n), nil
}

// ParseServiceID parses a decimal service ID in 1..MaxServiceID.
func ParseServiceID(s string) (ServiceID, error) {
	n, reason := parseDecimal(s)
	if reason != "" {
		return 0, invalid("id", s, reason)
	}
	if n == 0 || n > MaxServiceID {
		return 0, invalid("id", s, "service ID must be between 1 and 65535")
	}
	return ServiceID(n), nil
}

// String returns the ID in decimal.
func (id ServiceID) String() string { return strconv.FormatUint(uint64(id), 10) }

// NewBackendID checks that n is in 1..MaxBackendID (never truncates).
func NewBackendID(n uint64) (BackendID, error) {
	if n == 0 || n > MaxBackendID {
		return 0, invalid("backend-id", strconv.FormatUint(n, 10), "backend ID must be between 1 and 4294967295")
	}
	return BackendID(n), nil
}

// ParseBackendID parses a decimal backend ID in 1..MaxBackendID.
func ParseBackendID(s string) (BackendID, error) {
	n, reason := parseDecimal(s)
	if reason != "" {
		return 0, invalid("backend-id", s, reason)
	}
	if n == 0 || n > MaxBackendID {
		return 0, invalid("backend-id", s, "backend ID must be between 1 and 4294967295")
	}
	return BackendID(n), nil
}

// String returns the ID in decimal.
func (id BackendID) String() string { return strconv.FormatUint(uint64(id), 10) }

// parseDecimal accepts only ASCII digits. A number too large for uint64 is
// returned as MaxUint64 so that the caller reports it as out of range.
func parseDecimal(s string) (uint64, string) {
	if s == "" {
		return 0, "not a decimal number"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "not a decimal number"
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return math.MaxUint64, ""
	}
	return n, ""
}
