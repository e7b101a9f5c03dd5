package actors

import "github.com/actorlb/actorlb/internal/addrkey"

// backend6Index is the IPv6 backend mirror's index. An IPv6 address takes
// 17 of a value's 24 bytes; here each value keeps it as the handle of its
// /104 prefix in a counted table (addrkey.Prefixes104) and its last 3
// bytes, 12 bytes in all: a node's pods share a prefix, so the table is
// small. A value whose address gets no handle (not IPv6, or
// addrkey.MaxPrefixes104 other prefixes in use) is kept whole. The small
// values are kept in pages by backend ID (idIndex). It behaves exactly
// as a map.
type backend6Index struct {
	small idIndex[uint32, backend6Val]
	full  map[uint32]backendVal[addrkey.IP]
	pre   *addrkey.Prefixes104
}

// newBackend4Index is the IPv4 backend mirror's index: values in pages by
// backend ID.
func newBackend4Index(n int) index[uint32, backendVal[addrkey.IP4]] {
	return newIDIndex[uint32, backendVal[addrkey.IP4]](n)
}

// backend6Val is a backendVal[addrkey.IP] with its address as a prefix
// handle and the last 3 bytes.
type backend6Val struct {
	port    uint16
	cluster uint16
	proto   uint8
	state   uint8
	zone    uint8
	low     [3]byte
	h       uint16
}

func newBackend6Index(n int) index[uint32, backendVal[addrkey.IP]] {
	return &backend6Index{
		small: newIDIndex[uint32, backend6Val](n),
		full:  map[uint32]backendVal[addrkey.IP]{},
		pre:   addrkey.NewPrefixes104(),
	}
}

func (x *backend6Index) get(k uint32) (backendVal[addrkey.IP], bool) {
	if s, ok := x.small.get(k); ok {
		return x.whole(s), true
	}
	v, ok := x.full[k]
	return v, ok
}

func (x *backend6Index) set(k uint32, v backendVal[addrkey.IP]) {
	x.del(k)
	if h, low, ok := x.pre.Acquire(v.addr); ok {
		x.small.set(k, backend6Val{v.port, v.cluster, v.proto, v.state, v.zone, low, h})
		return
	}
	x.full[k] = v
}

func (x *backend6Index) del(k uint32) {
	if s, ok := x.small.get(k); ok {
		x.pre.Release(s.h)
		x.small.del(k)
		return
	}
	delete(x.full, k)
}

func (x *backend6Index) len() int { return x.small.len() + len(x.full) }

func (x *backend6Index) all(yield func(uint32, backendVal[addrkey.IP]) bool) {
	for k, s := range x.small.all {
		if !yield(k, x.whole(s)) {
			return
		}
	}
	for k, v := range x.full {
		if !yield(k, v) {
			return
		}
	}
}

// whole returns the value s keeps small.
func (x *backend6Index) whole(s backend6Val) backendVal[addrkey.IP] {
	return backendVal[addrkey.IP]{s.port, s.cluster, s.proto, s.state, s.zone, x.pre.IP(s.h, s.low)}
}
