package addrkey

import (
	"math/bits"
	"net/netip"

	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/actorlb/actorlb/maps"
)

// Backend is a backend's identity in the allocator and the backend index:
// 20 bytes and no pointer, where lb.L3n4Addr takes 32 with one (IPv4
// backends' keys are kept packed in 8: BackendPacker).
type Backend struct {
	addr  [16]byte
	port  uint16
	proto lb.L4Type
}

// BackendOf returns the key of backend address a (an IPv4 address and its
// IPv4-mapped form make one key).
func BackendOf(a lb.L3n4Addr) Backend {
	return Backend{addr: a.Addr.As16(), port: a.Port, proto: a.Protocol}
}

// L3n4 returns the backend address k was made from (its scope external,
// as table.BackendKey makes it).
func (k Backend) L3n4() lb.L3n4Addr {
	return lb.L3n4Addr{Addr: netip.AddrFrom16(k.addr).Unmap(), Port: k.port, Protocol: k.proto}
}

// String prints the address as the user wrote it (for error messages).
func (k Backend) String() string { return k.L3n4().String() }

// BackendPacker packs backend keys into 8 bytes for a packedmap.Map:
//
//   - IPv4 backends always: address (bits 32-63), port (8-23) and
//     protocol (0-7); bits 24-31 are zero.
//   - IPv6 backends whose first 104 bits are a prefix the packer has
//     learnt: the address's last 24 bits (bits 40-63), the prefix's handle
//     (bits 24-39, its low byte never zero, which tells them from IPv4
//     keys), port and protocol. A Kubernetes node hands out pod addresses
//     from one small range, so a cluster's backends share few prefixes.
//
// It learns a prefix when a key of it is set (Learn), up to
// MaxBackendPrefixes; it never forgets one, so what it packs only grows,
// and once full it refuses every other prefix for good (the packedmap
// contract; those keys are kept whole). A packer belongs to one map, or to
// maps that split one set of keys between them. It is not safe for
// concurrent use, except that Pack, and Learn of a key whose prefix is
// learnt or that the packer refuses for good (IPv4 keys, or a full
// table), only read it.
type BackendPacker struct{ pre learnt[prefix104] }

// prefix104 is the first 104 bits of an IPv6 address.
type prefix104 [13]byte

// MaxBackendPrefixes is how many IPv6 /104 prefixes a BackendPacker
// learns: one per node's pod range for clusters of up to 8,192 nodes. The
// table costs about 40 bytes per prefix, 330 KB when full, so that
// backends spread over more prefixes than that (each in its own) cost
// little more than keys kept whole. The layout has room for 65,280.
const MaxBackendPrefixes = 8192

// backendHandles is the room for handles in the packed layout: 16 bits
// whose low byte is not zero.
const backendHandles = 255 * 256

var _ [backendHandles - MaxBackendPrefixes]struct{} // MaxBackendPrefixes fits the layout

// NewBackendPacker returns a packer that has learnt no IPv6 prefix.
func NewBackendPacker() *BackendPacker { return newBackendPacker(MaxBackendPrefixes) }

func newBackendPacker(max int) *BackendPacker {
	return &BackendPacker{pre: newLearnt[prefix104](max)}
}

// Prefixes returns how many IPv6 prefixes p has learnt.
func (p *BackendPacker) Prefixes() int { return len(p.pre.list) }

// Pack packs k if it is an IPv4 backend or its IPv6 prefix is learnt.
func (p *BackendPacker) Pack(k Backend) (uint64, bool) { return p.pack(k, false) }

// Learn packs k as Pack does, learning k's IPv6 prefix if there is room.
func (p *BackendPacker) Learn(k Backend) (uint64, bool) { return p.pack(k, true) }

func (p *BackendPacker) pack(k Backend, learn bool) (uint64, bool) {
	if [12]byte(k.addr[:12]) == v4mapped {
		return addrBits([4]byte(k.addr[12:])) | uint64(k.port)<<8 | uint64(k.proto), true
	}
	h, ok := p.pre.handle(prefix104(k.addr[:13]), learn)
	if !ok {
		return 0, false
	}
	return pack6(k, h), true
}

