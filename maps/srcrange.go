package maps

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/btf"
)

// Names of the source-range family (loadBalancerSourceRanges): per service,
// the client prefixes its master's FlagSourceRange refers to.
const (
	SourceRange4Name = "lb4_source_range"
	SourceRange6Name = "lb6_source_range"
)

// Sizes of the raw keys and value of the source-range maps, in bytes.
const (
	SourceRange4KeySize  = 12
	SourceRange6KeySize  = 24
	SourceRangeValueSize = 1
)

// sourceRangeIDBits is what the prefix length of a key counts before the
// address: rev_nat_id (16 bits) and pad (16 bits).
const sourceRangeIDBits = 32

// SourceRangeKey is struct lb4_src_range_key / lb6_src_range_key of a
// BPF_MAP_TYPE_LPM_TRIE (BPF_F_NO_PREALLOC): {prefixlen u32 host @0,
// rev_nat_id be16 @4, pad u16 @6, addr be32 or u8[16] @8}. PrefixLen
// counts the 32 bits of rev_nat_id and pad, then the address's: a range
// a.b.c.d/n of service s is {32+n, s, 0, a.b.c.d}. The value is one byte,
// 1. The map of the key's family is the family of Addr.
//
// A key read back from the kernel is canonical: the bits past PrefixLen
// are zero (the trie matches only the prefix, so the kernel treats a key
// that differs there as the same entry).
type SourceRangeKey struct {
	PrefixLen   uint32
	RevNATIndex uint16 // service ID (host value; stored in network order)
	Pad         uint16
	Addr        netip.Addr
}

// SourceRangeKeyOf returns the key of range p of service id.
func SourceRangeKeyOf(id uint16, p netip.Prefix) SourceRangeKey {
	p = p.Masked()
	return SourceRangeKey{PrefixLen: uint32(sourceRangeIDBits + p.Bits()), RevNATIndex: id, Addr: p.Addr()}
}

// Prefix returns the range k stands for, and false when k is not a key
// the engine writes (a prefix shorter than the service ID, a pad that is
// not 0, an IPv4-mapped IPv6 address).
func (k SourceRangeKey) Prefix() (netip.Prefix, bool) {
	if k.PrefixLen < sourceRangeIDBits || k.Pad != 0 || !k.Addr.IsValid() || k.Addr.Is4In6() || k.RevNATIndex == 0 {
		return netip.Prefix{}, false
	}
	p := netip.PrefixFrom(k.Addr, int(k.PrefixLen-sourceRangeIDBits))
	if !p.IsValid() || p.Masked() != p {
		return netip.Prefix{}, false
	}
	return p, true
}

// Family returns the map family of k.
func (k SourceRangeKey) Family() Family { return FamilyOf(k.Addr) }

func (k SourceRangeKey) String() string {
	if p, ok := k.Prefix(); ok {
		return fmt.Sprintf("%s of service %d", p, k.RevNATIndex)
	}
	return fmt.Sprintf("prefixlen %d service %d pad %d addr %s", k.PrefixLen, k.RevNATIndex, k.Pad, k.Addr)
}

// SourceRangeMap is lb4_source_range or lb6_source_range; its entries are
// its keys (the value is always 1). Dump returns canonical keys; Lookup is
// the trie's longest-prefix match, not an exact one.
type SourceRangeMap interface {
	Map[SourceRangeKey, SourceRangeKey]
}

// SourceRanges returns the source-range map of family f.
func (m *LBMaps) SourceRanges(f Family) SourceRangeMap {
	if f == IPv6 {
		return m.SourceRange6
	}
	return m.SourceRange4
}

// MarshalSourceRange4Key returns the 12 bytes of lb4_src_range_key.
func MarshalSourceRange4Key(k SourceRangeKey) ([SourceRange4KeySize]byte, error) {
	var b [SourceRange4KeySize]byte
	if !k.Addr.Is4() {
		return b, fmt.Errorf("address %s is not IPv4", k.Addr)
	}
	he.PutUint32(b[0:4], k.PrefixLen)
	be.PutUint16(b[4:6], k.RevNATIndex)
	he.PutUint16(b[6:8], k.Pad)
	a := k.Addr.As4()
	copy(b[8:12], a[:])
	return b, nil
}

