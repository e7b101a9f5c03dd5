// Package addrkey holds the memory-layout forms of addresses that
// actorlb's indexes and mirrors keep by the hundred thousand: addresses
// without pointers (IP, IP4), a backend's identity in 20 bytes (Backend),
// a service map key without its slot (ServiceKey), and the packers that
// fit the IPv4 ones into 8 bytes for internal/packedmap, and IPv6 backends
// too once their /104 prefix is learnt (BackendPacker).
//
// Why: a netip.Addr holds a pointer, so a Go map keyed by one is scanned
// by the garbage collector and takes 32 bytes per key; these forms are
// plain bytes, and IPv4 ones pack into a uint64.
//
// # Lifecycle
//
// Plain values: no goroutines. A BackendPacker holds the prefixes it has
// learnt (up to MaxBackendPrefixes, never forgotten): it belongs to the
// one map it packs for, whose owner calls it from one goroutine.
//
// # Error contract
//
// Nothing here returns an error or panics. Every packer is lossless and
// injective (its tests check both): Unpack(Pack(k)) == k, and two keys
// never pack alike; a learning packer's Pack and Learn agree.
package addrkey