// pack6 packs IPv6 key k whose prefix has handle h (< 65,280): the field
// in bits 24-39 is h/255 in its high byte and 1+h%255 in its low byte,
// never zero.
func pack6(k Backend, h uint16) uint64 {
	field := uint64(h/255)<<8 | uint64(1+h%255)
	low := uint64(k.addr[13])<<16 | uint64(k.addr[14])<<8 | uint64(k.addr[15])
	return low<<40 | field<<24 | uint64(k.port)<<8 | uint64(k.proto)
}

// Unpack returns the key p was packed from.
func (p *BackendPacker) Unpack(packed uint64) Backend {
	k := Backend{port: uint16(packed >> 8), proto: lb.L4Type(packed)}
	field := uint16(packed >> 24)
	if field&0xff == 0 { // IPv4
		copy(k.addr[:], v4mapped[:])
		a := bitsAddr(packed)
		copy(k.addr[12:], a[:])
		return k
	}
	pre := p.pre.list[int(field>>8)*255+int(field&0xff)-1]
	copy(k.addr[:13], pre[:])
	k.addr[13], k.addr[14], k.addr[15] = byte(packed>>56), byte(packed>>48), byte(packed>>40)
	return k
}

// FrontendPacker packs frontends into 8 bytes for a packedmap.Map:
//
//   - IPv4 frontends of scope 0 or 1 (the scopes actorlb writes): address
//     (bits 32-63), port (16-31), protocol (8-15) and scope (bit 0); bits
//     1-7 are zero. A plain IPv4 address only: an IPv4-mapped IPv6 one is
//     another key.
//   - IPv6 frontends without a zone, of scope 0 or 1, whose first 96 bits
//     are one of the MaxFrontendPrefixes prefixes the packer has learnt
//     (a Kubernetes IPv6 service range is one /108 or /112; load-balancer
//     pools are few): the last 32 bits (32-63), port, protocol, bit 7 set,
//     the prefix's handle (bits 1-6) and the scope.
//
// Other frontends are kept whole. It learns a prefix when a frontend of it
// is set (Learn) and never forgets one (see BackendPacker). A packer
// belongs to one map.
type FrontendPacker struct{ pre learnt[prefix96] }

// prefix96 is the first 96 bits of an IPv6 address.
type prefix96 [12]byte

// MaxFrontendPrefixes is how many IPv6 /96 prefixes a FrontendPacker or
// a ServiceKeyPacker learns (6 bits of handle).
const MaxFrontendPrefixes = 64

// NewFrontendPacker returns a packer that has learnt no IPv6 prefix.
func NewFrontendPacker() *FrontendPacker {
	return &FrontendPacker{pre: newLearnt[prefix96](MaxFrontendPrefixes)}
}

// Prefixes returns how many IPv6 prefixes p has learnt.
func (p *FrontendPacker) Prefixes() int { return len(p.pre.list) }

// Pack packs a if it is an IPv4 frontend or an IPv6 one of a learnt prefix.
func (p *FrontendPacker) Pack(a lb.L3n4Addr) (uint64, bool) { return p.pack(a, false) }

// Learn packs a as Pack does, learning its IPv6 prefix if there is room.
func (p *FrontendPacker) Learn(a lb.L3n4Addr) (uint64, bool) { return p.pack(a, true) }

func (p *FrontendPacker) pack(a lb.L3n4Addr, learn bool) (uint64, bool) {
	if a.Scope > 1 {
		return 0, false
	}
	if a.Addr.Is4() {
		return packFrontend(a.Addr.As4(), a.Port, uint8(a.Protocol), uint8(a.Scope), 0, false), true
	}
	if !a.Addr.Is6() || a.Addr.Zone() != "" {
		return 0, false
	}
	b := a.Addr.As16()
	h, ok := p.pre.handle(prefix96(b[:12]), learn)
	if !ok {
		return 0, false
	}
	return packFrontend([4]byte(b[12:]), a.Port, uint8(a.Protocol), uint8(a.Scope), h, true), true
}

