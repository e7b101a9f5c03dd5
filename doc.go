// Package actorlb is the library API of actorlb, the control plane of an
// eBPF service load balancer, for host agents that embed it.
//
// New opens (or creates) the pinned service, backend and reverse-NAT maps,
// starts the actors, restores their state from the maps and returns an
// Engine that is ready to serve. Every method takes a context, is safe for
// concurrent use, and returns once the maps reflect the result.
//
// Lifecycle: keep the Engine and call Close when done; Close stops the
// actors top-down and closes the maps, which stay pinned (the datapath keeps
// working, and the next New restores from them with the same IDs).
//
// Error contract: invalid input returns an error wrapping
// loadbalancer.ErrInvalid (a *loadbalancer.ValidationError naming the field)
// and touches no map. Other failures wrap the sentinels of this package
// (ErrServiceNotFound, ErrServiceIDInUse, ErrFrontendInUse,
// ErrIDSpaceExhausted, maps.ErrMapFull, ...), name the step that failed, and
// leave the previous version of the service in place.
package actorlb
