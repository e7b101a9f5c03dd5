package addrkey

import (
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
// contract; those keys are kept whole). A packer belongs to one map: it is
// not safe for concurrent use.
type BackendPacker struct{ pre learnt[prefix104] }

// prefix104 is the first 104 bits of an IPv6 address.
type prefix104 [13]byte

// MaxBackendPrefixes is how many IPv6 /104 prefixes a BackendPacker
// learns: the 16-bit handles whose low byte is not zero. The table costs
// about 40 bytes per prefix at most.
const MaxBackendPrefixes = 255 * 256

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

// FrontendPacker packs IPv4 frontends: address, port, protocol and scope
// in 64 bits. Only a plain IPv4 address packs (not an IPv4-mapped IPv6
// one, which is another key). IPv6 frontends are kept whole: a service
// has one frontend for about ten backends, and a table of learnt prefixes
// (as BackendPacker has) costs more than it saves when frontends spread
// over many prefixes.
type FrontendPacker struct{}

// Pack packs a if it is an IPv4 frontend.
func (FrontendPacker) Pack(a lb.L3n4Addr) (uint64, bool) {
	if !a.Addr.Is4() {
		return 0, false
	}
	return addrBits(a.Addr.As4()) | uint64(a.Port)<<16 | uint64(a.Protocol)<<8 | uint64(a.Scope), true
}

// Unpack returns the frontend p was packed from.
func (FrontendPacker) Unpack(p uint64) lb.L3n4Addr {
	return lb.L3n4Addr{
		Addr: netip.AddrFrom4(bitsAddr(p)),
		Port: uint16(p >> 16), Protocol: lb.L4Type(p >> 8), Scope: lb.Scope(p),
	}
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

// ServiceKeyPacker packs IPv4 frontends' service keys: address, port,
// protocol and scope in 64 bits.
type ServiceKeyPacker struct{}

// Pack packs f if its address is IPv4.
func (ServiceKeyPacker) Pack(f ServiceKey) (uint64, bool) {
	if f.kind != 4 || [12]byte(f.addr[:12]) != v4mapped {
		return 0, false
	}
	return addrBits([4]byte(f.addr[12:])) | uint64(f.port)<<16 | uint64(f.proto)<<8 | uint64(f.scope), true
}

// Unpack returns the key p was packed from.
func (ServiceKeyPacker) Unpack(p uint64) ServiceKey {
	f := ServiceKey{IP: IP{kind: 4}, port: uint16(p >> 16), proto: uint8(p >> 8), scope: uint8(p)}
	copy(f.addr[:], v4mapped[:])
	a := bitsAddr(p)
	copy(f.addr[12:], a[:])
	return f
}
