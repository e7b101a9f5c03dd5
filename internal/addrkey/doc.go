// Package addrkey holds the memory-layout forms of addresses that
// actorlb's indexes and mirrors keep by the hundred thousand: addresses
// without pointers (IP, IP4), a backend's identity in 20 bytes (Backend),
// a service map key without its slot (ServiceKey), and the packers that
// fit them into 8 bytes for internal/packedmap: IPv4 ones always, IPv6
// ones once their prefix is learnt (BackendPacker: /104, a node's pod
// range; FrontendPacker and ServiceKeyPacker: /96, a service range).
// Prefixes104 keeps IPv6 addresses as a counted prefix handle and their
// last 3 bytes, for the IPv6 backend mirror's values.
//
// Why: a netip.Addr holds a pointer, so a Go map keyed by one is scanned
// by the garbage collector and takes 32 bytes per key; these forms are
// plain bytes, and most pack into a uint64. The bytes saved are measured
// by the harness (tests/bench, memory-10k-x10, with the worst case of
// addresses each in a prefix of its own).
//
// # Lifecycle
//
// No goroutines. IP, IP4, Backend and ServiceKey are plain values. A
// packer holds the prefixes it has learnt (up to MaxBackendPrefixes or
// MaxFrontendPrefixes, never forgotten) and a Prefixes104 its prefixes in
// use (up to MaxPrefixes104): each belongs to the one map it serves, whose
// owner calls it from one goroutine.
//
// # Error contract
//
// Nothing here returns an error or panics. Every packer is lossless and
// injective (its tests check both): Unpack(Pack(k)) == k, and two keys
// never pack alike; a learning packer's Pack and Learn agree, and a key
// Learn refuses once is refused for good. A full table refuses (ok
// false): the caller keeps that key or value whole.
package addrkey
