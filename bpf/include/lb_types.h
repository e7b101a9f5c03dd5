/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The types of actorlb's service maps, shared by the datapath programs.
 */
#ifndef ACTORLB_LB_TYPES_H
#define ACTORLB_LB_TYPES_H

union v6addr {
	__u8 addr[16];
	__u32 p[4];
};

/* Service map key (lb4_key, 12 bytes). */
struct lb4_key {
	__be32 address;
	__be16 dport;
	__u16 backend_slot;
	__u8 proto;
	__u8 scope;
	__u8 pad[2];
};

/* Service map key (lb6_key, 24 bytes). */
struct lb6_key {
	union v6addr address;
	__be16 dport;
	__u16 backend_slot;
	__u8 proto;
	__u8 scope;
	__u8 pad[2];
};

/* Service map value (lb4_service = lb6_service, 12 bytes). */
struct lb_service {
	__u32 backend_id; /* slot: backend ID; master: affinity | algorithm */
	__u16 count;      /* master: active slots */
	__be16 rev_nat_index;
	__u8 flags;
	__u8 flags2;
	__u16 qcount;
};

/* Backend map value (lb4_backend, 12 bytes). */
struct lb4_backend {
	__be32 address;
	__be16 port;
	__u8 proto;
	__u8 flags; /* state */
	__u16 cluster_id;
	__u8 zone;
	__u8 pad;
};

/* Backend map value (lb6_backend, 24 bytes). */
struct lb6_backend {
	union v6addr address;
	__be16 port;
	__u8 proto;
	__u8 flags; /* state */
	__u16 cluster_id;
	__u8 zone;
	__u8 pad;
};

/* revNAT map value (lb4_reverse_nat, packed, 6 bytes). */
struct lb4_reverse_nat {
	__be32 address;
	__be16 port;
} __attribute__((packed));

/* revNAT map value (lb6_reverse_nat, packed, 18 bytes). */
struct lb6_reverse_nat {
	union v6addr address;
	__be16 port;
} __attribute__((packed));

/* lb_members key: one (backend, service) membership; backend_id 0 is the
 * service's summary entry (8 bytes). The last field is the control plane's
 * "kind": 0 for these; the service records of kind 1 (the service's owner)
 * are never looked up here, so the datapath always sends 0. */
struct lb_member_key {
	__u32 backend_id;
	__be16 rev_nat_index;
	__u16 pad;
};

/* lb_members value (4 bytes): weight, and flags the datapath does not read
 * (node-local, maintenance); the last byte is a service record's source.
 * Summary entry: weight = the largest weight among the service's slotted
 * backends. */
struct lb_member {
	__u16 weight;
	__u8 flags;
	__u8 pad;
};

#endif /* ACTORLB_LB_TYPES_H */
