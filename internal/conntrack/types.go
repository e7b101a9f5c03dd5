package conntrack

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Map names, as the datapath pins them under the bpffs root (SPEC17).
const (
	Forward4Name = "lb4_ct"
	Reverse4Name = "lb4_ct_rev"
	Forward6Name = "lb6_ct"
	Reverse6Name = "lb6_ct_rev"
)

// Layout sizes in bytes (SPEC17).
const (
	Key4Size      = 16 // struct ct4_key
	Key6Size      = 40 // struct ct6_key
	Entry4Size    = 48 // struct ct4_entry
	Entry6Size    = 72 // struct ct6_entry
	RevEntry4Size = 24 // struct ct4_rev
	RevEntry6Size = 48 // struct ct6_rev
)

// Flags of a forward entry (Entry.Flags).
const (
	// FlagDSR: the flow is forwarded in DSR mode; it has no reverse entry.
	FlagDSR uint8 = 1 << 0
	// FlagClosing: a TCP FIN or RST was seen.
	FlagClosing uint8 = 1 << 1
	// FlagReplied: a reply was seen.
	FlagReplied uint8 = 1 << 2
)

// IP protocol numbers the lifetimes distinguish.
const (
	ProtoTCP uint8 = 6
	ProtoUDP uint8 = 17
)

var (
	be = binary.BigEndian    // network order: addresses, ports, rev_nat_index
	he = binary.LittleEndian // host order (amd64, arm64): times, counters, backend_id
)

// Key is a conntrack key, of a forward map (the client's packet as
// received) or of a reverse map (the backend's reply as received). Both
// addresses are of one family, which picks the layout: ct4_key (16 bytes)
// or ct6_key (40 bytes).
type Key struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// Is6 reports whether k is of the IPv6 family.
func (k Key) Is6() bool { return !k.Src.Is4() }

func (k Key) String() string {
	return fmt.Sprintf("%s -> %s/%d", netip.AddrPortFrom(k.Src, k.SrcPort), netip.AddrPortFrom(k.Dst, k.DstPort), k.Proto)
}

// Entry is the value of a forward map: ct4_entry (48 bytes) or ct6_entry
// (72 bytes), by the family of BackendAddr. NATAddr is the zero address of
// the family in DSR mode; an invalid NATAddr is written as zeros.
type Entry struct {
	LastSeen    uint64 // CLOCK_MONOTONIC ns of the flow's last packet, either direction
	Packets     uint64 // client->LB packets
	Bytes       uint64
	BackendID   uint32
	RevNATIndex uint16
	NATPort     uint16 // SNAT source port toward the backend; 0 in DSR mode
	BackendPort uint16
	Flags       uint8
	BackendAddr netip.Addr
	NATAddr     netip.Addr // SNAT source address; zero in DSR mode
}

// RevEntry is the value of a reverse map: ct4_rev (24 bytes) or ct6_rev
// (48 bytes), by the family of Client.
type RevEntry struct {
	LastSeen     uint64
	Client       netip.Addr
	Frontend     netip.Addr
	ClientPort   uint16
	FrontendPort uint16
	RevNATIndex  uint16
}

// ReverseKey is the key of the reverse entry that belongs to forward
// entry e at key k: {backend, NAT address, backend port, NAT port,
// proto}. ok is false in DSR mode, where there is none.
func (e Entry) ReverseKey(k Key) (rk Key, ok bool) {
	if e.Flags&FlagDSR != 0 {
		return Key{}, false
	}
	nat := e.NATAddr
	if !nat.IsValid() {
		nat = zeroOf(e.BackendAddr.Is4())
	}
	return Key{Src: e.BackendAddr, Dst: nat, SrcPort: e.BackendPort, DstPort: e.NATPort, Proto: k.Proto}, true
}

// ForwardKey is the key of the forward entry that reverse entry v at key
// r belongs to: {client, frontend, client port, frontend port, proto}.
func (v RevEntry) ForwardKey(r Key) Key {
	return Key{Src: v.Client, Dst: v.Frontend, SrcPort: v.ClientPort, DstPort: v.FrontendPort, Proto: r.Proto}
}