// MarshalSourceRange6Key returns the 24 bytes of lb6_src_range_key.
func MarshalSourceRange6Key(k SourceRangeKey) ([SourceRange6KeySize]byte, error) {
	var b [SourceRange6KeySize]byte
	if !k.Addr.Is6() {
		return b, fmt.Errorf("address %s is not IPv6", k.Addr)
	}
	he.PutUint32(b[0:4], k.PrefixLen)
	be.PutUint16(b[4:6], k.RevNATIndex)
	he.PutUint16(b[6:8], k.Pad)
	a := k.Addr.As16()
	copy(b[8:24], a[:])
	return b, nil
}

// canonicalTrieKey zeroes the bits of a raw LPM key's data (after the 4
// bytes of prefixlen) past its prefix length.
func canonicalTrieKey(b []byte) {
	plen := int(he.Uint32(b[0:4]))
	data := b[4:]
	for i := range data {
		switch bit := i * 8; {
		case bit >= plen:
			data[i] = 0
		case bit+8 > plen:
			data[i] &= byte(0xFF << (8 - (plen - bit)))
		}
	}
}

// UnmarshalSourceRange4Key decodes lb4_src_range_key (canonically).
func UnmarshalSourceRange4Key(b [SourceRange4KeySize]byte) SourceRangeKey {
	canonicalTrieKey(b[:])
	return SourceRangeKey{PrefixLen: he.Uint32(b[0:4]), RevNATIndex: be.Uint16(b[4:6]), Pad: he.Uint16(b[6:8]), Addr: netip.AddrFrom4([4]byte(b[8:12]))}
}

// UnmarshalSourceRange6Key decodes lb6_src_range_key (canonically).
func UnmarshalSourceRange6Key(b [SourceRange6KeySize]byte) SourceRangeKey {
	canonicalTrieKey(b[:])
	return SourceRangeKey{PrefixLen: he.Uint32(b[0:4]), RevNATIndex: be.Uint16(b[4:6]), Pad: he.Uint16(b[6:8]), Addr: netip.AddrFrom16([16]byte(b[8:24]))}
}

// sourceRangeValue is the value of every entry.
var sourceRangeValue = [SourceRangeValueSize]byte{1}

func checkSourceRangeKey(k SourceRangeKey) error {
	if _, ok := k.Prefix(); !ok {
		return fmt.Errorf("invalid source range key (%s)", k)
	}
	return nil
}

var sourceRange4Codec = codec[SourceRangeKey, SourceRangeKey, [SourceRange4KeySize]byte, [SourceRangeValueSize]byte]{
	encode: func(k SourceRangeKey) ([SourceRange4KeySize]byte, [SourceRangeValueSize]byte, error) {
		if err := checkSourceRangeKey(k); err != nil {
			return [SourceRange4KeySize]byte{}, sourceRangeValue, err
		}
		b, err := MarshalSourceRange4Key(k)
		return b, sourceRangeValue, err
	},
	encodeKey: MarshalSourceRange4Key,
	decode: func(d *SourceRangeKey, k *[SourceRange4KeySize]byte, _ *[SourceRangeValueSize]byte) {
		*d = UnmarshalSourceRange4Key(*k)
	},
}

var sourceRange6Codec = codec[SourceRangeKey, SourceRangeKey, [SourceRange6KeySize]byte, [SourceRangeValueSize]byte]{
	encode: func(k SourceRangeKey) ([SourceRange6KeySize]byte, [SourceRangeValueSize]byte, error) {
		if err := checkSourceRangeKey(k); err != nil {
			return [SourceRange6KeySize]byte{}, sourceRangeValue, err
		}
		b, err := MarshalSourceRange6Key(k)
		return b, sourceRangeValue, err
	},
	encodeKey: MarshalSourceRange6Key,
	decode: func(d *SourceRangeKey, k *[SourceRange6KeySize]byte, _ *[SourceRangeValueSize]byte) {
		*d = UnmarshalSourceRange6Key(*k)
	},
}

func btfSourceRangeKey(f Family) btf.Type {
	if f == IPv6 {
		return btfStruct("lb6_src_range_key", SourceRange6KeySize,
			member{"prefixlen", btfU32, 0}, member{"rev_nat_id", btfBe16, 4}, member{"pad", btfU16, 6}, member{"addr", btfIn6, 8})
	}
	return btfStruct("lb4_src_range_key", SourceRange4KeySize,
		member{"prefixlen", btfU32, 0}, member{"rev_nat_id", btfBe16, 4}, member{"pad", btfU16, 6}, member{"addr", btfBe32, 8})
}
