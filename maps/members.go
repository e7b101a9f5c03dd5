package maps

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// Names of actorlb's own map families, beside the six upstream ones.
const (
	// MembersName is lb_members: per (backend, service) what the service
	// and backend maps cannot say (weight, node-local, a maintenance
	// backend's membership), plus a per-service weight summary and a
	// per-service record (its source).
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

// Kinds of a MemberKey.
const (
	// MemberKindBackend is a backend's membership (BackendID > 0) or the
	// weight summary (BackendID 0). The datapath reads only this kind.
	MemberKindBackend uint16 = 0
	// MemberKindService is the service's own record (BackendID 0): its
	// Source. Written only for a service whose source is not the default.
	MemberKindService uint16 = 1
)

// MemberKey is struct lb_member_key: {backend_id u32 host @0,
// rev_nat_index be16 @4, kind u16 host @6}. BackendID 0 of kind
// MemberKindBackend is the service's weight summary; kind
// MemberKindService is the service's record.
type MemberKey struct {
	BackendID   uint32
	RevNATIndex uint16 // service ID (host value; stored in network order)
	Kind        uint16
}

func (k MemberKey) String() string {
	if k.Kind == MemberKindService {
		return fmt.Sprintf("record of service %d", k.RevNATIndex)
	}
	if k.Kind != MemberKindBackend {
		return fmt.Sprintf("kind %d, backend %d of service %d", k.Kind, k.BackendID, k.RevNATIndex)
	}
	return fmt.Sprintf("backend %d of service %d", k.BackendID, k.RevNATIndex)
}

// MemberValue is struct lb_member: {weight u16 host @0, flags u8 @2,
// source u8 @3}. In the summary entry (BackendID 0) Weight is the largest
// weight among the service's slotted backends and Flags is 0. Source is
// set only in a service record (MemberKindService; Weight and Flags 0
// there): the service's loadbalancer.Source.
type MemberValue struct {
	Weight uint16
	Flags  uint8
	Source uint8
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
	he.PutUint16(b[6:8], k.Kind)
	return b
}

// UnmarshalMemberKey decodes lb_member_key.
func UnmarshalMemberKey(b [MemberKeySize]byte) MemberKey {
	return MemberKey{BackendID: he.Uint32(b[0:4]), RevNATIndex: be.Uint16(b[4:6]), Kind: he.Uint16(b[6:8])}
}

// MarshalMemberValue returns the 4 bytes of lb_member.
func MarshalMemberValue(v MemberValue) [MemberValueSize]byte {
	var b [MemberValueSize]byte
	he.PutUint16(b[0:2], v.Weight)
	b[2] = v.Flags
	b[3] = v.Source
	return b
}

// UnmarshalMemberValue decodes lb_member.
func UnmarshalMemberValue(b [MemberValueSize]byte) MemberValue {
	return MemberValue{Weight: he.Uint16(b[0:2]), Flags: b[2], Source: b[3]}
}

// MarshalAffinityMatchKey returns the 8 bytes of lb_affinity_match's key.
func MarshalAffinityMatchKey(k AffinityMatchKey) [AffinityMatchKeySize]byte {
	return MarshalMemberKey(MemberKey{BackendID: k.BackendID, RevNATIndex: k.RevNATIndex})
}

// UnmarshalAffinityMatchKey decodes lb_affinity_match's key.
func UnmarshalAffinityMatchKey(b [AffinityMatchKeySize]byte) AffinityMatchKey {
	k := UnmarshalMemberKey(b)
	return AffinityMatchKey{BackendID: k.BackendID, RevNATIndex: k.RevNATIndex}
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
	decode: func(d *MemberEntry, k *[MemberKeySize]byte, v *[MemberValueSize]byte) {
		*d = MemberEntry{Key: UnmarshalMemberKey(*k), Value: UnmarshalMemberValue(*v)}
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
	decode: func(d *AffinityMatchKey, k *[AffinityMatchKeySize]byte, _ *[AffinityMatchValSize]byte) {
		*d = UnmarshalAffinityMatchKey(*k)
	},
}

// btfMemberKey is lb_member_key (last is "kind") or lb_affinity_match
// (last is "pad").
func btfMemberKey(name, last string) btf.Type {
	return btfStruct(name, MemberKeySize,
		member{"backend_id", btfU32, 0}, member{"rev_nat_index", btfBe16, 4}, member{last, btfU16, 6})
}

func btfMemberValue() btf.Type {
	return btfStruct("lb_member", MemberValueSize,
		member{"weight", btfU16, 0}, member{"flags", btfU8, 2}, member{"source", btfU8, 3})
}
