package loadbalancer

import (
	"strconv"
	"strings"
)

// BackendState is the state of a backend. Its values are the flags byte of
// the backend map entry.
type BackendState uint8

const (
	// BackendStateActive backends receive new connections.
	BackendStateActive BackendState = 0
	// BackendStateTerminating backends are going away: they get no new
	// connections unless no backend is active. Final.
	BackendStateTerminating BackendState = 1
	// BackendStateQuarantined backends failed health checks: no new
	// connections.
	BackendStateQuarantined BackendState = 2
	// BackendStateMaintenance backends are taken out by the operator: they get
	// no slot but stay in the backend map.
	BackendStateMaintenance BackendState = 3
)

// ParseBackendState parses "active", "terminating", "quarantined" or
// "maintenance", in any case. The empty string means active.
func ParseBackendState(s string) (BackendState, error) {
	switch strings.ToLower(s) {
	case "", "active":
		return BackendStateActive, nil
	case "terminating":
		return BackendStateTerminating, nil
	case "quarantined":
		return BackendStateQuarantined, nil
	case "maintenance":
		return BackendStateMaintenance, nil
	}
	return 0, invalid("state", s, "must be one of active, terminating, quarantined, maintenance")
}

// String returns "active", "terminating", "quarantined", "maintenance", or
// "BackendState(n)" for an unknown value.
func (s BackendState) String() string {
	switch s {
	case BackendStateActive:
		return "active"
	case BackendStateTerminating:
		return "terminating"
	case BackendStateQuarantined:
		return "quarantined"
	case BackendStateMaintenance:
		return "maintenance"
	}
	return "BackendState(" + strconv.Itoa(int(s)) + ")"
}

// IsValid reports whether s is one of the four known states.
func (s BackendState) IsValid() bool { return s <= BackendStateMaintenance }

// IsActive reports whether the backend takes new connections.
func (s BackendState) IsActive() bool { return s == BackendStateActive }

// ValidateStateTransition reports whether a backend may change from one state
// to another. Staying in the same state is allowed. Otherwise:
// active -> terminating, quarantined, maintenance; quarantined -> active,
// terminating; maintenance -> active; terminating is final. A forbidden
// change is a *ValidationError (Field "state") matching
// ErrInvalidStateTransition. The engine applies these rules to the writes
// of SourceAPI; the Kubernetes sync may set any state (Kubernetes is the
// truth about its endpoints: a terminating address may come back ready).
func ValidateStateTransition(from, to BackendState) error {
	if !from.IsValid() {
		return invalid("state", from.String(), "unknown state")
	}
	if !to.IsValid() {
		return invalid("state", to.String(), "unknown state")
	}
	if from == to {
		return nil
	}
	var allowed bool
	var rule string
	switch from {
	case BackendStateActive:
		allowed = true
	case BackendStateTerminating:
		rule = "terminating is final"
	case BackendStateQuarantined:
		allowed = to == BackendStateActive || to == BackendStateTerminating
		rule = "quarantined can only become active or terminating"
	case BackendStateMaintenance:
		allowed = to == BackendStateActive
		rule = "maintenance can only become active"
	}
	if allowed {
		return nil
	}
	return &ValidationError{
		Field:  "state",
		Value:  to.String(),
		Reason: "cannot change from " + from.String() + " to " + to.String() + " (" + rule + ")",
		Err:    ErrInvalidStateTransition,
	}
}

const (
	// DefaultBackendWeight is the weight of a backend when none is given.
	DefaultBackendWeight uint16 = 100
	// MaxBackendWeight is the largest weight.
	MaxBackendWeight = 65535
)

// NewBackendWeight checks that n is in 0..MaxBackendWeight. Weight 0 is
// valid: the backend stays known but receives no new traffic.
func NewBackendWeight(n int64) (uint16, error) {
	if n < 0 || n > MaxBackendWeight {
		return 0, invalid("weight", strconv.FormatInt(n, 10), "weight must be between 0 and 65535")
	}
	return uint16(n), nil
}

// Backend is one backend of a service. Its Scope is meaningless and is
// ScopeExternal in canonical form; Service.Validate ignores it.
type Backend struct {
	L3n4Addr
	// Weight is the relative share of new connections among the service's
	// active backends (DefaultBackendWeight when parsed or decoded without
	// one). 0 means the backend receives no new connections while the open
	// ones keep working. Note that the zero value of Backend has weight 0:
	// set DefaultBackendWeight when building a Backend by hand.
	Weight uint16
	State  BackendState
	// NodeLocal says the backend runs on this node. A service whose
	// traffic policy is Local on one side sends that side's connections
	// only to its node-local backends.
	NodeLocal bool
}

// ParseBackend parses "IP:PORT[/PROTOCOL]" (see ParseL3n4Addr; no scope) into
// an active backend with DefaultBackendWeight. Errors are *ValidationError
// with Field "backend".
func ParseBackend(s string) (Backend, error) {
	a, err := parseL3n4Addr("backend", s, false)
	if err != nil {
		return Backend{}, err
	}
	return Backend{L3n4Addr: a, Weight: DefaultBackendWeight, State: BackendStateActive}, nil
}

// String returns the backend address in the form ParseBackend reads
// ("10.0.1.5:8080/TCP"); scope, weight and state are not included.
func (b Backend) String() string {
	a := b.L3n4Addr
	a.Scope = ScopeExternal
	return a.String()
}
