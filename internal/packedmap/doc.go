// Package packedmap is a map that keeps the keys which pack into 8 bytes
// packed: a key of 20 or 32 bytes (an address, port and protocol) that is
// an IPv4 one fits in a uint64, and a Go map of uint64 keys takes less than
// half the memory. actorlb holds every backend in several indexes, so this
// is most of its memory per service. A packer that is a Learner learns to
// pack more keys as they are set (IPv6 backends of a prefix it learns).
//
// # Lifecycle
//
// A Map is a plain data structure made by New (or by Adopt, from a map of
// keys already packed that it takes over): no goroutines, no locks. It
// is NOT safe for concurrent use; its owner (one actor) calls it from one
// goroutine at a time. A Map must not be copied after first use (its
// methods have pointer receivers; a copy would share the underlying maps).
//
// # Error contract
//
// Nothing here returns an error. A Packer must be lossless (Unpack of
// Pack(k) gives k back, and two keys never pack alike); Map trusts it, and
// the packers' tests check it.
package packedmap
