// SPDX-License-Identifier: Apache-2.0
//go:build ignore
/*
 * actorlb's packet load balancer: the north-south datapath for traffic that
 * arrives from other hosts (NodePort, ExternalIP, LoadBalancer VIPs, or any
 * frontend of the service map). One program body runs at two hooks:
 * packetlb_xdp (XDP, on the ingress device) and packetlb_tc (tc ingress,
 * the fallback where XDP is unavailable, and the companion of XDP for
 * packets whose next hop has no resolved neighbour yet).
 *
 * For a packet to a frontend (VIP:port/proto, or a node address of the
 * device and a NodePort) it picks a backend: the connection's conntrack
 * entry if it has one whose backend still exists; otherwise the service's
 * Maglev table (algorithm maglev), a weighted pick (lb_members weights)
 * or a uniform random slot. Then, per service:
 *   SNAT mode (default): destination -> backend, source -> the node's
 *     address on the egress device and a port kept unique per backend
 *     (the client's port when free), checksums fixed incrementally; the
 *     reply, which comes back to the node, is translated back so that the
 *     client sees the frontend;
 *   DSR mode (flags2 FWD_MODE_DSR): only the Ethernet destination changes
 *     (L2 DSR): the backend holds the VIP on its loopback and answers the
 *     client directly.
 * The packet leaves through the FIB's next hop (XDP_TX or redirect).
 * Fragments, IPv6 extension headers, ICMP and anything malformed are
 * passed to the stack untouched, never forwarded.
 */
#include "packet_uapi.h"
#include "lb_maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* ---- actorlb's service maps: lb_maps.h; the flags this program reads ---- */

#define SVC_FLAG_NODEPORT (1 << 1)
#define SVC_FLAG_SOURCE_RANGE (1 << 7)
#define SVC_FLAG2_SOURCE_RANGE_DENY (1 << 6)
#define SVC_FLAG2_FWD_MODE_DSR (1 << 7)
#define SVC_ALG_SHIFT 24
#define SVC_ALG_MAGLEV 2
#define LB_WEIGHT_DEFAULT 100
#define LB_SCOPE_EXT 0

/* Maglev: per service (rev_nat_index) an array of one u32[M]. M is the
 * engine's, set by the loader before the object is loaded. */
volatile const __u32 maglev_size = 16381;
#define MAGLEV_MAX 131071

struct maglev_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32) * 16381);
	__uint(max_entries, 1);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(key_size, sizeof(__be16));
	__uint(max_entries, 65536);
	__array(values, struct maglev_inner);
} lb4_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(key_size, sizeof(__be16));
	__uint(max_entries, 65536);
	__array(values, struct maglev_inner);
} lb6_maglev SEC(".maps");

/* Source ranges (loadBalancerSourceRanges): LPM tries keyed by service
 * and client prefix; prefixlen = 32 + the CIDR's bits. */
struct lb4_src_range_key {
	__u32 prefixlen;
	__be16 rev_nat_id;
	__u16 pad;
	__be32 addr;
};

struct lb6_src_range_key {
	__u32 prefixlen;
	__be16 rev_nat_id;
	__u16 pad;
	union v6addr addr;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lb4_src_range_key);
	__type(value, __u8);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lb4_source_range SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__type(key, struct lb6_src_range_key);
	__type(value, __u8);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} lb6_source_range SEC(".maps");

/* ---- the datapath's own maps ---- */

/* Connection tracking (SPEC: bpf/packetlb/doc.go). */
struct ct4_key {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct ct6_key {
	union v6addr src;
	union v6addr dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

#define CT_DSR (1 << 0)
#define CT_CLOSING (1 << 1)
#define CT_REPLIED (1 << 2)

struct ct4_entry {
	__u64 last_seen;
	__u64 packets;
	__u64 bytes;
	__u32 backend_id;
	__be16 rev_nat_index;
	__be16 nat_port;
	__be16 backend_port;
	__u8 flags;
	__u8 pad;
	__be32 backend_addr;
	__be32 nat_addr;
	__u32 pad2;
};

struct ct6_entry {
	__u64 last_seen;
	__u64 packets;
	__u64 bytes;
	__u32 backend_id;
	__be16 rev_nat_index;
	__be16 nat_port;
	__be16 backend_port;
	__u8 flags;
	__u8 pad;
	union v6addr backend_addr;
	union v6addr nat_addr;
	__u32 pad2;
};

struct ct4_rev {
	__u64 last_seen;
	__be32 client;
	__be32 frontend;
	__be16 client_port;
	__be16 frontend_port;
	__be16 rev_nat_index;
	__u16 pad;
};

struct ct6_rev {
	__u64 last_seen;
	union v6addr client;
	union v6addr frontend;
	__be16 client_port;
	__be16 frontend_port;
	__be16 rev_nat_index;
	__u16 pad;
};

#define CT_MAX 262144

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct4_entry);
	__uint(max_entries, CT_MAX);
} lb4_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct4_key);
	__type(value, struct ct4_rev);
	__uint(max_entries, CT_MAX);
} lb4_ct_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct6_key);
	__type(value, struct ct6_entry);
	__uint(max_entries, CT_MAX);
} lb6_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct ct6_key);
	__type(value, struct ct6_rev);
	__uint(max_entries, CT_MAX);
} lb6_ct_rev SEC(".maps");

/* Per attached device (ifindex): the node's addresses there, the SNAT
 * source of packets leaving through it and the addresses its NodePorts
 * answer on. Written by the loader. */
struct dev_cfg {
	__be32 addr4;
	union v6addr addr6;
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct dev_cfg);
	__uint(max_entries, 256);
} packetlb_devices SEC(".maps");

/* Counters: packets and bytes per service (index: service ID) and per
 * backend, and per outcome (enum pkt_counter). */
struct pkt_stat {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct pkt_stat);
	__uint(max_entries, 65536);
} packetlb_svc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__type(key, __u32);
	__type(value, struct pkt_stat);
	__uint(max_entries, 65536);
} packetlb_backend_stats SEC(".maps");

