// Package loadbalancer holds the domain types of actorlb: L4 protocols and
// scopes, L3n4Addr, frontends, backends and their states and weights,
// services, service and backend IDs, and the flag bits that a service puts in
// the BPF service map. It parses and validates them and does nothing else: no
// I/O, no state, no imports of other actorlb packages.
//
// # Lifecycle
//
// All types are plain values. A Service handed to the engine (or put in a
// message) belongs to it from then on and must not be modified, since its
// Backends slice is shared; make changes on a copy from Service.DeepCopy.
//
// # Address syntax
//
// ParseL3n4Addr reads IP:PORT[/PROTOCOL[/SCOPE]]:
//
//	10.96.0.10:53/udp
//	[fd00::a]:443/tcp            IPv6 in brackets, no zone (%eth0)
//	10.0.1.5:8080                protocol defaults to TCP
//	10.96.0.10:53/udp/internal   scope defaults to external
//
// The port is 1..65535; the protocol is tcp, udp, sctp or any and the scope
// external or internal, both case-insensitive. IPv4-mapped IPv6 addresses
// ([::ffff:10.0.0.1]) are stored as IPv4. L3n4Addr.String writes the
// canonical form (10.96.0.10:53/UDP, with /internal only for the internal
// scope), which parses back to the same value. ParseBackend reads the same
// syntax without the scope.
//
// # Errors
//
// Every error returned by a parser (Parse*, New* with a range check) or a
// validator (Validate, ValidateStateTransition) is a *ValidationError naming
// the field, the value and the reason, and errors.Is(err, ErrInvalid) holds
// for it. ValidationError.IsFrontend and IsBackend tell whether a Service
// error is about its frontend or one of its backends. No function of this
// package panics on any input.
package loadbalancer
