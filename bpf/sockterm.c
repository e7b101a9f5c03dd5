// SPDX-License-Identifier: Apache-2.0
//go:build ignore

/*
 * actorlb UDP socket termination.
 *
 * A BPF iterator program over the UDP sockets of a network namespace (IPv4
 * and IPv6 sockets alike: the kernel keeps them in one table). It destroys,
 * with the bpf_sock_destroy kfunc (Linux 6.5 or later), every connected UDP
 * socket whose peer is one of the backends listed in the filter maps AND
 * that reached that backend through a service VIP, which is what an entry
 * {socket cookie, backend} in the socket LB's reverse map records. A socket
 * connected straight to the backend address has no such entry and is left
 * alone. A destroyed socket reports ECONNABORTED to its owner (its pending
 * or next receive) and is disconnected, so a client that reconnects goes
 * through the socket LB again and gets a backend that is still in service.
 *
 * For each socket it destroys, the program deletes the socket's reverse map
 * entry for that backend (the socket no longer talks to it) and writes the
 * socket's cookie (8 bytes, host order) to the iterator's output: the
 * reader counts them.
 *
 * The reverse maps are the socket LB's (socklb.c), pinned under the bpffs
 * root; the loader hands them in, these definitions never create them. The
 * filter maps are private to the loaded object and filled before each run.
 */

#include "include/socklb_uapi.h"
#include "include/socklb_revsk.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* sk_state of a connected UDP socket (include/net/tcp_states.h). */
#define TCP_ESTABLISHED 1

/* Helper numbers not in socklb_uapi.h (enum bpf_func_id). In a tracing
 * program get_socket_cookie takes a socket pointer. */
static long (*bpf_seq_write)(void *seq, const void *data, __u32 len) = (void *)127;

/* The kfunc. Not weak: a kernel without it refuses to load the object,
 * which the Go side reports as ErrSockDestroyNotSupported. */
struct sock_common;
extern int bpf_sock_destroy(struct sock_common *sk) __attribute__((section(".ksyms")));

/* The kernel structures the program reads, reduced to the fields it uses;
 * preserve_access_index makes the loader relocate each field to its offset
 * in the running kernel (CO-RE), so the layout here needs not match. */
struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common {
	union {
		struct {
			__be32 skc_daddr;
			__be32 skc_rcv_saddr;
		};
	};
	union {
		struct {
			__be16 skc_dport;
			__u16 skc_num;
		};
	};
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
} __attribute__((preserve_access_index));

/* The iterator's context (struct bpf_iter__udp): the verifier checks the
 * accesses by offset. */
struct bpf_iter_meta {
	void *seq;
};

struct bpf_iter__udp {
	struct bpf_iter_meta *meta;
	struct sock_common *udp_sk;
};

/* Filter keys: a backend address and port and a service ID (0: any),
 * network order. */
struct term4_key {
	__be32 address;
	__be16 port;
	__be16 rev_nat_index;
};

struct term6_key {
	__u8 address[16];
	__be16 port;
	__be16 rev_nat_index;
};

/* The backends (per service or for any) whose sockets are destroyed:
 * key -> 1. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct term4_key);
	__type(value, __u8);
	__uint(max_entries, 4096);
} sockterm4_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct term6_key);
	__type(value, __u8);
	__uint(max_entries, 4096);
} sockterm6_backends SEC(".maps");

/* match4 reports whether the socket whose reverse map key is rk reached
 * backend rk->address:rk->port through a VIP of a service the filter lists
 * that backend for. */
static __always_inline bool match4(const struct sk4_rev_key *rk)
{
	struct term4_key fk = {
		.address = rk->address,
		.port = rk->port,
	};
	const struct sk4_rev_value *rv;

	rv = bpf_map_lookup_elem(&lb4_reverse_sk, rk);
	if (!rv)
		return false; /* not through a VIP */
	if (bpf_map_lookup_elem(&sockterm4_backends, &fk))
		return true; /* any service */
	fk.rev_nat_index = rv->rev_nat_index;
	return bpf_map_lookup_elem(&sockterm4_backends, &fk) != 0;
}

static __always_inline bool match6(const struct sk6_rev_key *rk)
{
	struct term6_key fk = {};
	const struct sk6_rev_value *rv;

	rv = bpf_map_lookup_elem(&lb6_reverse_sk, rk);
	if (!rv)
		return false;
	__builtin_memcpy(fk.address, rk->address.addr, 16);
	fk.port = rk->port;
	if (bpf_map_lookup_elem(&sockterm6_backends, &fk))
		return true;
	fk.rev_nat_index = rv->rev_nat_index;
	return bpf_map_lookup_elem(&sockterm6_backends, &fk) != 0;
}

SEC("iter/udp")
int sockterm_udp(struct bpf_iter__udp *ctx)
{
	struct sock_common *sk = ctx->udp_sk;
	struct sk4_rev_key rk4 = {};
	struct sk6_rev_key rk6 = {};
	bool v4 = true;
	__be32 a6[4];
	__u64 cookie;

	if (!sk)
		return 0;
	if (sk->skc_state != TCP_ESTABLISHED)
		return 0; /* not connected: each send picks its backend anew */
	cookie = bpf_get_socket_cookie(sk);

	switch (sk->skc_family) {
	case AF_INET:
		rk4.address = sk->skc_daddr;
		break;
	case AF_INET6:
		a6[0] = sk->skc_v6_daddr.in6_u.u6_addr32[0];
		a6[1] = sk->skc_v6_daddr.in6_u.u6_addr32[1];
		a6[2] = sk->skc_v6_daddr.in6_u.u6_addr32[2];
		a6[3] = sk->skc_v6_daddr.in6_u.u6_addr32[3];
		/* ::ffff:a.b.c.d is an IPv4 backend: the socket LB recorded it
		 * in the IPv4 reverse map. */
		if (a6[0] == 0 && a6[1] == 0 && a6[2] == bpf_htonl(0x0000ffff)) {
			rk4.address = a6[3];
		} else {
			v4 = false;
			__builtin_memcpy(rk6.address.addr, a6, 16);
		}
		break;
	default:
		return 0;
	}
	if (v4) {
		rk4.cookie = cookie;
		rk4.port = sk->skc_dport;
		if (!match4(&rk4))
			return 0;
	} else {
		rk6.cookie = cookie;
		rk6.port = sk->skc_dport;
		if (!match6(&rk6))
			return 0;
	}
	if (bpf_sock_destroy(sk) != 0)
		return 0;
	/* Disconnected: the socket no longer talks to that backend. */
	if (v4)
		bpf_map_delete_elem(&lb4_reverse_sk, &rk4);
	else
		bpf_map_delete_elem(&lb6_reverse_sk, &rk6);
	bpf_seq_write(ctx->meta->seq, &cookie, sizeof(cookie));
	return 0;
}