enum pkt_counter {
	CNT_PASS_NOT_SERVICE = 0, /* no frontend: passed */
	CNT_FWD_NEW,              /* new connection forwarded */
	CNT_FWD_CT,               /* packet of a tracked connection forwarded */
	CNT_REPLY,                /* reply translated back to the client */
	CNT_DROP_SOURCE_RANGE,    /* dropped: client outside the source ranges */
	CNT_DROP_NO_BACKEND,      /* dropped: service with no usable backend */
	CNT_DROP_NO_NAT_PORT,     /* dropped: no free SNAT port */
	CNT_DROP_NO_ROUTE,        /* dropped: no route to the backend or client */
	CNT_PASS_FRAGMENT,        /* IP fragment: passed */
	CNT_PASS_UNPARSED,        /* truncated, extension header, ICMP, other L4: passed */
	CNT_PASS_NO_NEIGH,        /* XDP: next hop unresolved, left to tc */
	CNT_DROP_NO_SNAT_ADDR,    /* dropped: egress device has no address */
	CNT_ICMP_ERROR,           /* ICMP error of a tracked connection translated */
	CNT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 16);
} packetlb_counters SEC(".maps");

/* ---- helpers ---- */

static __always_inline void count(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&packetlb_counters, &what);
	if (c)
		*c += 1;
}

static __always_inline void stat_add(void *map, __u32 key, __u32 bytes, bool create)
{
	struct pkt_stat *s = bpf_map_lookup_elem(map, &key);
	if (s) {
		s->packets += 1;
		s->bytes += bytes;
	} else if (create) {
		struct pkt_stat n = {.packets = 1, .bytes = bytes};
		bpf_map_update_elem(map, &key, &n, BPF_NOEXIST);
	}
}

static __always_inline __u32 rol32(__u32 x, int r) { return (x << r) | (x >> (32 - r)); }

/* A murmur3-style round: the flow hash must be the same on every node
 * (Maglev), so it depends only on the packet. */
static __always_inline __u32 hash_round(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rol32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rol32(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 hash_final(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u32)s;
}

/* The checksum after adding diff (a bpf_csum_diff result) to old. */
static __always_inline __sum16 csum_apply(__sum16 old, __u32 diff)
{
	__u64 s = (__u16)~old;
	s += diff;
	return (__sum16)~csum_fold(s);
}

/* ---- parsing ---- */

struct pkt {
	__u8 v6;
	__u8 proto;
	__u8 tcp_flags;
	__u8 pad;
	__u32 len; /* bytes of the frame */
	union v6addr src;
	union v6addr dst;
	__be16 sport;
	__be16 dport;
};

#define PARSE_OK 0
#define PARSE_PASS 1
#define PARSE_FRAGMENT 2
#define PARSE_ICMP 3 /* an ICMP or ICMPv6 message: see icmp_error */

static __always_inline int parse(void *data, void *data_end, struct pkt *p)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return PARSE_PASS;
	__u32 off = sizeof(*eth);
	p->len = data_end - data;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		if ((void *)(ip + 1) > data_end)
			return PARSE_PASS;
		__u32 ihl = (ip->ihl_version & 0x0F) * 4;
		if ((ip->ihl_version >> 4) != 4 || ihl < sizeof(*ip))
			return PARSE_PASS;
		if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET))
			return PARSE_FRAGMENT;
		p->v6 = 0;
		p->proto = ip->protocol;
		p->src.p[0] = ip->saddr;
		p->dst.p[0] = ip->daddr;
		off += ihl;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = data + off;
		if ((void *)(ip6 + 1) > data_end)
			return PARSE_PASS;
		if ((ip6->priority_version >> 4) != 6)
			return PARSE_PASS;
		p->v6 = 1;
		p->proto = ip6->nexthdr; /* extension headers: not TCP/UDP, passed */
		__builtin_memcpy(&p->src, &ip6->saddr, 16);
		__builtin_memcpy(&p->dst, &ip6->daddr, 16);
		off += sizeof(*ip6);
	} else {
		return PARSE_PASS;
	}
	if (off > 14 + 60)
		return PARSE_PASS;
	if (p->proto == IPPROTO_TCP) {
		struct tcphdr *th = data + off;
		if ((void *)(th + 1) > data_end)
			return PARSE_PASS;
		p->sport = th->source;
		p->dport = th->dest;
		p->tcp_flags = th->flags;
	} else if (p->proto == IPPROTO_UDP) {
		struct udphdr *uh = data + off;
		if ((void *)(uh + 1) > data_end)
			return PARSE_PASS;
		p->sport = uh->source;
		p->dport = uh->dest;
	} else if ((!p->v6 && p->proto == IPPROTO_ICMP) || (p->v6 && p->proto == IPPROTO_ICMPV6)) {
		return PARSE_ICMP;
	} else {
		return PARSE_PASS;
	}
	return PARSE_OK;
}

/* ---- the translation ---- */

/* What to do with the packet: the new addresses and ports, and where the
 * frame goes. */
struct xlate {
	union v6addr src;
	union v6addr dst;
	__be16 sport;
	__be16 dport;
	union v6addr nexthop; /* the FIB lookup's destination (backend or client) */
	bool l2_only;         /* DSR: only the MAC addresses change */
};

static __always_inline bool addr_eq(const union v6addr *a, const union v6addr *b, bool v6)
{
	if (!v6)
		return a->p[0] == b->p[0];
	return a->p[0] == b->p[0] && a->p[1] == b->p[1] && a->p[2] == b->p[2] && a->p[3] == b->p[3];
}

/* Which service map key matched: the packet's destination or the NodePort
 * surrogate (address 0), with the packet's protocol or "any" (0). */
struct fe {
	bool surrogate;
	__u8 proto;
};

static __always_inline const struct lb_service *svc_lookup(const struct pkt *p, const struct fe *f, __u16 slot)
{
	if (!p->v6) {
		struct lb4_key k = {.address = f->surrogate ? 0 : p->dst.p[0], .dport = p->dport,
				    .backend_slot = slot, .proto = f->proto, .scope = LB_SCOPE_EXT};
		return bpf_map_lookup_elem(&lb4_services, &k);
	}
	struct lb6_key k = {.dport = p->dport, .backend_slot = slot, .proto = f->proto, .scope = LB_SCOPE_EXT};
	if (!f->surrogate)
		__builtin_memcpy(&k.address, &p->dst, 16);
	return bpf_map_lookup_elem(&lb6_services, &k);
}

