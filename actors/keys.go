package actors

import (
	"math"
	"net/netip"

	"github.com/actorlb/actorlb/internal/idalloc"
	lb "github.com/actorlb/actorlb/loadbalancer"
)

// Keys of the allocator and the supervisor's indexes. Most services and
// backends are IPv4: their keys are kept packed in 8 bytes
// (internal/packedmap), the others whole.

// newBackendIDs returns the backend ID allocator, with room for n
// backends: IPv4 backends' keys are kept packed in 8 bytes.
func newBackendIDs(n int) *idalloc.Allocator[backendKey, lb.BackendID] {
	return idalloc.NewCompact[backendKey, lb.BackendID](math.MaxUint32, n, backendPacker{})
}

// backendPacker packs the keys of IPv4 backends: address, port and
// protocol in 56 bits.
type backendPacker struct{}

// v4mapped is the prefix of an IPv4 address in 16 bytes.
var v4mapped = [12]byte{10: 0xff, 11: 0xff}

func (backendPacker) Pack(k backendKey) (uint64, bool) {
	if [12]byte(k.addr[:12]) != v4mapped {
		return 0, false
	}
	return addrBits([4]byte(k.addr[12:])) | uint64(k.port)<<8 | uint64(k.proto), true
}

func (backendPacker) Unpack(p uint64) backendKey {
	k := backendKey{port: uint16(p >> 8), proto: lb.L4Type(p)}
	copy(k.addr[:], v4mapped[:])
	a := bitsAddr(p)
	copy(k.addr[12:], a[:])
	return k
}

// backendKey is a backend's identity in the allocator and the backend
// index: 20 bytes and no pointer, where lb.L3n4Addr takes 32 with one
// (IPv4 backends' keys are kept packed in 8: backendPacker).
type backendKey struct {
	addr  [16]byte
	port  uint16
	proto lb.L4Type
}

func compactKey(a lb.L3n4Addr) backendKey {
	return backendKey{addr: a.Addr.As16(), port: a.Port, proto: a.Protocol}
}

// l3n4 returns the backend address k was made from (its scope external,
// as table.BackendKey makes it).
func (k backendKey) l3n4() lb.L3n4Addr {
	return lb.L3n4Addr{Addr: netip.AddrFrom16(k.addr).Unmap(), Port: k.port, Protocol: k.proto}
}

// String prints the address as the user wrote it (for error messages).
func (k backendKey) String() string {
	return k.l3n4().String()
}

// newServiceIDs returns the service ID allocator, with room for n
// frontends: IPv4 frontends are kept packed.
func newServiceIDs(n int) *idalloc.Allocator[lb.L3n4Addr, lb.ServiceID] {
	return idalloc.NewCompact[lb.L3n4Addr, lb.ServiceID](lb.MaxServiceID, n, frontendPacker{})
}

// frontendPacker packs IPv4 frontends: address, port, protocol and scope
// in 64 bits. Only a plain IPv4 address packs (not an IPv4-mapped IPv6
// one, which is another key).
type frontendPacker struct{}

func (frontendPacker) Pack(a lb.L3n4Addr) (uint64, bool) {
	if !a.Addr.Is4() {
		return 0, false
	}
	return addrBits(a.Addr.As4()) | uint64(a.Port)<<16 | uint64(a.Protocol)<<8 | uint64(a.Scope), true
}

func (frontendPacker) Unpack(p uint64) lb.L3n4Addr {
	return lb.L3n4Addr{
		Addr: netip.AddrFrom4(bitsAddr(p)),
		Port: uint16(p >> 16), Protocol: lb.L4Type(p >> 8), Scope: lb.Scope(p),
	}
}

// addrBits puts an IPv4 address in the top 32 bits of a packed key;
// bitsAddr takes it back.
func addrBits(a [4]byte) uint64 {
	return uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32
}

func bitsAddr(p uint64) [4]byte {
	return [4]byte{byte(p >> 56), byte(p >> 48), byte(p >> 40), byte(p >> 32)}
}
