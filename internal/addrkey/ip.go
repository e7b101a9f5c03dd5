package addrkey

import (
	"encoding/binary"
	"net/netip"
)

// IP is an IP address in 17 bytes, without a pointer: 16 of address and
// its kind.
type IP struct {
	addr [16]byte
	kind uint8 // 0 invalid, 4 IPv4, 6 IPv6
}

// IPOf returns the form of a (IPv4-mapped IPv6 addresses stay IPv6).
func IPOf(a netip.Addr) IP {
	switch {
	case a.Is4():
		return IP{a.As16(), 4}
	case a.IsValid():
		return IP{a.As16(), 6}
	}
	return IP{}
}

// Addr returns the address i was made from.
func (i IP) Addr() netip.Addr {
	switch i.kind {
	case 4:
		return netip.AddrFrom16(i.addr).Unmap()
	case 6:
		return netip.AddrFrom16(i.addr)
	}
	return netip.Addr{}
}

// V4 returns an IPv4 address as a number, its first byte highest (so that
// consecutive addresses are consecutive numbers), and false for any other.
func (i IP) V4() (uint32, bool) {
	return binary.BigEndian.Uint32(i.addr[12:]), i.kind == 4
}

// IP4 is an IPv4 address in 5 bytes, for the IPv4 maps' mirrors. bad
// marks an address those maps cannot hold (never written: the write fails
// first), so that it never equals an address they hold.
type IP4 struct {
	addr [4]byte
	bad  bool
}

// IP4Of returns the IPv4 form of a (bad if a is not IPv4 or IPv4-mapped).
func IP4Of(a netip.Addr) IP4 {
	if a = a.Unmap(); a.Is4() {
		return IP4{addr: a.As4()}
	}
	return IP4{bad: true}
}

// Addr returns the address i was made from.
func (i IP4) Addr() netip.Addr { return netip.AddrFrom4(i.addr) }

// v4mapped is the prefix of an IPv4 address in 16 bytes.
var v4mapped = [12]byte{10: 0xff, 11: 0xff}

// addrBits puts an IPv4 address in the top 32 bits of a packed key;
// bitsAddr takes it back.
func addrBits(a [4]byte) uint64 {
	return uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32
}

func bitsAddr(p uint64) [4]byte {
	return [4]byte{byte(p >> 56), byte(p >> 48), byte(p >> 40), byte(p >> 32)}
}