static __always_inline bool dev_has_addr(const struct dev_cfg *dev, const struct pkt *p)
{
	if (!dev)
		return false;
	if (!p->v6)
		return dev->addr4 && dev->addr4 == p->dst.p[0];
	if (!(dev->addr6.p[0] | dev->addr6.p[1] | dev->addr6.p[2] | dev->addr6.p[3]))
		return false;
	return addr_eq(&dev->addr6, &p->dst, true);
}

/* The master entry of the frontend the packet is addressed to: dst:dport
 * of the packet's protocol, then of protocol "any"; else, when dst is the
 * device's node address, the NodePort surrogate (0.0.0.0 / ::) of dport. */
static __always_inline const struct lb_service *frontend(const struct pkt *p, const struct dev_cfg *dev, struct fe *f)
{
	const struct lb_service *svc;
	f->surrogate = false;
	f->proto = p->proto;
	svc = svc_lookup(p, f, 0);
	if (svc)
		return svc;
	f->proto = 0;
	svc = svc_lookup(p, f, 0);
	if (svc)
		return svc;
	if (!dev_has_addr(dev, p))
		return 0;
	f->surrogate = true;
	f->proto = p->proto;
	svc = svc_lookup(p, f, 0);
	if (!svc) {
		f->proto = 0;
		svc = svc_lookup(p, f, 0);
	}
	if (svc && !(svc->flags & SVC_FLAG_NODEPORT))
		return 0;
	return svc;
}

/* Whether the service's source ranges let the client in. */
static __always_inline bool source_allowed(const struct pkt *p, const struct lb_service *svc)
{
	if (!(svc->flags & SVC_FLAG_SOURCE_RANGE))
		return true;
	bool found;
	if (!p->v6) {
		struct lb4_src_range_key k = {.prefixlen = 64, .rev_nat_id = svc->rev_nat_index, .addr = p->src.p[0]};
		found = bpf_map_lookup_elem(&lb4_source_range, &k) != 0;
	} else {
		struct lb6_src_range_key k = {.prefixlen = 160, .rev_nat_id = svc->rev_nat_index};
		__builtin_memcpy(&k.addr, &p->src, 16);
		found = bpf_map_lookup_elem(&lb6_source_range, &k) != 0;
	}
	if (svc->flags2 & SVC_FLAG2_SOURCE_RANGE_DENY)
		return !found;
	return found;
}

/* A backend, as the selection and the conntrack need it. */
struct be {
	__u32 id;
	union v6addr addr;
	__be16 port;
	__u8 state;
};

static __always_inline bool backend_of(__u32 id, bool v6, struct be *out)
{
	if (!id)
		return false;
	if (!v6) {
		const struct lb4_backend *b = bpf_map_lookup_elem(&lb4_backends, &id);
		if (!b)
			return false;
		out->addr.p[0] = b->address;
		out->port = b->port;
		out->state = b->flags;
	} else {
		const struct lb6_backend *b = bpf_map_lookup_elem(&lb6_backends, &id);
		if (!b)
			return false;
		__builtin_memcpy(&out->addr, &b->address, 16);
		out->port = b->port;
		out->state = b->flags;
	}
	out->id = id;
	return true;
}

static __always_inline __u32 flow_hash(const struct pkt *p)
{
	__u32 h = 0x5ca1ab1e;
	h = hash_round(h, p->src.p[0]);
	h = hash_round(h, p->dst.p[0]);
	if (p->v6) {
		h = hash_round(h, p->src.p[1]);
		h = hash_round(h, p->src.p[2]);
		h = hash_round(h, p->src.p[3]);
		h = hash_round(h, p->dst.p[1]);
		h = hash_round(h, p->dst.p[2]);
		h = hash_round(h, p->dst.p[3]);
	}
	h = hash_round(h, ((__u32)p->sport << 16) | p->dport);
	h = hash_round(h, p->proto);
	return hash_final(h);
}

/* Maglev: the service's table entry for the flow, 0 without a table. */
static __always_inline __u32 maglev_pick(const struct pkt *p, const struct lb_service *svc)
{
	__be16 rev = svc->rev_nat_index;
	void *inner = bpf_map_lookup_elem(p->v6 ? (void *)&lb6_maglev : (void *)&lb4_maglev, &rev);
	if (!inner)
		return 0;
	__u32 zero = 0;
	__u32 *table = bpf_map_lookup_elem(inner, &zero);
	if (!table)
		return 0;
	__u32 m = maglev_size;
	if (m == 0 || m > MAGLEV_MAX)
		return 0;
	__u32 idx = flow_hash(p) % m;
	/* Keep the bound check the compiler would drop: the verifier needs
	 * it to see that idx is inside the table. */
	asm volatile("" : "+r"(idx));
	if (idx >= m)
		return 0;
	return table[idx];
}

/* Weighted pick: one pass over the active slots, each backend kept with
 * probability weight / (sum of weights so far), so that every backend wins
 * with probability weight / total (weight 0: never). */
struct wpick {
	const struct pkt *p;
	const struct fe *f;
	__be16 rev;
	__u32 total;
	__u32 chosen;
};

static long wpick_slot(__u64 i, void *data)
{
	struct wpick *w = data;
	const struct lb_service *e = svc_lookup(w->p, w->f, (__u16)(i + 1));
	if (!e)
		return 0;
	struct lb_member_key mk = {.backend_id = e->backend_id, .rev_nat_index = w->rev};
	const struct lb_member *m = bpf_map_lookup_elem(&lb_members, &mk);
	__u32 weight = m ? m->weight : LB_WEIGHT_DEFAULT;
	if (!weight)
		return 0;
	w->total += weight;
	if (bpf_get_prandom_u32() % w->total < weight)
		w->chosen = e->backend_id;
	return 0;
}

/* A backend for a new connection to svc (0: none usable). */
static __always_inline __u32 pick_backend(const struct pkt *p, const struct fe *f, const struct lb_service *svc)
{
	if (!svc->count)
		return 0;
	if ((svc->backend_id >> SVC_ALG_SHIFT) == SVC_ALG_MAGLEV) {
		__u32 id = maglev_pick(p, svc);
		if (id)
			return id;
	}
	struct lb_member_key sk = {.rev_nat_index = svc->rev_nat_index};
	if (bpf_map_lookup_elem(&lb_members, &sk)) {
		/* Non-default weights. */
		struct wpick w = {.p = p, .f = f, .rev = svc->rev_nat_index};
		bpf_loop(svc->count, wpick_slot, &w, 0);
		return w.chosen;
	}
	__u16 s = bpf_get_prandom_u32() % svc->count + 1;
	const struct lb_service *e = svc_lookup(p, f, s);
	return e ? e->backend_id : 0;
}