// Unpack returns the frontend p was packed from.
func (p *FrontendPacker) Unpack(packed uint64) lb.L3n4Addr {
	low, port, proto, scope, h, v6 := unpackFrontend(packed)
	a := lb.L3n4Addr{Addr: netip.AddrFrom4(low), Port: port, Protocol: lb.L4Type(proto), Scope: lb.Scope(scope)}
	if v6 {
		var b [16]byte
		pre := p.pre.list[h]
		copy(b[:12], pre[:])
		copy(b[12:], low[:])
		a.Addr = netip.AddrFrom16(b)
	}
	return a
}

// packFrontend is the layout FrontendPacker and ServiceKeyPacker share:
// the last 32 address bits, port, protocol, and in the low byte the IPv6
// bit (7), the prefix handle (1-6) and the scope (0, which is 0 or 1).
func packFrontend(low [4]byte, port uint16, proto, scope uint8, h uint16, v6 bool) uint64 {
	p := addrBits(low) | uint64(port)<<16 | uint64(proto)<<8 | uint64(scope)
	if v6 {
		p |= 0x80 | uint64(h)<<1
	}
	return p
}

func unpackFrontend(p uint64) (low [4]byte, port uint16, proto, scope uint8, h uint16, v6 bool) {
	return bitsAddr(p), uint16(p >> 16), uint8(p >> 8), uint8(p & 1), uint16(p>>1) & 0x3f, p&0x80 != 0
}

// learnt is a table of prefixes with 16-bit handles (their index), learnt
// up to max and never forgotten.
type learnt[P comparable] struct {
	handles map[P]uint16
	list    []P
	max     int
}

func newLearnt[P comparable](max int) learnt[P] {
	return learnt[P]{handles: map[P]uint16{}, max: max}
}

// handle returns pre's handle, learning pre if learn is set and there is
// room.
func (l *learnt[P]) handle(pre P, learn bool) (uint16, bool) {
	if h, ok := l.handles[pre]; ok {
		return h, true
	}
	if !learn || len(l.list) >= l.max {
		return 0, false
	}
	h := uint16(len(l.list))
	l.handles[pre] = h
	l.list = append(l.list, pre)
	return h, true
}

// ServiceKey is a service map key without its slot, without pointers: the
// service map owner's index of frontends.
type ServiceKey struct {
	IP
	port  uint16
	proto uint8
	scope uint8
}

// ServiceKeyOf returns k without its slot.
func ServiceKeyOf(k maps.ServiceKey) ServiceKey {
	return ServiceKey{IP: IPOf(k.Address), port: k.Port, proto: k.Proto, scope: k.Scope}
}

// Key returns the service map key of slot of f.
func (f ServiceKey) Key(slot uint16) maps.ServiceKey {
	return maps.ServiceKey{Address: f.Addr(), Port: f.port, Slot: slot, Proto: f.proto, Scope: f.scope}
}

// ServiceKeyPacker packs service keys as FrontendPacker packs frontends:
// IPv4 ones, and IPv6 ones of a learnt /96 prefix (an IPv4-mapped IPv6
// address packs as an IPv6 one: its kind is kept), scope 0 or 1.
type ServiceKeyPacker struct{ pre learnt[prefix96] }

// NewServiceKeyPacker returns a packer that has learnt no IPv6 prefix.
func NewServiceKeyPacker() *ServiceKeyPacker {
	return &ServiceKeyPacker{pre: newLearnt[prefix96](MaxFrontendPrefixes)}
}

// Pack packs f if its address is IPv4, or IPv6 of a learnt prefix.
func (p *ServiceKeyPacker) Pack(f ServiceKey) (uint64, bool) { return p.pack(f, false) }

// Learn packs f as Pack does, learning its IPv6 prefix if there is room.
func (p *ServiceKeyPacker) Learn(f ServiceKey) (uint64, bool) { return p.pack(f, true) }

func (p *ServiceKeyPacker) pack(f ServiceKey, learn bool) (uint64, bool) {
	if f.scope > 1 {
		return 0, false
	}
	switch f.kind {
	case 4:
		if [12]byte(f.addr[:12]) != v4mapped {
			return 0, false
		}
		return packFrontend([4]byte(f.addr[12:]), f.port, f.proto, f.scope, 0, false), true
	case 6:
		h, ok := p.pre.handle(prefix96(f.addr[:12]), learn)
		if !ok {
			return 0, false
		}
		return packFrontend([4]byte(f.addr[12:]), f.port, f.proto, f.scope, h, true), true
	}
	return 0, false
}