func zeroOf(is4 bool) netip.Addr {
	if is4 {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// putAddr writes a at b (4 or 16 bytes by len(b)); an invalid a is zeros.
func putAddr(b []byte, a netip.Addr, field string) error {
	if !a.IsValid() {
		clear(b)
		return nil
	}
	if (len(b) == 4) != a.Is4() {
		return fmt.Errorf("%s %s: %w", field, a, ErrFamily)
	}
	if len(b) == 4 {
		x := a.As4()
		copy(b, x[:])
	} else {
		x := a.As16()
		copy(b, x[:])
	}
	return nil
}

func addrAt(b []byte) netip.Addr {
	if len(b) == 4 {
		return netip.AddrFrom4([4]byte(b))
	}
	return netip.AddrFrom16([16]byte(b))
}

// MarshalBinary encodes k as ct4_key or ct6_key.
func (k Key) MarshalBinary() ([]byte, error) {
	if !k.Src.IsValid() || !k.Dst.IsValid() || k.Src.Is4() != k.Dst.Is4() {
		return nil, fmt.Errorf("marshal conntrack key %s: %w", k, ErrFamily)
	}
	n := 4
	if !k.Src.Is4() {
		n = 16
	}
	b := make([]byte, 2*n+8)
	_ = putAddr(b[0:n], k.Src, "src")
	_ = putAddr(b[n:2*n], k.Dst, "dst")
	be.PutUint16(b[2*n:], k.SrcPort)
	be.PutUint16(b[2*n+2:], k.DstPort)
	b[2*n+4] = k.Proto
	return b, nil
}

// UnmarshalBinary decodes a ct4_key (16 bytes) or a ct6_key (40 bytes).
func (k *Key) UnmarshalBinary(b []byte) error {
	var n int
	switch len(b) {
	case Key4Size:
		n = 4
	case Key6Size:
		n = 16
	default:
		return fmt.Errorf("unmarshal conntrack key: %d bytes, want %d or %d: %w", len(b), Key4Size, Key6Size, ErrSize)
	}
	*k = Key{
		Src: addrAt(b[0:n]), Dst: addrAt(b[n : 2*n]),
		SrcPort: be.Uint16(b[2*n:]), DstPort: be.Uint16(b[2*n+2:]), Proto: b[2*n+4],
	}
	return nil
}

// MarshalBinary encodes e as ct4_entry or ct6_entry, by the family of
// BackendAddr.
func (e Entry) MarshalBinary() ([]byte, error) {
	if !e.BackendAddr.IsValid() {
		return nil, fmt.Errorf("marshal conntrack entry: backend address: %w", ErrFamily)
	}
	n, size := 4, Entry4Size
	if !e.BackendAddr.Is4() {
		n, size = 16, Entry6Size
	}
	b := make([]byte, size)
	he.PutUint64(b[0:], e.LastSeen)
	he.PutUint64(b[8:], e.Packets)
	he.PutUint64(b[16:], e.Bytes)
	he.PutUint32(b[24:], e.BackendID)
	be.PutUint16(b[28:], e.RevNATIndex)
	be.PutUint16(b[30:], e.NATPort)
	be.PutUint16(b[32:], e.BackendPort)
	b[34] = e.Flags
	_ = putAddr(b[36:36+n], e.BackendAddr, "backend address")
	if err := putAddr(b[36+n:36+2*n], e.NATAddr, "NAT address"); err != nil {
		return nil, fmt.Errorf("marshal conntrack entry: %w", err)
	}
	return b, nil
}

// UnmarshalBinary decodes a ct4_entry (48 bytes) or a ct6_entry (72
// bytes).
func (e *Entry) UnmarshalBinary(b []byte) error {
	var n int
	switch len(b) {
	case Entry4Size:
		n = 4
	case Entry6Size:
		n = 16
	default:
		return fmt.Errorf("unmarshal conntrack entry: %d bytes, want %d or %d: %w", len(b), Entry4Size, Entry6Size, ErrSize)
	}
	*e = Entry{
		LastSeen: he.Uint64(b[0:]), Packets: he.Uint64(b[8:]), Bytes: he.Uint64(b[16:]),
		BackendID: he.Uint32(b[24:]), RevNATIndex: be.Uint16(b[28:]), NATPort: be.Uint16(b[30:]),
		BackendPort: be.Uint16(b[32:]), Flags: b[34],
		BackendAddr: addrAt(b[36 : 36+n]), NATAddr: addrAt(b[36+n : 36+2*n]),
	}
	return nil
}

// MarshalBinary encodes v as ct4_rev or ct6_rev, by the family of Client.
func (v RevEntry) MarshalBinary() ([]byte, error) {
	if !v.Client.IsValid() || !v.Frontend.IsValid() || v.Client.Is4() != v.Frontend.Is4() {
		return nil, fmt.Errorf("marshal conntrack reverse entry: client %s, frontend %s: %w", v.Client, v.Frontend, ErrFamily)
	}
	n, size := 4, RevEntry4Size
	if !v.Client.Is4() {
		n, size = 16, RevEntry6Size
	}
	b := make([]byte, size)
	he.PutUint64(b[0:], v.LastSeen)
	_ = putAddr(b[8:8+n], v.Client, "client")
	_ = putAddr(b[8+n:8+2*n], v.Frontend, "frontend")
	be.PutUint16(b[8+2*n:], v.ClientPort)
	be.PutUint16(b[10+2*n:], v.FrontendPort)
	be.PutUint16(b[12+2*n:], v.RevNATIndex)
	return b, nil
}

// UnmarshalBinary decodes a ct4_rev (24 bytes) or a ct6_rev (48 bytes).
func (v *RevEntry) UnmarshalBinary(b []byte) error {
	var n int
	switch len(b) {
	case RevEntry4Size:
		n = 4
	case RevEntry6Size:
		n = 16
	default:
		return fmt.Errorf("unmarshal conntrack reverse entry: %d bytes, want %d or %d: %w", len(b), RevEntry4Size, RevEntry6Size, ErrSize)
	}
	*v = RevEntry{
		LastSeen: he.Uint64(b[0:]), Client: addrAt(b[8 : 8+n]), Frontend: addrAt(b[8+n : 8+2*n]),
		ClientPort: be.Uint16(b[8+2*n:]), FrontendPort: be.Uint16(b[10+2*n:]), RevNATIndex: be.Uint16(b[12+2*n:]),
	}
	return nil
}