/* ---- forwarding ---- */

static __always_inline long fib_next_hop(void *ctx, const struct pkt *p, const union v6addr *src,
					 const union v6addr *dst, __u32 ifindex, struct bpf_fib_lookup *fib)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->v6 ? AF_INET6 : AF_INET;
	fib->l4_protocol = p->proto;
	fib->ifindex = ifindex;
	if (!p->v6) {
		fib->src[0] = src->p[0];
		fib->dst[0] = dst->p[0];
	} else {
		__builtin_memcpy(fib->src, src, 16);
		__builtin_memcpy(fib->dst, dst, 16);
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

static __always_inline void *ctx_data(void *ctx, bool tc)
{
	if (tc)
		return (void *)(long)((struct __sk_buff *)ctx)->data;
	return (void *)(long)((struct xdp_md *)ctx)->data;
}

static __always_inline void *ctx_data_end(void *ctx, bool tc)
{
	if (tc)
		return (void *)(long)((struct __sk_buff *)ctx)->data_end;
	return (void *)(long)((struct xdp_md *)ctx)->data_end;
}

/* Rewrites the packet as x says (and, with macs, its Ethernet addresses to
 * fib's). XDP fixes the checksums by hand; tc with the kernel's helpers,
 * which also handle a checksum the device has yet to complete. Returns
 * false when the headers are not where parse found them. */
static __always_inline bool rewrite(void *ctx, bool tc, const struct pkt *p, const struct xlate *x,
				    const struct bpf_fib_lookup *fib, bool macs)
{
	void *data = ctx_data(ctx, tc);
	void *data_end = ctx_data_end(ctx, tc);
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return false;
	if (macs) {
		__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	}
	if (x->l2_only)
		return true;

	__u32 old[9], new[9];
	__u32 naddr = p->v6 ? 8 : 2;
	__u32 l4_off;
	__u32 addr_diff;
	if (!p->v6) {
		struct iphdr *ip = data + sizeof(*eth);
		if ((void *)(ip + 1) > data_end)
			return false;
		l4_off = sizeof(*eth) + (ip->ihl_version & 0x0F) * 4;
		old[0] = ip->saddr;
		old[1] = ip->daddr;
		new[0] = x->src.p[0];
		new[1] = x->dst.p[0];
		addr_diff = bpf_csum_diff(old, 8, new, 8, 0);
		ip->check = csum_apply(ip->check, addr_diff);
		ip->saddr = new[0];
		ip->daddr = new[1];
	} else {
		struct ipv6hdr *ip6 = data + sizeof(*eth);
		if ((void *)(ip6 + 1) > data_end)
			return false;
		l4_off = sizeof(*eth) + sizeof(*ip6);
		__builtin_memcpy(&old[0], &ip6->saddr, 16);
		__builtin_memcpy(&old[4], &ip6->daddr, 16);
		__builtin_memcpy(&new[0], &x->src, 16);
		__builtin_memcpy(&new[4], &x->dst, 16);
		addr_diff = bpf_csum_diff(old, 32, new, 32, 0);
		__builtin_memcpy(&ip6->saddr, &x->src, 16);
		__builtin_memcpy(&ip6->daddr, &x->dst, 16);
	}
	__be16 *ports = data + l4_off;
	if ((void *)(ports + 2) > data_end)
		return false;
	__u32 csum_off = l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
	__sum16 *check = data + csum_off;
	if ((void *)(check + 1) > data_end)
		return false;
	__u32 old_ports, new_ports;
	__builtin_memcpy(&old_ports, ports, 4);
	ports[0] = x->sport;
	ports[1] = x->dport;
	__builtin_memcpy(&new_ports, ports, 4);
	bool udp = p->proto == IPPROTO_UDP;
	if (!tc) {
		if (udp && !p->v6 && *check == 0)
			return true; /* no UDP checksum */
		if (p->v6) {
			old[8] = old_ports;
			new[8] = new_ports;
		} else {
			old[2] = old_ports;
			new[2] = new_ports;
		}
		__u32 diff = bpf_csum_diff(old, (naddr + 1) * 4, new, (naddr + 1) * 4, 0);
		__sum16 c = csum_apply(*check, diff);
		if (udp && c == 0)
			c = 0xFFFF;
		*check = c;
		return true;
	}
	__u64 mangled = udp ? BPF_F_MARK_MANGLED_0 : 0;
	bpf_l4_csum_replace(ctx, csum_off, 0, addr_diff, BPF_F_PSEUDO_HDR | mangled);
	bpf_l4_csum_replace(ctx, csum_off, old_ports, new_ports, 4 | mangled);
	return true;
}

/* Verdicts, for both hooks. */
#define V_PASS 0
#define V_DROP 1
#define V_TX 2       /* out of the device it came in on */
#define V_REDIRECT 3 /* out of another device (bpf_redirect set it) */
#define V_NEIGH 4    /* tc: out through bpf_redirect_neigh */

/* The forward path of a tracked or new connection: fills x and the
 * counters' keys. Returns V_PASS (not a frontend), V_DROP, or -1 to go on
 * with x. */
static __always_inline int forward(void *ctx, const struct pkt *p, struct xlate *x, __u64 now, __u32 ifindex,
				   struct bpf_fib_lookup *fib, long *fib_ret, __be16 *rev_out, __u32 *be_out)
{
	bool closing = p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN | TCP_RST));
	bool established = p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_ACK | TCP_SYN)) == TCP_ACK;
	struct be b = {};
	bool dsr = false;
	union v6addr nat = {};
	__be16 nat_port = 0;
	__be16 rev = 0;

	/* A tracked connection keeps its backend while that backend exists
	 * (whatever its state or weight now). */
	if (!p->v6) {
		struct ct4_key k = {.src = p->src.p[0], .dst = p->dst.p[0], .sport = p->sport, .dport = p->dport,
				    .proto = p->proto};
		struct ct4_entry *e = bpf_map_lookup_elem(&lb4_ct, &k);
		if (e && backend_of(e->backend_id, false, &b) && b.addr.p[0] == e->backend_addr &&
		    b.port == e->backend_port) {
			e->last_seen = now;
			e->packets += 1;
			e->bytes += p->len;
			if (closing)
				e->flags |= CT_CLOSING;
			dsr = e->flags & CT_DSR;
			/* DSR: the LB never sees a reply; the client's ACK of it
			 * says the connection is established. */
			if (dsr && established)
				e->flags |= CT_REPLIED;
			nat.p[0] = e->nat_addr;
			nat_port = e->nat_port;
			rev = e->rev_nat_index;
			goto tracked;
		}
	} else {
		struct ct6_key k = {.sport = p->sport, .dport = p->dport, .proto = p->proto};
		__builtin_memcpy(&k.src, &p->src, 16);
		__builtin_memcpy(&k.dst, &p->dst, 16);
		struct ct6_entry *e = bpf_map_lookup_elem(&lb6_ct, &k);
		if (e && backend_of(e->backend_id, true, &b) && addr_eq(&b.addr, &e->backend_addr, true) &&
		    b.port == e->backend_port) {
			e->last_seen = now;
			e->packets += 1;
			e->bytes += p->len;
			if (closing)
				e->flags |= CT_CLOSING;
			dsr = e->flags & CT_DSR;
			if (dsr && established)
				e->flags |= CT_REPLIED;
			__builtin_memcpy(&nat, &e->nat_addr, 16);
			nat_port = e->nat_port;
			rev = e->rev_nat_index;
			goto tracked;
		}
	}

	/* A new connection. */
	struct fe f;
	const struct lb_service *svc = frontend(p, bpf_map_lookup_elem(&packetlb_devices, &ifindex), &f);
	if (!svc) {
		count(CNT_PASS_NOT_SERVICE);
		return V_PASS;
	}
	if (!source_allowed(p, svc)) {
		count(CNT_DROP_SOURCE_RANGE);
		return V_DROP;
	}
	rev = svc->rev_nat_index;
	dsr = svc->flags2 & SVC_FLAG2_FWD_MODE_DSR;
	if (!backend_of(pick_backend(p, &f, svc), p->v6, &b)) {
		count(CNT_DROP_NO_BACKEND);
		return V_DROP;
	}
	*fib_ret = fib_next_hop(ctx, p, &p->src, &b.addr, ifindex, fib);
	if (*fib_ret != BPF_FIB_LKUP_RET_SUCCESS && *fib_ret != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(CNT_DROP_NO_ROUTE);
		return V_DROP;
	}
	if (!dsr) {
		/* The node's address on the way to the backend. */
		__u32 out = fib->ifindex;
		struct dev_cfg *dev = bpf_map_lookup_elem(&packetlb_devices, &out);
		if (!dev || (!p->v6 && !dev->addr4) ||
		    (p->v6 && !(dev->addr6.p[0] | dev->addr6.p[1] | dev->addr6.p[2] | dev->addr6.p[3])))
			dev = bpf_map_lookup_elem(&packetlb_devices, &ifindex);
		if (!dev) {
			count(CNT_DROP_NO_SNAT_ADDR);
			return V_DROP;
		}
		if (!p->v6)
			nat.p[0] = dev->addr4;
		else
			__builtin_memcpy(&nat, &dev->addr6, 16);
		if (!(nat.p[0] | nat.p[1] | nat.p[2] | nat.p[3])) {
			count(CNT_DROP_NO_SNAT_ADDR);
			return V_DROP;
		}
		/* A source port unique for (backend, node address): the
		 * client's own if free, else a random one. */
		nat_port = p->sport;
		bool got = false;
		for (int i = 0; i < 8; i++) {
			long err;
			if (!p->v6) {
				struct ct4_key rk = {.src = b.addr.p[0], .dst = nat.p[0], .sport = b.port,
						     .dport = nat_port, .proto = p->proto};
				struct ct4_rev rv = {.last_seen = now, .client = p->src.p[0], .frontend = p->dst.p[0],
						     .client_port = p->sport, .frontend_port = p->dport,
						     .rev_nat_index = rev};
				err = bpf_map_update_elem(&lb4_ct_rev, &rk, &rv, BPF_NOEXIST);
			} else {
				struct ct6_key rk = {.sport = b.port, .dport = nat_port, .proto = p->proto};
				__builtin_memcpy(&rk.src, &b.addr, 16);
				__builtin_memcpy(&rk.dst, &nat, 16);
				struct ct6_rev rv = {.last_seen = now, .client_port = p->sport,
						     .frontend_port = p->dport, .rev_nat_index = rev};
				__builtin_memcpy(&rv.client, &p->src, 16);
				__builtin_memcpy(&rv.frontend, &p->dst, 16);
				err = bpf_map_update_elem(&lb6_ct_rev, &rk, &rv, BPF_NOEXIST);
			}
			if (!err) {
				got = true;
				break;
			}
			nat_port = bpf_htons(32768 + bpf_get_prandom_u32() % 28232);
		}
		if (!got) {
			count(CNT_DROP_NO_NAT_PORT);
			return V_DROP;
		}
	}
	__u8 flags = (dsr ? CT_DSR : 0) | (closing ? CT_CLOSING : 0);
	if (!p->v6) {
		struct ct4_key k = {.src = p->src.p[0], .dst = p->dst.p[0], .sport = p->sport, .dport = p->dport,
				    .proto = p->proto};
		struct ct4_entry e = {.last_seen = now, .packets = 1, .bytes = p->len, .backend_id = b.id,
				      .rev_nat_index = rev, .nat_port = nat_port, .backend_port = b.port,
				      .flags = flags, .backend_addr = b.addr.p[0], .nat_addr = nat.p[0]};
		bpf_map_update_elem(&lb4_ct, &k, &e, BPF_ANY);
	} else {
		struct ct6_key k = {.sport = p->sport, .dport = p->dport, .proto = p->proto};
		__builtin_memcpy(&k.src, &p->src, 16);
		__builtin_memcpy(&k.dst, &p->dst, 16);
		struct ct6_entry e = {.last_seen = now, .packets = 1, .bytes = p->len, .backend_id = b.id,
				      .rev_nat_index = rev, .nat_port = nat_port, .backend_port = b.port,
				      .flags = flags};
		__builtin_memcpy(&e.backend_addr, &b.addr, 16);
		__builtin_memcpy(&e.nat_addr, &nat, 16);
		bpf_map_update_elem(&lb6_ct, &k, &e, BPF_ANY);
	}
	count(CNT_FWD_NEW);
	goto out;

