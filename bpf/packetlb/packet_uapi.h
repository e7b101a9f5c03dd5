/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel UAPI definitions the packet load balancer needs beyond the
 * socket LB's (socklb_uapi.h): packet headers, the XDP and tc contexts and
 * the helpers that rewrite and forward packets. Values are the kernel's
 * stable UAPI numbers and layouts.
 */
#ifndef ACTORLB_PACKET_UAPI_H
#define ACTORLB_PACKET_UAPI_H

#include "socklb_uapi.h"
#include "lb_types.h"

typedef __u16 __sum16;

typedef long long __s64;

#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LRU_PERCPU_HASH 10
#define BPF_MAP_TYPE_LPM_TRIE 11
#define BPF_MAP_TYPE_HASH_OF_MAPS 13

#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_RDONLY_PROG (1U << 7)

#define __array(name, val) typeof(val) *name[]

/* XDP verdicts. */
#define XDP_ABORTED 0
#define XDP_DROP 1
#define XDP_PASS 2
#define XDP_TX 3
#define XDP_REDIRECT 4

/* tc (and tcx) verdicts. */
#define TC_ACT_UNSPEC (-1)
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define TC_ACT_REDIRECT 7

struct xdp_md {
	__u32 data;
	__u32 data_end;
	__u32 data_meta;
	__u32 ingress_ifindex;
	__u32 rx_queue_index;
	__u32 egress_ifindex;
};

/* struct __sk_buff up to data_end (the verifier checks offsets, not the
 * whole size). */
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
	__u32 tc_index;
	__u32 cb[5];
	__u32 hash;
	__u32 tc_classid;
	__u32 data;
	__u32 data_end;
};

#define ETH_ALEN 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

struct ethhdr {
	__u8 h_dest[ETH_ALEN];
	__u8 h_source[ETH_ALEN];
	__be16 h_proto;
};

struct iphdr {
	__u8 ihl_version; /* ihl in the low nibble on little-endian */
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__sum16 check;
	__be32 saddr;
	__be32 daddr;
};

struct ipv6hdr {
	__u8 priority_version;
	__u8 flow_lbl[3];
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	union v6addr saddr;
	union v6addr daddr;
};

struct tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;
	__u8 flags; /* FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10 */
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct udphdr {
	__be16 source;
	__be16 dest;
	__be16 len;
	__sum16 check;
};

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_ntohs(x) __builtin_bswap16(x)
#else
#define bpf_ntohs(x) (x)
#endif

#define IPPROTO_ICMP 1
#define IPPROTO_ICMPV6 58
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF

/* struct bpf_fib_lookup (64 bytes). */
struct bpf_fib_lookup {
	__u8 family;
	__u8 l4_protocol;
	__be16 sport;
	__be16 dport;
	__u16 tot_len;
	__u32 ifindex;
	__u32 tos_flowinfo;
	__u32 src[4];
	__u32 dst[4];
	__be16 h_vlan_proto;
	__be16 h_vlan_TCI;
	__u8 smac[ETH_ALEN]; /* output; input: mark */
	__u8 dmac[ETH_ALEN];
};

#define BPF_FIB_LKUP_RET_SUCCESS 0
#define BPF_FIB_LKUP_RET_NO_NEIGH 7

/* Flags of bpf_l4_csum_replace. */
#define BPF_F_PSEUDO_HDR (1ULL << 4)
#define BPF_F_MARK_MANGLED_0 (1ULL << 5)

static long (*bpf_skb_store_bytes)(void *skb, __u32 offset, const void *from, __u32 len, __u64 flags) = (void *)9;
static long (*bpf_l4_csum_replace)(void *skb, __u32 offset, __u64 from, __u64 to, __u64 flags) = (void *)11;
static long (*bpf_redirect)(__u32 ifindex, __u64 flags) = (void *)23;
static __s64 (*bpf_csum_diff)(void *from, __u32 from_size, void *to, __u32 to_size, __u32 seed) = (void *)28;
static long (*bpf_skb_pull_data)(void *skb, __u32 len) = (void *)39;
static long (*bpf_fib_lookup)(void *ctx, struct bpf_fib_lookup *params, int plen, __u32 flags) = (void *)69;
/* struct bpf_redir_neigh: the next hop bpf_redirect_neigh resolves. */
struct bpf_redir_neigh {
	__u32 nh_family;
	__u32 nh[4]; /* ipv4_nh in nh[0], or ipv6_nh */
};

static long (*bpf_redirect_neigh)(__u32 ifindex, void *params, int plen, __u64 flags) = (void *)152;

#endif /* ACTORLB_PACKET_UAPI_H */
