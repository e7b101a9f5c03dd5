/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The few kernel UAPI definitions actorlb's socket-LB program needs, written
 * out here so that generating the objects needs clang and nothing else (no
 * kernel or libbpf headers). Values are the kernel's stable UAPI numbers.
 */
#ifndef ACTORLB_SOCKLB_UAPI_H
#define ACTORLB_SOCKLB_UAPI_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;

#ifndef bool
typedef _Bool bool;
#define true 1
#define false 0
#endif

/* enum bpf_map_type */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_LRU_HASH 9

/* bpf_map_update_elem flags */
#define BPF_ANY 0

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

/* struct bpf_sock_addr from include/uapi/linux/bpf.h: the context of the
 * cgroup/connect*, sendmsg*, recvmsg* and getpeername* hooks. Ports and
 * addresses are in network order; user_port holds the 16-bit port in its
 * low-addressed two bytes. */
struct bpf_sock_addr {
	__u32 user_family;
	__u32 user_ip4;
	__u32 user_ip6[4];
	__u32 user_port;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 msg_src_ip4;
	__u32 msg_src_ip6[4];
	union {
		struct bpf_sock *sk;
		__u64 :64;
	} __attribute__((aligned(8)));
};

/* Helper functions, by their UAPI numbers (enum bpf_func_id). */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u32 (*bpf_get_prandom_u32)(void) = (void *)7;
static __u64 (*bpf_get_socket_cookie)(void *ctx) = (void *)46;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u64 (*bpf_get_netns_cookie)(void *ctx) = (void *)122;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)181;

/* BTF-defined maps, as libbpf and cilium/ebpf read them. */
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define __always_inline inline __attribute__((always_inline))

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define bpf_htonl(x) __builtin_bswap32(x)
#define bpf_ntohl(x) __builtin_bswap32(x)
#define bpf_htons(x) __builtin_bswap16(x)
#else
#define bpf_htonl(x) (x)
#define bpf_ntohl(x) (x)
#define bpf_htons(x) (x)
#endif

#endif /* ACTORLB_SOCKLB_UAPI_H */