tracked:
	*fib_ret = fib_next_hop(ctx, p, &p->src, &b.addr, ifindex, fib);
	if (*fib_ret != BPF_FIB_LKUP_RET_SUCCESS && *fib_ret != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(CNT_DROP_NO_ROUTE);
		return V_DROP;
	}
	count(CNT_FWD_CT);
out:
	*rev_out = rev;
	*be_out = b.id;
	__builtin_memcpy(&x->nexthop, &b.addr, 16);
	if (dsr) {
		x->l2_only = true;
		return -1;
	}
	__builtin_memcpy(&x->src, &nat, 16);
	x->sport = nat_port;
	__builtin_memcpy(&x->dst, &b.addr, 16);
	x->dport = b.port;
	return -1;
}

/* The reply of a SNAT connection (backend -> node address:NAT port):
 * fills x to send it to the client from the frontend. */
static __always_inline bool reply(const struct pkt *p, struct xlate *x, __u64 now, __be16 *rev_out)
{
	bool closing = p->proto == IPPROTO_TCP && (p->tcp_flags & (TCP_FIN | TCP_RST));
	if (!p->v6) {
		struct ct4_key rk = {.src = p->src.p[0], .dst = p->dst.p[0], .sport = p->sport, .dport = p->dport,
				     .proto = p->proto};
		struct ct4_rev *rv = bpf_map_lookup_elem(&lb4_ct_rev, &rk);
		if (!rv)
			return false;
		rv->last_seen = now;
		x->src.p[0] = rv->frontend;
		x->dst.p[0] = rv->client;
		x->sport = rv->frontend_port;
		x->dport = rv->client_port;
		*rev_out = rv->rev_nat_index;
		struct ct4_key k = {.src = rv->client, .dst = rv->frontend, .sport = rv->client_port,
				    .dport = rv->frontend_port, .proto = p->proto};
		struct ct4_entry *e = bpf_map_lookup_elem(&lb4_ct, &k);
		if (e) {
			e->last_seen = now;
			e->flags |= CT_REPLIED | (closing ? CT_CLOSING : 0);
		}
	} else {
		struct ct6_key rk = {.sport = p->sport, .dport = p->dport, .proto = p->proto};
		__builtin_memcpy(&rk.src, &p->src, 16);
		__builtin_memcpy(&rk.dst, &p->dst, 16);
		struct ct6_rev *rv = bpf_map_lookup_elem(&lb6_ct_rev, &rk);
		if (!rv)
			return false;
		rv->last_seen = now;
		__builtin_memcpy(&x->src, &rv->frontend, 16);
		__builtin_memcpy(&x->dst, &rv->client, 16);
		x->sport = rv->frontend_port;
		x->dport = rv->client_port;
		*rev_out = rv->rev_nat_index;
		struct ct6_key k = {.sport = rv->client_port, .dport = rv->frontend_port, .proto = p->proto};
		__builtin_memcpy(&k.src, &rv->client, 16);
		__builtin_memcpy(&k.dst, &rv->frontend, 16);
		struct ct6_entry *e = bpf_map_lookup_elem(&lb6_ct, &k);
		if (e) {
			e->last_seen = now;
			e->flags |= CT_REPLIED | (closing ? CT_CLOSING : 0);
		}
	}
	__builtin_memcpy(&x->nexthop, &x->dst, 16);
	return true;
}


