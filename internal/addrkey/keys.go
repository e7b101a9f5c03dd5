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

// BackendPacker packs the keys of IPv4 backends: address, port and
// protocol in 56 bits.
type BackendPacker struct{}

// Pack packs k if it is an IPv4 backend.
func (BackendPacker) Pack(k Backend) (uint64, bool) {
	if [12]byte(k.addr[:12]) != v4mapped {
		return 0, false
	}
	return addrBits([4]byte(k.addr[12:])) | uint64(k.port)<<8 | uint64(k.proto), true
}

// Unpack returns the key p was packed from.
func (BackendPacker) Unpack(p uint64) Backend {
	k := Backend{port: uint16(p >> 8), proto: lb.L4Type(p)}
	copy(k.addr[:], v4mapped[:])
	a := bitsAddr(p)
	copy(k.addr[12:], a[:])
	return k
}

// FrontendPacker packs IPv4 frontends: address, port, protocol and scope
// in 64 bits. Only a plain IPv4 address packs (not an IPv4-mapped IPv6
// one, which is another key).
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
