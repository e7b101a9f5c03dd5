package maps

import "github.com/cilium/ebpf/btf"

// BTF descriptions of the keys and values, so that tools such as
// `bpftool map dump` print field names. Names and offsets follow the
// upstream datapath's C structs.
var (
	btfU8    = &btf.Int{Name: "__u8", Size: 1}
	btfU16   = &btf.Int{Name: "__u16", Size: 2}
	btfU32   = &btf.Int{Name: "__u32", Size: 4}
	btfBe16  = &btf.Typedef{Name: "__be16", Type: btfU16}
	btfBe32  = &btf.Typedef{Name: "__be32", Type: btfU32}
	btfIndex = &btf.Int{Name: "__u32", Size: 4}
	btfIn6   = &btf.Struct{Name: "in6_addr", Size: 16, Members: []btf.Member{
		{Name: "addr", Type: u8Array(16)},
	}}
)

func u8Array(n uint32) btf.Type {
	return &btf.Array{Index: btfIndex, Type: btfU8, Nelems: n}
}

type member struct {
	name string
	typ  btf.Type
	off  uint32 // bytes
}

func btfStruct(name string, size uint32, ms ...member) *btf.Struct {
	s := &btf.Struct{Name: name, Size: size}
	for _, m := range ms {
		s.Members = append(s.Members, btf.Member{Name: m.name, Type: m.typ, Offset: btf.Bits(m.off * 8)})
	}
	return s
}

func btfServiceKey(f Family) btf.Type {
	if f == IPv6 {
		return btfStruct("lb6_key", Service6KeySize,
			member{"address", btfIn6, 0}, member{"dport", btfBe16, 16}, member{"backend_slot", btfU16, 18},
			member{"proto", btfU8, 20}, member{"scope", btfU8, 21}, member{"pad", u8Array(2), 22})
	}
	return btfStruct("lb4_key", Service4KeySize,
		member{"address", btfBe32, 0}, member{"dport", btfBe16, 4}, member{"backend_slot", btfU16, 6},
		member{"proto", btfU8, 8}, member{"scope", btfU8, 9}, member{"pad", u8Array(2), 10})
}

func btfServiceValue(f Family) btf.Type {
	name := "lb4_service"
	if f == IPv6 {
		name = "lb6_service"
	}
	return btfStruct(name, ServiceValueSize,
		member{"backend_id", btfU32, 0}, member{"count", btfU16, 4}, member{"rev_nat_index", btfBe16, 6},
		member{"flags", btfU8, 8}, member{"flags2", btfU8, 9}, member{"qcount", btfU16, 10})
}

func btfBackendKey() btf.Type { return &btf.Typedef{Name: "lb_backend_id", Type: btfU32} }

func btfBackendValue(f Family) btf.Type {
	if f == IPv6 {
		return btfStruct("lb6_backend", Backend6Size,
			member{"address", btfIn6, 0}, member{"port", btfBe16, 16}, member{"proto", btfU8, 18},
			member{"flags", btfU8, 19}, member{"cluster_id", btfU16, 20}, member{"zone", btfU8, 22}, member{"pad", btfU8, 23})
	}
	return btfStruct("lb4_backend", Backend4Size,
		member{"address", btfBe32, 0}, member{"port", btfBe16, 4}, member{"proto", btfU8, 6},
		member{"flags", btfU8, 7}, member{"cluster_id", btfU16, 8}, member{"zone", btfU8, 10}, member{"pad", btfU8, 11})
}

func btfRevNATKey() btf.Type { return &btf.Typedef{Name: "lb_rev_nat_index", Type: btfBe16} }

func btfRevNATValue(f Family) btf.Type {
	if f == IPv6 {
		return btfStruct("lb6_reverse_nat", RevNAT6Size, member{"address", btfIn6, 0}, member{"port", btfBe16, 16})
	}
	return btfStruct("lb4_reverse_nat", RevNAT4Size, member{"address", btfBe32, 0}, member{"port", btfBe16, 4})
}