/* ---- ICMP errors of tracked connections ---- */

/* ICMP error types: IPv4 destination unreachable, time exceeded,
 * parameter problem; IPv6 destination unreachable, packet too big, time
 * exceeded, parameter problem. */
static __always_inline bool icmp_is_error(__u8 type, bool v6)
{
	if (!v6)
		return type == 3 || type == 11 || type == 12;
	return type >= 1 && type <= 4;
}

/* The word of a 16-bit field, in its memory lane, for bpf_csum_diff. */
static __always_inline __u32 word16(__be16 v)
{
	__u32 w = 0;
	__builtin_memcpy(&w, &v, 2);
	return w;
}

/* An ICMP error about a packet of a tracked connection is translated like
 * the packet it quotes would be answered: an error about a packet the LB
 * sent to a backend (it quotes node:NAT port -> backend) goes to the
 * client, quoting client -> frontend; an error about a reply the LB sent
 * to a client (it quotes frontend -> client) goes to the backend, quoting
 * backend -> node:NAT port (in DSR mode: to the backend's MAC, unchanged).
 * The quoted IPv4 header checksum is fixed; the quoted L4 checksum is left
 * as it is (receivers do not check it). Anything else passes. Returns a
 * verdict (V_*), with x, fib and fib_ret filled for forwarding. */
static __always_inline int icmp_error(void *ctx, bool tc, const struct pkt *p, __u32 ifindex, __u64 now,
				      struct xlate *x, struct bpf_fib_lookup *fib, long *fib_ret)
{
	void *data = ctx_data(ctx, tc);
	void *data_end = ctx_data_end(ctx, tc);
	if (data + 14 + sizeof(struct iphdr) > data_end)
		return V_PASS;
	__u32 l4 = p->v6 ? 14 + 40 : 14 + ((((struct iphdr *)(data + 14))->ihl_version & 0x0F) * 4);
	if (l4 > 14 + 60)
		return V_PASS;
	__u8 *icmp = data + l4;
	if ((void *)(icmp + 8) > data_end)
		return V_PASS;
	if (!icmp_is_error(icmp[0], p->v6))
		return V_PASS;
	union v6addr isrc = {}, idst = {};
	__u8 iproto;
	__u32 il4;
	if (!p->v6) {
		struct iphdr *iip = (void *)(icmp + 8);
		if ((void *)(iip + 1) > data_end)
			return V_PASS;
		if (iip->ihl_version != 0x45)
			return V_PASS;
		iproto = iip->protocol;
		isrc.p[0] = iip->saddr;
		idst.p[0] = iip->daddr;
		il4 = l4 + 8 + 20;
	} else {
		struct ipv6hdr *iip = (void *)(icmp + 8);
		if ((void *)(iip + 1) > data_end)
			return V_PASS;
		iproto = iip->nexthdr;
		__builtin_memcpy(&isrc, &iip->saddr, 16);
		__builtin_memcpy(&idst, &iip->daddr, 16);
		il4 = l4 + 8 + 40;
	}
	if (iproto != IPPROTO_TCP && iproto != IPPROTO_UDP)
		return V_PASS;
	__be16 *iports = data + il4;
	if ((void *)(iports + 2) > data_end)
		return V_PASS;
	__be16 isport = iports[0], idport = iports[1];

