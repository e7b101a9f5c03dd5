package maps

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// Names of actorlb's own map families, beside the six upstream ones.
const (
	// MembersName is lb_members: per (backend, service) what the service
	// and backend maps cannot say (weight, node-local, a maintenance
	// backend's membership), plus a per-service weight summary.
	MembersName = "lb_members"
	// AffinityMatchName is lb_affinity_match (upstream's layout): which
	// backends a session-affinity service may stick a client to.
	AffinityMatchName = "lb_affinity_match"
)

// Sizes of the raw keys and values of the families above, in bytes.
const (
	MemberKeySize        = 8
	MemberValueSize      = 4
	AffinityMatchKeySize = 8
	AffinityMatchValSize = 1
)

// Flags of a MemberValue.
const (
	// MemberNodeLocal: the backend runs on this node.
	MemberNodeLocal uint8 = 1 << 0
	// MemberMaintenance: the backend is in maintenance (it has no slot;
	// this entry is the record of its membership).
	MemberMaintenance uint8 = 1 << 1
)

// MemberKey is struct lb_member_key: {backend_id u32 host @0,
// rev_nat_index be16 @4, pad u16 @6}. BackendID 0 is the service's weight
// summary.
type MemberKey struct {
	BackendID   uint32
	RevNATIndex uint16 // service ID (host value; stored in network order)
}

func (k MemberKey) String() string {
	return fmt.Sprintf("backend %d of service %d", k.BackendID, k.RevNATIndex)
}

// MemberValue is struct lb_member: {weight u16 host @0, flags u8 @2, pad
// u8 @3}. In the summary entry (BackendID 0) Weight is the largest weight
// among the service's slotted backends and Flags is 0.
type MemberValue struct {
	Weight uint16
	Flags  uint8
}

// MemberEntry is one lb_members entry.
type MemberEntry struct {
	Key   MemberKey
	Value MemberValue
}

// MembersMap is lb_members.
type MembersMap interface {
	Map[MemberEntry, MemberKey]
}

// AffinityMatchKey is struct lb_affinity_match: {backend_id u32 host @0,
// rev_nat_id be16 @4, pad u16 @6}; its value is one zero byte.
type AffinityMatchKey struct {
	BackendID   uint32
	RevNATIndex uint16
}

func (k AffinityMatchKey) String() string {
	return fmt.Sprintf("backend %d of service %d", k.BackendID, k.RevNATIndex)
}

// AffinityMatchMap is lb_affinity_match; its entries are its keys.
type AffinityMatchMap interface {
	Map[AffinityMatchKey, AffinityMatchKey]
}

// MarshalMemberKey returns the 8 bytes of lb_member_key.
func MarshalMemberKey(k MemberKey) [MemberKeySize]byte {
	var b [MemberKeySize]byte
	he.PutUint32(b[0:4], k.BackendID)
	be.PutUint16(b[4:6], k.RevNATIndex)
	return b
}

// UnmarshalMemberKey decodes lb_member_key.
func UnmarshalMemberKey(b [MemberKeySize]byte) MemberKey {
	return MemberKey{BackendID: he.Uint32(b[0:4]), RevNATIndex: be.Uint16(b[4:6])}
}

// MarshalMemberValue returns the 4 bytes of lb_member.
func MarshalMemberValue(v MemberValue) [MemberValueSize]byte {
	var b [MemberValueSize]byte
	he.PutUint16(b[0:2], v.Weight)
	b[2] = v.Flags
	return b
}

// UnmarshalMemberValue decodes lb_member.
func UnmarshalMemberValue(b [MemberValueSize]byte) MemberValue {
	return MemberValue{Weight: he.Uint16(b[0:2]), Flags: b[2]}
}

// MarshalAffinityMatchKey returns the 8 bytes of lb_affinity_match's key.
func MarshalAffinityMatchKey(k AffinityMatchKey) [AffinityMatchKeySize]byte {
	return MarshalMemberKey(MemberKey(k))
}

// UnmarshalAffinityMatchKey decodes lb_affinity_match's key.
func UnmarshalAffinityMatchKey(b [AffinityMatchKeySize]byte) AffinityMatchKey {
	return AffinityMatchKey(UnmarshalMemberKey(b))
}

func encodeMemberKey(k MemberKey) ([MemberKeySize]byte, error) {
	if k.RevNATIndex == 0 {
		return [MemberKeySize]byte{}, fmt.Errorf("service ID 0 is invalid")
	}
	return MarshalMemberKey(k), nil
}

var membersCodec = codec[MemberEntry, MemberKey, [MemberKeySize]byte, [MemberValueSize]byte]{
	encode: func(e MemberEntry) ([MemberKeySize]byte, [MemberValueSize]byte, error) {
		k, err := encodeMemberKey(e.Key)
		return k, MarshalMemberValue(e.Value), err
	},
	encodeKey: func(k MemberKey) ([MemberKeySize]byte, error) { return MarshalMemberKey(k), nil },
	decode: func(k [MemberKeySize]byte, v [MemberValueSize]byte) MemberEntry {
		return MemberEntry{Key: UnmarshalMemberKey(k), Value: UnmarshalMemberValue(v)}
	},
}

var affinityMatchCodec = codec[AffinityMatchKey, AffinityMatchKey, [AffinityMatchKeySize]byte, [AffinityMatchValSize]byte]{
	encode: func(k AffinityMatchKey) ([AffinityMatchKeySize]byte, [AffinityMatchValSize]byte, error) {
		if k.BackendID == 0 || k.RevNATIndex == 0 {
			return [AffinityMatchKeySize]byte{}, [AffinityMatchValSize]byte{}, fmt.Errorf("backend ID and service ID must not be 0 (got %d, %d)", k.BackendID, k.RevNATIndex)
		}
		return MarshalAffinityMatchKey(k), [AffinityMatchValSize]byte{}, nil
	},
	encodeKey: func(k AffinityMatchKey) ([AffinityMatchKeySize]byte, error) { return MarshalAffinityMatchKey(k), nil },
	decode: func(k [AffinityMatchKeySize]byte, _ [AffinityMatchValSize]byte) AffinityMatchKey {
		return UnmarshalAffinityMatchKey(k)
	},
}

func btfMemberKey(name string) btf.Type {
	return btfStruct(name, MemberKeySize,
		member{"backend_id", btfU32, 0}, member{"rev_nat_index", btfBe16, 4}, member{"pad", btfU16, 6})
}

func btfMemberValue() btf.Type {
	return btfStruct("lb_member", MemberValueSize,
		member{"weight", btfU16, 0}, member{"flags", btfU8, 2}, member{"pad", btfU8, 3})
}