// Unpack returns the key p was packed from.
func (p *ServiceKeyPacker) Unpack(packed uint64) ServiceKey {
	low, port, proto, scope, h, v6 := unpackFrontend(packed)
	f := ServiceKey{IP: IP{kind: 4}, port: port, proto: proto, scope: scope}
	copy(f.addr[:], v4mapped[:])
	if v6 {
		f.kind = 6
		pre := p.pre.list[h]
		copy(f.addr[:12], pre[:])
	}
	copy(f.addr[12:], low[:])
	return f
}

// BackendFrom16 returns the key of the backend at addr (the 16-byte form:
// IPv4 addresses mapped, as netip.Addr.As16 gives them), port and proto.
func BackendFrom16(addr [16]byte, port uint16, proto lb.L4Type) Backend {
	return Backend{addr: addr, port: port, proto: proto}
}

// The run keys, for a pagedindex.Packed: an IPv4 key's packed form
// (BackendPacker's, FrontendPacker's, ServiceKeyPacker's) rotated by 32
// bits, so that the address is in bits 0-31, its last byte lowest, and the
// keys given consecutive addresses of one port (a node's pods, a cluster's
// service addresses) are consecutive. IPv6 keys have none (ok false):
// their varying bits may be anywhere in the address (the harness's IPv6
// frontends vary in bytes 12-13), so they are kept packed in a map. Each
// *FromRun is its *Run's inverse.

// BackendRun returns IPv4 backend k's run key (an IPv4-mapped address is
// its IPv4 address's key): protocol in bits 32-39, port in 40-55.
func BackendRun(k Backend) (run uint64, ok bool) {
	if [12]byte(k.addr[:12]) != v4mapped {
		return 0, false
	}
	return bits.RotateLeft64(addrBits([4]byte(k.addr[12:]))|uint64(k.port)<<8|uint64(k.proto), 32), true
}

// BackendFromRun returns the IPv4 backend whose run key is run.
func BackendFromRun(run uint64) Backend {
	p := bits.RotateLeft64(run, -32)
	k := Backend{port: uint16(p >> 8), proto: lb.L4Type(p)}
	copy(k.addr[:12], v4mapped[:])
	a := bitsAddr(p)
	copy(k.addr[12:], a[:])
	return k
}

// FrontendRun returns IPv4 frontend a's run key, if FrontendPacker packs
// it (scope 0 or 1; an IPv4-mapped IPv6 address is not IPv4 here).
func FrontendRun(a lb.L3n4Addr) (run uint64, ok bool) {
	if a.Scope > 1 || !a.Addr.Is4() {
		return 0, false
	}
	return bits.RotateLeft64(packFrontend(a.Addr.As4(), a.Port, uint8(a.Protocol), uint8(a.Scope), 0, false), 32), true
}

// FrontendFromRun returns the IPv4 frontend whose run key is run.
func FrontendFromRun(run uint64) lb.L3n4Addr {
	low, port, proto, scope, _, _ := unpackFrontend(bits.RotateLeft64(run, -32))
	return lb.L3n4Addr{Addr: netip.AddrFrom4(low), Port: port, Protocol: lb.L4Type(proto), Scope: lb.Scope(scope)}
}

// ServiceKeyRun returns IPv4 service key f's run key, if ServiceKeyPacker
// packs it (scope 0 or 1).
func ServiceKeyRun(f ServiceKey) (run uint64, ok bool) {
	if f.kind != 4 || f.scope > 1 || [12]byte(f.addr[:12]) != v4mapped {
		return 0, false
	}
	return bits.RotateLeft64(packFrontend([4]byte(f.addr[12:]), f.port, f.proto, f.scope, 0, false), 32), true
}

// ServiceKeyFromRun returns the IPv4 service key whose run key is run.
func ServiceKeyFromRun(run uint64) ServiceKey {
	low, port, proto, scope, _, _ := unpackFrontend(bits.RotateLeft64(run, -32))
	f := ServiceKey{IP: IP{kind: 4}, port: port, proto: proto, scope: scope}
	copy(f.addr[:], v4mapped[:])
	copy(f.addr[12:], low[:])
	return f
}