	/* The quoted packet, seen from the other side: the key it would have. */
	bool found = false;
	union v6addr nsrc = {}, ndst = {}; /* new outer addresses */
	union v6addr qsrc = {}, qdst = {}; /* new quoted addresses */
	__be16 qsport = 0, qdport = 0;
	if (!p->v6) {
		struct ct4_key k = {.src = idst.p[0], .dst = isrc.p[0], .sport = idport, .dport = isport, .proto = iproto};
		struct ct4_rev *rv = bpf_map_lookup_elem(&lb4_ct_rev, &k);
		if (rv && p->dst.p[0] == isrc.p[0]) {
			found = true;
			ndst.p[0] = rv->client;
			nsrc.p[0] = p->src.p[0] == idst.p[0] ? rv->frontend : p->src.p[0];
			qsrc.p[0] = rv->client;
			qdst.p[0] = rv->frontend;
			qsport = rv->client_port;
			qdport = rv->frontend_port;
		} else {
			struct ct4_entry *e = bpf_map_lookup_elem(&lb4_ct, &k);
			if (e && p->dst.p[0] == isrc.p[0]) {
				found = true;
				e->last_seen = now;
				if (e->flags & CT_DSR) {
					x->l2_only = true;
					x->nexthop.p[0] = e->backend_addr;
				} else {
					ndst.p[0] = e->backend_addr;
					nsrc.p[0] = e->nat_addr;
					qsrc.p[0] = e->backend_addr;
					qdst.p[0] = e->nat_addr;
					qsport = e->backend_port;
					qdport = e->nat_port;
				}
			}
		}
	} else {
		struct ct6_key k = {.sport = idport, .dport = isport, .proto = iproto};
		__builtin_memcpy(&k.src, &idst, 16);
		__builtin_memcpy(&k.dst, &isrc, 16);
		struct ct6_rev *rv = bpf_map_lookup_elem(&lb6_ct_rev, &k);
		if (rv && addr_eq(&p->dst, &isrc, true)) {
			found = true;
			__builtin_memcpy(&ndst, &rv->client, 16);
			if (addr_eq(&p->src, &idst, true))
				__builtin_memcpy(&nsrc, &rv->frontend, 16);
			else
				__builtin_memcpy(&nsrc, &p->src, 16);
			__builtin_memcpy(&qsrc, &rv->client, 16);
			__builtin_memcpy(&qdst, &rv->frontend, 16);
			qsport = rv->client_port;
			qdport = rv->frontend_port;
		} else {
			struct ct6_entry *e = bpf_map_lookup_elem(&lb6_ct, &k);
			if (e && addr_eq(&p->dst, &isrc, true)) {
				found = true;
				e->last_seen = now;
				if (e->flags & CT_DSR) {
					x->l2_only = true;
					__builtin_memcpy(&x->nexthop, &e->backend_addr, 16);
				} else {
					__builtin_memcpy(&ndst, &e->backend_addr, 16);
					__builtin_memcpy(&nsrc, &e->nat_addr, 16);
					__builtin_memcpy(&qsrc, &e->backend_addr, 16);
					__builtin_memcpy(&qdst, &e->nat_addr, 16);
					qsport = e->backend_port;
					qdport = e->nat_port;
				}
			}
		}
	}
	if (!found) {
		count(CNT_PASS_UNPARSED);
		return V_PASS;
	}
	if (!x->l2_only)
		__builtin_memcpy(&x->nexthop, &ndst, 16);
	*fib_ret = fib_next_hop(ctx, p, x->l2_only ? &p->src : &nsrc, &x->nexthop, ifindex, fib);
	if (*fib_ret != BPF_FIB_LKUP_RET_SUCCESS && *fib_ret != BPF_FIB_LKUP_RET_NO_NEIGH) {
		count(CNT_DROP_NO_ROUTE);
		return V_DROP;
	}
	if (*fib_ret == BPF_FIB_LKUP_RET_NO_NEIGH && !tc) {
		count(CNT_PASS_NO_NEIGH);
		return V_PASS;
	}
	count(CNT_ICMP_ERROR);
	if (x->l2_only)
		return -1;

