/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The socket LB's reverse maps, shared by socklb.c (which fills them) and
 * sockterm.c (which reads them to find the sockets a VIP sent to a
 * backend): per socket and backend, which VIP and service the backend
 * stands for. The loader creates and pins them once; both objects are
 * handed the pinned maps.
 */
#ifndef __SOCKLB_REVSK_H
#define __SOCKLB_REVSK_H

#include "lb_types.h"

/* Socket reverse map: {socket cookie, backend} -> {VIP, service ID}. */
struct sk4_rev_key {
	__u64 cookie;
	__be32 address;
	__be16 port;
	__u16 pad;
};

struct sk4_rev_value {
	__be32 address;
	__be16 port;
	__be16 rev_nat_index;
};

struct sk6_rev_key {
	__u64 cookie;
	union v6addr address;
	__be16 port;
	__u16 pad;
	__u32 pad2;
};

struct sk6_rev_value {
	union v6addr address;
	__be16 port;
	__be16 rev_nat_index;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct sk4_rev_key);
	__type(value, struct sk4_rev_value);
	__uint(max_entries, 65536);
} lb4_reverse_sk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct sk6_rev_key);
	__type(value, struct sk6_rev_value);
	__uint(max_entries, 65536);
} lb6_reverse_sk SEC(".maps");

#endif /* __SOCKLB_REVSK_H */