	/* Rewrite: outer addresses, quoted addresses and ports, checksums. */
	data = ctx_data(ctx, tc);
	data_end = ctx_data_end(ctx, tc);
	icmp = data + l4;
	if ((void *)(icmp + 8) > data_end)
		return V_DROP;
	__sum16 *icheck = (void *)(icmp + 2);
	if (!p->v6) {
		struct iphdr *ip = data + 14;
		struct iphdr *iip = (void *)(icmp + 8);
		if ((void *)(ip + 1) > data_end || (void *)(iip + 1) > data_end)
			return V_DROP;
		__be16 *qp = (void *)(iip + 1);
		if ((void *)(qp + 2) > data_end)
			return V_DROP;
		/* Outer header: its own checksum. */
		__u32 d = bpf_csum_diff(&ip->saddr, 4, &nsrc.p[0], 4, 0);
		d = bpf_csum_diff(&ip->daddr, 4, &ndst.p[0], 4, d);
		ip->check = csum_apply(ip->check, d);
		ip->saddr = nsrc.p[0];
		ip->daddr = ndst.p[0];
		/* Quoted header: its checksum; then the ICMP checksum over every
		 * quoted word that changes. */
		d = bpf_csum_diff(&iip->saddr, 4, &qsrc.p[0], 4, 0);
		d = bpf_csum_diff(&iip->daddr, 4, &qdst.p[0], 4, d);
		__sum16 inew = csum_apply(iip->check, d);
		__u32 wold = word16(iip->check), wnew = word16(inew);
		d = bpf_csum_diff(&wold, 4, &wnew, 4, d);
		__u32 pnew = 0;
		__builtin_memcpy(&pnew, &qsport, 2);
		__builtin_memcpy((__u8 *)&pnew + 2, &qdport, 2);
		d = bpf_csum_diff(qp, 4, &pnew, 4, d);
		iip->check = inew;
		iip->saddr = qsrc.p[0];
		iip->daddr = qdst.p[0];
		qp[0] = qsport;
		qp[1] = qdport;
		*icheck = csum_apply(*icheck, d);
	} else {
		struct ipv6hdr *ip = data + 14;
		struct ipv6hdr *iip = (void *)(icmp + 8);
		if ((void *)(ip + 1) > data_end || (void *)(iip + 1) > data_end)
			return V_DROP;
		__be16 *qp = (void *)(iip + 1);
		if ((void *)(qp + 2) > data_end)
			return V_DROP;
		/* ICMPv6's checksum covers the outer addresses too. */
		__u32 d = bpf_csum_diff(&ip->saddr, 16, &nsrc, 16, 0);
		d = bpf_csum_diff(&ip->daddr, 16, &ndst, 16, d);
		d = bpf_csum_diff(&iip->saddr, 16, &qsrc, 16, d);
		d = bpf_csum_diff(&iip->daddr, 16, &qdst, 16, d);
		__u32 pnew = 0;
		__builtin_memcpy(&pnew, &qsport, 2);
		__builtin_memcpy((__u8 *)&pnew + 2, &qdport, 2);
		d = bpf_csum_diff(qp, 4, &pnew, 4, d);
		__builtin_memcpy(&ip->saddr, &nsrc, 16);
		__builtin_memcpy(&ip->daddr, &ndst, 16);
		__builtin_memcpy(&iip->saddr, &qsrc, 16);
		__builtin_memcpy(&iip->daddr, &qdst, 16);
		qp[0] = qsport;
		qp[1] = qdport;
		*icheck = csum_apply(*icheck, d);
	}
	return -1;
}

static __always_inline int process(void *ctx, bool tc, __u32 ifindex, __u32 *out_ifindex, union v6addr *nexthop,
				   bool *v6)
{
	struct pkt p = {};
	int r = parse(ctx_data(ctx, tc), ctx_data_end(ctx, tc), &p);
	if (r == PARSE_FRAGMENT) {
		count(CNT_PASS_FRAGMENT);
		return V_PASS;
	}
	if (r == PARSE_ICMP) {
		*v6 = p.v6;
		struct xlate x = {};
		struct bpf_fib_lookup fib;
		long fib_ret = 0;
		int v = icmp_error(ctx, tc, &p, ifindex, bpf_ktime_get_ns(), &x, &fib, &fib_ret);
		if (v >= 0)
			return v;
		__builtin_memcpy(nexthop, &x.nexthop, 16);
		*out_ifindex = fib.ifindex;
		if (fib_ret == BPF_FIB_LKUP_RET_NO_NEIGH)
			return V_NEIGH; /* tc only: XDP passed it above */
		x.l2_only = true; /* the addresses are rewritten: the MACs now */
		if (!rewrite(ctx, tc, &p, &x, &fib, true))
			return V_DROP;
		return fib.ifindex == ifindex ? V_TX : V_REDIRECT;
	}
	if (r != PARSE_OK) {
		count(CNT_PASS_UNPARSED);
		return V_PASS;
	}
	*v6 = p.v6;
	__u64 now = bpf_ktime_get_ns();
	struct xlate x = {};
	struct bpf_fib_lookup fib;
	long fib_ret;
	__be16 rev = 0;
	__u32 backend = 0;
	if (reply(&p, &x, now, &rev)) {
		fib_ret = fib_next_hop(ctx, &p, &x.src, &x.dst, ifindex, &fib);
		if (fib_ret != BPF_FIB_LKUP_RET_SUCCESS && fib_ret != BPF_FIB_LKUP_RET_NO_NEIGH) {
			count(CNT_DROP_NO_ROUTE);
			return V_DROP;
		}
		count(CNT_REPLY);
	} else {
		int v = forward(ctx, &p, &x, now, ifindex, &fib, &fib_ret, &rev, &backend);
		if (v >= 0)
			return v;
		stat_add(&packetlb_svc_stats, bpf_ntohs(rev), p.len, false);
		stat_add(&packetlb_backend_stats, backend, p.len, true);
	}
	__builtin_memcpy(nexthop, &x.nexthop, 16);
	*out_ifindex = fib.ifindex;
	if (fib_ret == BPF_FIB_LKUP_RET_NO_NEIGH) {
		if (!tc) {
			/* Left to the tc program, which resolves the
			 * neighbour (the conntrack entry is made). */
			count(CNT_PASS_NO_NEIGH);
			return V_PASS;
		}
		if (!rewrite(ctx, tc, &p, &x, &fib, false))
			return V_DROP;
		return V_NEIGH;
	}
	if (!rewrite(ctx, tc, &p, &x, &fib, true))
		return V_DROP;
	return fib.ifindex == ifindex ? V_TX : V_REDIRECT;
}

SEC("xdp")
int packetlb_xdp(struct xdp_md *ctx)
{
	__u32 out = 0;
	union v6addr nh;
	bool v6 = false;
	switch (process(ctx, false, ctx->ingress_ifindex, &out, &nh, &v6)) {
	case V_DROP:
		return XDP_DROP;
	case V_TX:
		return XDP_TX;
	case V_REDIRECT:
		return bpf_redirect(out, 0);
	default:
		return XDP_PASS;
	}
}

SEC("tc")
int packetlb_tc(struct __sk_buff *skb)
{
	/* Make the headers linear and writable. */
	__u32 len = skb->len < 128 ? skb->len : 128;
	bpf_skb_pull_data(skb, len);
	__u32 out = 0;
	union v6addr nh = {};
	bool v6 = false;
	switch (process(skb, true, skb->ingress_ifindex, &out, &nh, &v6)) {
	case V_DROP:
		return TC_ACT_SHOT;
	case V_TX:
	case V_REDIRECT:
		return bpf_redirect(out, 0);
	case V_NEIGH: {
		struct bpf_redir_neigh n = {.nh_family = v6 ? AF_INET6 : AF_INET};
		__builtin_memcpy(n.nh, &nh, 16);
		return bpf_redirect_neigh(out, &n, sizeof(n), 0);
	}
	default:
		return TC_ACT_UNSPEC;
	}
}
