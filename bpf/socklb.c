// SPDX-License-Identifier: Apache-2.0
//go:build ignore

/*
 * actorlb socket load balancer.
 *
 * Programs at the cgroup socket-address hooks translate a service VIP into
 * one of its backends when a socket connects (TCP, connected UDP) or sends
 * an unconnected UDP datagram, and translate the backend back into the VIP
 * when the application asks who it talks to (getpeername) or where a UDP
 * datagram came from (recvmsg).
 *
 * Frontend lookup: the destination's own frontend (exact protocol, then
 * "any"); when it has none and the destination is local (loopback or a
 * node address in lb4_node_addrs / lb6_node_addrs), the surrogate frontend
 * 0.0.0.0 / :: of the same port, used only for NodePort and HostPort
 * services. A service with two backend sets is served from the internal
 * one (the socket LB only sees traffic from inside the node).
 *
 * Backend selection (lb4_select): session affinity first (the client is
 * the socket's network namespace cookie), then random draws among the
 * master's slots, weighted when lb_members holds the service's weight
 * summary, then a weighted scan of every slot. The bounded loops are
 * bpf_loop calls.
 *
 * The service, backend and revNAT maps are actorlb's own, written by its
 * engine with the upstream layouts (docs: reference/lb-map-layouts.md). The
 * loader never lets these definitions create maps: it hands the pinned ones
 * in (lb_members, lb_affinity_match and lb4/lb6_affinity too: the engine
 * creates them, the datapath writes the affinity entries). Only
 * lb4_reverse_sk, lb6_reverse_sk, lb4_node_addrs and
 * lb6_node_addrs belong to the datapath (the loader creates them).
 *
 * connect and sendmsg fail with EPERM (the program returns 0) when the
 * destination is a service with no usable backend: the VIP is never reached
 * untranslated. Every other call proceeds, translated or not.
 */

#include "include/socklb_uapi.h"
#include "include/socklb_revsk.h"
#include "include/lb_maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* What a cgroup socket-address program returns: proceed with the call
 * (translated or not), or fail it with EPERM. */
#define SYS_REJECT 0
#define SYS_PROCEED 1

/* What the forward translation found. */
enum lb_result {
	LB_PASS,   /* not a service frontend: the call proceeds untranslated */
	LB_XLATE,  /* translated to a backend */
	LB_REFUSE, /* a service with no usable backend: the call fails */
};

/* Service map scope byte. */
#define LB_SCOPE_EXT 0
#define LB_SCOPE_INT 1

/* flags bits of a master entry: the service types whose surrogate
 * frontend (0.0.0.0 / ::) stands for every local address. */
#define SVC_FLAG_NODEPORT (1 << 1)
#define SVC_FLAG_HOSTPORT (1 << 3)

/* flags2 bit of a master entry with a second (internal) backend set. */
#define SVC_FLAG2_TWO_SCOPES (1 << 5)

/* Backend states (lb4_backend.flags). */
#define BE_STATE_ACTIVE 0
#define BE_STATE_TERMINATING 1

/* flags bit of a master entry with session affinity; the timeout (seconds)
 * is then the low 24 bits of the master's backend_id. */
#define SVC_FLAG_AFFINITY (1 << 4)
#define SVC_AFFINITY_TIMEOUT_MASK 0xFFFFFF

/* Random draws of a slot before the selection falls back to a scan of
 * every slot (bounded: bpf_loop). A draw misses when the slot or backend
 * vanished meanwhile (the engine deletes old slots and backends after
 * writing the new master), when the backend is not active, or when a
 * weighted draw is rejected. */
#define LB_PICK_ATTEMPTS 16

/* A backend's weight when lb_members has no entry for it. */
#define LB_WEIGHT_DEFAULT 100

/* bpf_loop callback results. */
#define LOOP_CONTINUE 0
#define LOOP_BREAK 1

/* Session affinity keys (packed; 16 and 24 bytes). The socket LB's client
 * is the socket's network namespace cookie, with netns_cookie = 1; IPv6
 * puts it in the first 8 bytes of client and zeroes the rest. */
struct lb4_affinity_key {
	__u64 client;
	__be16 rev_nat_id;
	__u8 netns_cookie;
	__u8 pad1;
	__u32 pad2;
} __attribute__((packed));

struct lb6_affinity_key {
	__u64 client[2];
	__be16 rev_nat_id;
	__u8 netns_cookie;
	__u8 pad1;
	__u32 pad2;
} __attribute__((packed));

/* Session affinity value (16 bytes): last_used in seconds of
 * CLOCK_MONOTONIC (bpf_ktime_get_ns() / 1e9). */
struct lb_affinity_val {
	__u64 last_used;
	__u32 backend_id;
	__u32 pad;
};

/* lb_affinity_match key: the control plane's list of the backends each
 * affinity service may stick to (8 bytes; the u8 value is unused). */
struct lb_affinity_match_key {
	__u32 backend_id;
	__be16 rev_nat_id;
	__u16 pad;
};

/* actorlb's maps beside those of lb_maps.h: max_entries here is a
 * placeholder, the loader uses the pinned maps' own. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be16);
	__type(value, struct lb4_reverse_nat);
	__uint(max_entries, 65536);
} lb4_reverse_nat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be16);
	__type(value, struct lb6_reverse_nat);
	__uint(max_entries, 65536);
} lb6_reverse_nat SEC(".maps");

/* Session affinity: created by the engine, written by the datapath (the
 * engine only dumps and deletes). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb4_affinity_key);
	__type(value, struct lb_affinity_val);
	__uint(max_entries, 65536);
} lb4_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct lb6_affinity_key);
	__type(value, struct lb_affinity_val);
	__uint(max_entries, 65536);
} lb6_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct lb_affinity_match_key);
	__type(value, __u8);
	__uint(max_entries, 65536);
} lb_affinity_match SEC(".maps");

/* The datapath's own maps, pinned next to actorlb's by the loader: the
 * reverse maps (include/socklb_revsk.h) and these. */

/* The node's own addresses besides loopback (datapath configuration,
 * written by bpf.SetNodeAddresses; the value is unused). A connect to one
 * of them, or to loopback, at a port no frontend has, falls back to the
 * surrogate frontend of that port. */
#define NODE_ADDRS_MAX 1024

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __be32);
	__type(value, __u8);
	__uint(max_entries, NODE_ADDRS_MAX);
} lb4_node_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, union v6addr);
	__type(value, __u8);
	__uint(max_entries, NODE_ADDRS_MAX);
} lb6_node_addrs SEC(".maps");

/* lb_surrogate_ok: a surrogate frontend is used only by the service types
 * it exists for (a ClusterIP service cannot have one; a raw entry without
 * these flags is ignored). */
static __always_inline bool lb_surrogate_ok(const struct lb_service *svc)
{
	return (svc->flags & (SVC_FLAG_NODEPORT | SVC_FLAG_HOSTPORT)) != 0;
}

/* ---- Selection rules shared by IPv4 and IPv6 ---- */

/* lb_pick is the family-independent state of one backend selection. */
struct lb_pick {
	__u16 count;      /* the master's slots 1..count are candidates */
	__be16 rev;       /* service ID */
	bool weighted;    /* the service has a summary entry in lb_members */
	__u16 max_weight; /* its weight W: a draw of weight w is kept with
			   * probability w / W */
	__u32 total;      /* scan: sum of the weights seen (reservoir) */
	__u32 backend_id; /* the active backend chosen, 0 while none */
	__u32 fallback_id;/* a terminating backend seen, 0 if none */
};

/* What to do with a candidate backend. */
enum lb_verdict {
	LB_SKIP, /* not usable, or a rejected weighted draw */
	LB_TAKE, /* active and chosen */
	LB_KEEP, /* terminating: kept in case no active backend turns up */
};

/* lb_weight is a backend's weight in a service: its lb_members entry, or
 * the default. */
static __always_inline __u16 lb_weight(__u32 backend_id, __be16 rev)
{
	struct lb_member_key key = { .backend_id = backend_id, .rev_nat_index = rev };
	const struct lb_member *m;

	m = bpf_map_lookup_elem(&lb_members, &key);
	return m ? m->weight : LB_WEIGHT_DEFAULT;
}

/* lb_pick_init reads the service's weight summary. It returns false when
 * the service has weights and all of them are 0: no backend takes new
 * connections, the call is refused. */
static __always_inline bool lb_pick_init(struct lb_pick *p)
{
	struct lb_member_key key = { .backend_id = 0, .rev_nat_index = p->rev };
	const struct lb_member *sum;

	sum = bpf_map_lookup_elem(&lb_members, &key);
	if (!sum)
		return true; /* unweighted: uniform, as every weight is equal */
	p->weighted = true;
	p->max_weight = sum->weight;
	return sum->weight != 0;
}

/* lb_draw_verdict rules on a randomly drawn slot's backend: an active one
 * is taken (weighted: with probability w / W, rejection sampling, so that
 * a draw that is kept is proportional to w); a terminating one is kept
 * (only terminating backends are counted when none is active, and a
 * state change is written before the slots); quarantined and maintenance
 * ones are skipped. */
static __always_inline enum lb_verdict lb_draw_verdict(struct lb_pick *p, __u32 backend_id, __u8 state)
{
	__u16 w;

	if (state == BE_STATE_TERMINATING)
		return LB_KEEP;
	if (state != BE_STATE_ACTIVE)
		return LB_SKIP;
	if (!p->weighted)
		return LB_TAKE;
	w = lb_weight(backend_id, p->rev);
	if (w == 0 || bpf_get_prandom_u32() % p->max_weight >= w)
		return LB_SKIP;
	return LB_TAKE;
}

/* lb_scan_verdict rules on each slot in turn when no draw succeeded: a
 * weighted reservoir sample (the i-th active backend replaces the choice
 * with probability w_i / (w_1 + ... + w_i)), so the scan too chooses in
 * proportion to the weights. Weight 0 never takes a new connection. */
static __always_inline enum lb_verdict lb_scan_verdict(struct lb_pick *p, __u32 backend_id, __u8 state)
{
	__u16 w = LB_WEIGHT_DEFAULT;

	if (state == BE_STATE_TERMINATING)
		return LB_KEEP;
	if (state != BE_STATE_ACTIVE)
		return LB_SKIP;
	if (p->weighted)
		w = lb_weight(backend_id, p->rev);
	if (w == 0)
		return LB_SKIP;
	p->total += w;
	if (bpf_get_prandom_u32() % p->total >= w)
		return LB_SKIP;
	return LB_TAKE;
}

static __always_inline __u16 lb_random_slot(const struct lb_pick *p)
{
	return (bpf_get_prandom_u32() % p->count) + 1;
}

/* Session affinity (for a master with SVC_FLAG_AFFINITY). */

static __always_inline __u64 lb_now_seconds(void)
{
	return bpf_ktime_get_ns() / 1000000000ULL;
}

/* lb_affinity_usable: the backend a client was given is still a member
 * of the service (its lb_affinity_match entry exists) and takes new
 * connections (a weighted service does not send new ones to weight 0).
 * The caller checks that the backend exists and is active. */
static __always_inline bool lb_affinity_usable(const struct lb_pick *p, __u32 backend_id)
{
	struct lb_affinity_match_key key = { .backend_id = backend_id, .rev_nat_id = p->rev };

	if (!bpf_map_lookup_elem(&lb_affinity_match, &key))
		return false;
	return !p->weighted || lb_weight(backend_id, p->rev) != 0;
}

/* lb_affinity_fresh: the entry was used at most timeout seconds ago. */
static __always_inline bool lb_affinity_fresh(const struct lb_affinity_val *val, __u64 now, __u32 timeout)
{
	return val->last_used <= now && now - val->last_used <= timeout;
}

static __always_inline bool is_v4_mapped(const struct bpf_sock_addr *ctx)
{
	return ctx->user_ip6[0] == 0 && ctx->user_ip6[1] == 0 &&
	       ctx->user_ip6[2] == bpf_htonl(0x0000ffff);
}

/* ---- IPv4 ---- */

/* lb4_master finds the master entry of key's frontend: the exact protocol
 * first, then "any" (0); for a service with two backend sets, the internal
 * one (socket LB serves traffic from inside the node). It leaves key's
 * proto and scope at the entry found. */
static __always_inline const struct lb_service *lb4_master(struct lb4_key *key, __u8 proto)
{
	const struct lb_service *svc, *isvc;

	key->backend_slot = 0;
	key->scope = LB_SCOPE_EXT;
	key->proto = proto;
	svc = bpf_map_lookup_elem(&lb4_services, key);
	if (!svc && proto != 0) {
		key->proto = 0;
		svc = bpf_map_lookup_elem(&lb4_services, key);
	}
	if (svc && (svc->flags2 & SVC_FLAG2_TWO_SCOPES)) {
		key->scope = LB_SCOPE_INT;
		isvc = bpf_map_lookup_elem(&lb4_services, key);
		if (isvc)
			svc = isvc;
		else
			key->scope = LB_SCOPE_EXT;
	}
	return svc;
}

/* lb4_is_local: loopback (127.0.0.0/8) or one of the node's addresses. */
static __always_inline bool lb4_is_local(__be32 addr)
{
	if ((bpf_ntohl(addr) >> 24) == 127)
		return true;
	return bpf_map_lookup_elem(&lb4_node_addrs, &addr) != 0;
}

/* lb4_frontend finds the master of key's address and port: the address's
 * own frontend first; when it has none and the address is local, the
 * surrogate frontend 0.0.0.0 of the same port (NodePort on every node
 * address). key->address is left at the frontend found. */
static __always_inline const struct lb_service *lb4_frontend(struct lb4_key *key, __u8 proto)
{
	const struct lb_service *svc;

	svc = lb4_master(key, proto);
	if (!svc && key->address != 0 && lb4_is_local(key->address)) {
		key->address = 0;
		svc = lb4_master(key, proto);
	}
	if (svc && key->address == 0 && !lb_surrogate_ok(svc))
		return 0;
	return svc;
}

/* lb4_pick is one IPv4 selection: the frontend's key (slot varies), the
 * shared state, and the backends chosen (copied while the entry exists). */
struct lb4_pick {
	struct lb4_key key;
	struct lb_pick p;
	struct lb4_backend be;
	struct lb4_backend fallback;
};

/* lb4_slot_backend reads slot's backend; NULL if the slot or backend is
 * gone. */
static __always_inline const struct lb4_backend *lb4_slot_backend(struct lb4_key *key, __u16 slot, __u32 *id)
{
	const struct lb_service *s;

	key->backend_slot = slot;
	s = bpf_map_lookup_elem(&lb4_services, key);
	if (!s || s->backend_id == 0)
		return 0;
	*id = s->backend_id;
	return bpf_map_lookup_elem(&lb4_backends, id);
}

static __always_inline long lb4_consider(struct lb4_pick *c, const struct lb4_backend *b, __u32 id,
					 enum lb_verdict v)
{
	if (v == LB_TAKE) {
		c->be = *b;
		c->p.backend_id = id;
		return LOOP_BREAK;
	}
	if (v == LB_KEEP && !c->p.fallback_id) {
		c->fallback = *b;
		c->p.fallback_id = id;
	}
	return LOOP_CONTINUE;
}

/* bpf_loop callback: one random draw. */
static long lb4_draw(__u64 i, void *data)
{
	struct lb4_pick *c = data;
	const struct lb4_backend *b;
	__u32 id = 0;

	b = lb4_slot_backend(&c->key, lb_random_slot(&c->p), &id);
	if (!b)
		return LOOP_CONTINUE;
	return lb4_consider(c, b, id, lb_draw_verdict(&c->p, id, b->flags));
}

/* bpf_loop callback: slot i + 1 of the scan (never breaks: a later slot
 * may replace the choice). */
static long lb4_scan(__u64 i, void *data)
{
	struct lb4_pick *c = data;
	const struct lb4_backend *b;
	__u32 id = 0;

	b = lb4_slot_backend(&c->key, (__u16)i + 1, &id);
	if (!b)
		return LOOP_CONTINUE;
	lb4_consider(c, b, id, lb_scan_verdict(&c->p, id, b->flags));
	return LOOP_CONTINUE;
}

/* lb4_affinity_key_of is the socket LB's affinity key: the client is the
 * socket's network namespace. */
static __always_inline void lb4_affinity_key_of(void *ctx, __be16 rev, struct lb4_affinity_key *key)
{
	key->client = bpf_get_netns_cookie(ctx);
	key->rev_nat_id = rev;
	key->netns_cookie = 1;
}

/* lb4_affinity_lookup returns the backend the client was last given, if
 * the entry is fresh and the backend still usable (refreshing the entry),
 * or 0. */
static __always_inline __u32 lb4_affinity_lookup(void *ctx, struct lb4_pick *c, __u32 timeout, __u64 now)
{
	struct lb4_affinity_key key = {};
	struct lb_affinity_val *val;
	const struct lb4_backend *b;
	__u32 id;

	lb4_affinity_key_of(ctx, c->p.rev, &key);
	val = bpf_map_lookup_elem(&lb4_affinity, &key);
	if (!val || !lb_affinity_fresh(val, now, timeout))
		return 0;
	id = val->backend_id;
	if (id == 0 || !lb_affinity_usable(&c->p, id))
		return 0;
	b = bpf_map_lookup_elem(&lb4_backends, &id);
	if (!b || b->flags != BE_STATE_ACTIVE)
		return 0;
	c->be = *b;
	val->last_used = now;
	return id;
}

/* lb4_affinity_record remembers the backend given to the client. */
static __always_inline void lb4_affinity_record(void *ctx, __be16 rev, __u32 backend_id, __u64 now)
{
	struct lb4_affinity_key key = {};
	struct lb_affinity_val val = { .last_used = now, .backend_id = backend_id };

	lb4_affinity_key_of(ctx, rev, &key);
	bpf_map_update_elem(&lb4_affinity, &key, &val, BPF_ANY);
}

/* lb4_select chooses the backend for a connect or send to vip:vport.
 *
 * 1. The frontend: see lb4_frontend. None: LB_PASS.
 * 2. A master that counts no slot, or a weighted service whose weights
 *    are all 0, has no usable backend: LB_REFUSE (never the VIP
 *    untranslated).
 * 3. Session affinity: the backend this client (network namespace) was
 *    given within the timeout, if still a member and active.
 * 4. Up to LB_PICK_ATTEMPTS random draws among slots 1..count (weighted:
 *    rejection sampling), then a scan of every slot (weighted reservoir
 *    sample). An active backend is preferred; a terminating one is used
 *    only when no active one turned up. None: LB_REFUSE.
 *
 * Returns LB_XLATE and fills be and rev_nat; with affinity, records the
 * choice. */
static __always_inline int lb4_select(void *ctx, __be32 vip, __be16 vport, __u8 proto,
				      struct lb4_backend *be, __be16 *rev_nat)
{
	struct lb4_pick c = {};
	const struct lb_service *svc;
	bool affinity;
	__u32 timeout;
	__u64 now = 0;

	c.key.address = vip;
	c.key.dport = vport;
	svc = lb4_frontend(&c.key, proto);
	if (!svc)
		return LB_PASS;
	c.p.count = svc->count;
	c.p.rev = svc->rev_nat_index;
	affinity = svc->flags & SVC_FLAG_AFFINITY;
	timeout = svc->backend_id & SVC_AFFINITY_TIMEOUT_MASK;
	if (c.p.count == 0 || !lb_pick_init(&c.p))
		return LB_REFUSE;
	*rev_nat = c.p.rev;

	if (affinity) {
		now = lb_now_seconds();
		if (lb4_affinity_lookup(ctx, &c, timeout, now)) {
			*be = c.be;
			return LB_XLATE;
		}
	}

	bpf_loop(LB_PICK_ATTEMPTS, lb4_draw, &c, 0);
	if (!c.p.backend_id)
		bpf_loop(c.p.count, lb4_scan, &c, 0);
	if (c.p.backend_id) {
		*be = c.be;
	} else if (c.p.fallback_id) {
		*be = c.fallback;
		c.p.backend_id = c.p.fallback_id;
	} else {
		return LB_REFUSE;
	}
	if (affinity)
		lb4_affinity_record(ctx, c.p.rev, c.p.backend_id, now);
	return LB_XLATE;
}

/* sk4_remember records, for the socket, which VIP a backend stands for. */
static __always_inline void sk4_remember(void *ctx, __be32 backend, __be16 bport,
					 __be32 vip, __be16 vport, __be16 rev_nat)
{
	struct sk4_rev_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.address = backend,
		.port = bport,
	};
	struct sk4_rev_value val = {
		.address = vip,
		.port = vport,
		.rev_nat_index = rev_nat,
	};
	const struct sk4_rev_value *old;

	old = bpf_map_lookup_elem(&lb4_reverse_sk, &key);
	if (old && old->address == val.address && old->port == val.port &&
	    old->rev_nat_index == val.rev_nat_index)
		return;
	bpf_map_update_elem(&lb4_reverse_sk, &key, &val, BPF_ANY);
}

/* sk4_fwd translates *addr:*port in place if it is a service frontend. */
static __always_inline int sk4_fwd(void *ctx, __u8 proto, __be32 *addr, __be16 *port)
{
	struct lb4_backend be;
	__be16 rev_nat;
	int res;

	res = lb4_select(ctx, *addr, *port, proto, &be, &rev_nat);
	if (res != LB_XLATE)
		return res;
	sk4_remember(ctx, be.address, be.port, *addr, *port, rev_nat);
	*addr = be.address;
	*port = be.port;
	return LB_XLATE;
}

/* sk4_rev translates a backend *addr:*port back into the VIP the socket
 * reached it by, if the service still has that VIP. */
static __always_inline void sk4_rev(void *ctx, __be32 *addr, __be16 *port)
{
	struct sk4_rev_key key = {
		.cookie = bpf_get_socket_cookie(ctx),
		.address = *addr,
		.port = *port,
	};
	const struct sk4_rev_value *val;
	const struct lb4_reverse_nat *rn;
	__be16 idx;

	val = bpf_map_lookup_elem(&lb4_reverse_sk, &key);
	if (!val)
		return;
	idx = val->rev_nat_index;
	rn = bpf_map_lookup_elem(&lb4_reverse_nat, &idx);
	/* The VIP remembered is the address the socket named: for a
	 * surrogate frontend, a local address, not the revNAT's 0.0.0.0. */
	if (!rn || (rn->address != val->address && rn->address != 0) || rn->port != val->port) {
		/* The service is gone (or its ID now names another one). */
		bpf_map_delete_elem(&lb4_reverse_sk, &key);
		return;
	}
	*addr = val->address;
	*port = val->port;
}

static __always_inline int sock4_fwd(struct bpf_sock_addr *ctx)
{
	__be32 addr = ctx->user_ip4;
	__be16 port = (__be16)ctx->user_port;
	__be32 oaddr = addr;
	__be16 oport = port;
	int res;

	res = sk4_fwd(ctx, (__u8)ctx->protocol, &addr, &port);
	if (addr != oaddr || port != oport) {
		ctx->user_ip4 = addr;
		ctx->user_port = (__u32)port;
	}
	return res;
}

static __always_inline void sock4_rev(struct bpf_sock_addr *ctx)
{
	__be32 addr = ctx->user_ip4;
	__be16 port = (__be16)ctx->user_port;
	__be32 oaddr = addr;
	__be16 oport = port;

	sk4_rev(ctx, &addr, &port);
	if (addr != oaddr || port != oport) {
		ctx->user_ip4 = addr;
		ctx->user_port = (__u32)port;
	}
}

SEC("cgroup/connect4")
int sock4_connect(struct bpf_sock_addr *ctx)
{
	return sock4_fwd(ctx) == LB_REFUSE ? SYS_REJECT : SYS_PROCEED;
}

SEC("cgroup/sendmsg4")
int sock4_sendmsg(struct bpf_sock_addr *ctx)
{
	return sock4_fwd(ctx) == LB_REFUSE ? SYS_REJECT : SYS_PROCEED;
}

SEC("cgroup/recvmsg4")
int sock4_recvmsg(struct bpf_sock_addr *ctx)
{
	sock4_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername4")
int sock4_getpeername(struct bpf_sock_addr *ctx)
{
	sock4_rev(ctx);
	return SYS_PROCEED;
}

/* ---- IPv6 ---- */

static __always_inline bool v6_equal(const union v6addr *a, const union v6addr *b)
{
	return a->p[0] == b->p[0] && a->p[1] == b->p[1] && a->p[2] == b->p[2] && a->p[3] == b->p[3];
}

static __always_inline void v6_copy(union v6addr *dst, const union v6addr *src)
{
	dst->p[0] = src->p[0];
	dst->p[1] = src->p[1];
	dst->p[2] = src->p[2];
	dst->p[3] = src->p[3];
}

static __always_inline const struct lb_service *lb6_master(struct lb6_key *key, __u8 proto)
{
	const struct lb_service *svc, *isvc;

	key->backend_slot = 0;
	key->scope = LB_SCOPE_EXT;
	key->proto = proto;
	svc = bpf_map_lookup_elem(&lb6_services, key);
	if (!svc && proto != 0) {
		key->proto = 0;
		svc = bpf_map_lookup_elem(&lb6_services, key);
	}
	if (svc && (svc->flags2 & SVC_FLAG2_TWO_SCOPES)) {
		key->scope = LB_SCOPE_INT;
		isvc = bpf_map_lookup_elem(&lb6_services, key);
		if (isvc)
			svc = isvc;
		else
			key->scope = LB_SCOPE_EXT;
	}
	return svc;
}

static __always_inline bool v6_is_zero(const union v6addr *a)
{
	return (a->p[0] | a->p[1] | a->p[2] | a->p[3]) == 0;
}

/* lb6_is_local: ::1 or one of the node's addresses. */
static __always_inline bool lb6_is_local(const union v6addr *a)
{
	if (a->p[0] == 0 && a->p[1] == 0 && a->p[2] == 0 && a->p[3] == bpf_htonl(1))
		return true;
	return bpf_map_lookup_elem(&lb6_node_addrs, a) != 0;
}

/* lb6_frontend is lb4_frontend for IPv6 (surrogate ::). */
static __always_inline const struct lb_service *lb6_frontend(struct lb6_key *key, __u8 proto)
{
	const struct lb_service *svc;

	svc = lb6_master(key, proto);
	if (!svc && !v6_is_zero(&key->address) && lb6_is_local(&key->address)) {
		key->address.p[0] = 0;
		key->address.p[1] = 0;
		key->address.p[2] = 0;
		key->address.p[3] = 0;
		svc = lb6_master(key, proto);
	}
	if (svc && v6_is_zero(&key->address) && !lb_surrogate_ok(svc))
		return 0;
	return svc;
}

/* The IPv6 selection: lb4_pick and its helpers for IPv6. */
struct lb6_pick {
	struct lb6_key key;
	struct lb_pick p;
	struct lb6_backend be;
	struct lb6_backend fallback;
};

static __always_inline const struct lb6_backend *lb6_slot_backend(struct lb6_key *key, __u16 slot, __u32 *id)
{
	const struct lb_service *s;

	key->backend_slot = slot;
	s = bpf_map_lookup_elem(&lb6_services, key);
	if (!s || s->backend_id == 0)
		return 0;
	*id = s->backend_id;
	return bpf_map_lookup_elem(&lb6_backends, id);
}

static __always_inline long lb6_consider(struct lb6_pick *c, const struct lb6_backend *b, __u32 id,
					 enum lb_verdict v)
{
	if (v == LB_TAKE) {
		c->be = *b;
		c->p.backend_id = id;
		return LOOP_BREAK;
	}
	if (v == LB_KEEP && !c->p.fallback_id) {
		c->fallback = *b;
		c->p.fallback_id = id;
	}
	return LOOP_CONTINUE;
}

static long lb6_draw(__u64 i, void *data)
{
	struct lb6_pick *c = data;
	const struct lb6_backend *b;
	__u32 id = 0;

	b = lb6_slot_backend(&c->key, lb_random_slot(&c->p), &id);
	if (!b)
		return LOOP_CONTINUE;
	return lb6_consider(c, b, id, lb_draw_verdict(&c->p, id, b->flags));
}

static long lb6_scan(__u64 i, void *data)
{
	struct lb6_pick *c = data;
	const struct lb6_backend *b;
	__u32 id = 0;

	b = lb6_slot_backend(&c->key, (__u16)i + 1, &id);
	if (!b)
		return LOOP_CONTINUE;
	lb6_consider(c, b, id, lb_scan_verdict(&c->p, id, b->flags));
	return LOOP_CONTINUE;
}

static __always_inline void lb6_affinity_key_of(void *ctx, __be16 rev, struct lb6_affinity_key *key)
{
	key->client[0] = bpf_get_netns_cookie(ctx);
	key->client[1] = 0;
	key->rev_nat_id = rev;
	key->netns_cookie = 1;
}

static __always_inline __u32 lb6_affinity_lookup(void *ctx, struct lb6_pick *c, __u32 timeout, __u64 now)
{
	struct lb6_affinity_key key = {};
	struct lb_affinity_val *val;
	const struct lb6_backend *b;
	__u32 id;

	lb6_affinity_key_of(ctx, c->p.rev, &key);
	val = bpf_map_lookup_elem(&lb6_affinity, &key);
	if (!val || !lb_affinity_fresh(val, now, timeout))
		return 0;
	id = val->backend_id;
	if (id == 0 || !lb_affinity_usable(&c->p, id))
		return 0;
	b = bpf_map_lookup_elem(&lb6_backends, &id);
	if (!b || b->flags != BE_STATE_ACTIVE)
		return 0;
	c->be = *b;
	val->last_used = now;
	return id;
}

static __always_inline void lb6_affinity_record(void *ctx, __be16 rev, __u32 backend_id, __u64 now)
{
	struct lb6_affinity_key key = {};
	struct lb_affinity_val val = { .last_used = now, .backend_id = backend_id };

	lb6_affinity_key_of(ctx, rev, &key);
	bpf_map_update_elem(&lb6_affinity, &key, &val, BPF_ANY);
}

/* lb6_select is lb4_select for IPv6 (same rules). */
static __always_inline int lb6_select(void *ctx, const union v6addr *vip, __be16 vport, __u8 proto,
				      struct lb6_backend *be, __be16 *rev_nat)
{
	struct lb6_pick c = {};
	const struct lb_service *svc;
	bool affinity;
	__u32 timeout;
	__u64 now = 0;

	v6_copy(&c.key.address, vip);
	c.key.dport = vport;
	svc = lb6_frontend(&c.key, proto);
	if (!svc)
		return LB_PASS;
	c.p.count = svc->count;
	c.p.rev = svc->rev_nat_index;
	affinity = svc->flags & SVC_FLAG_AFFINITY;
	timeout = svc->backend_id & SVC_AFFINITY_TIMEOUT_MASK;
	if (c.p.count == 0 || !lb_pick_init(&c.p))
		return LB_REFUSE;
	*rev_nat = c.p.rev;

	if (affinity) {
		now = lb_now_seconds();
		if (lb6_affinity_lookup(ctx, &c, timeout, now)) {
			*be = c.be;
			return LB_XLATE;
		}
	}

	bpf_loop(LB_PICK_ATTEMPTS, lb6_draw, &c, 0);
	if (!c.p.backend_id)
		bpf_loop(c.p.count, lb6_scan, &c, 0);
	if (c.p.backend_id) {
		*be = c.be;
	} else if (c.p.fallback_id) {
		*be = c.fallback;
		c.p.backend_id = c.p.fallback_id;
	} else {
		return LB_REFUSE;
	}
	if (affinity)
		lb6_affinity_record(ctx, c.p.rev, c.p.backend_id, now);
	return LB_XLATE;
}

static __always_inline void sk6_remember(void *ctx, const union v6addr *backend, __be16 bport,
					 const union v6addr *vip, __be16 vport, __be16 rev_nat)
{
	struct sk6_rev_key key = {};
	struct sk6_rev_value val = {};
	const struct sk6_rev_value *old;

	key.cookie = bpf_get_socket_cookie(ctx);
	v6_copy(&key.address, backend);
	key.port = bport;
	v6_copy(&val.address, vip);
	val.port = vport;
	val.rev_nat_index = rev_nat;

	old = bpf_map_lookup_elem(&lb6_reverse_sk, &key);
	if (old && v6_equal(&old->address, &val.address) && old->port == val.port &&
	    old->rev_nat_index == val.rev_nat_index)
		return;
	bpf_map_update_elem(&lb6_reverse_sk, &key, &val, BPF_ANY);
}

static __always_inline int sk6_fwd(void *ctx, __u8 proto, union v6addr *addr, __be16 *port)
{
	struct lb6_backend be;
	__be16 rev_nat;
	int res;

	res = lb6_select(ctx, addr, *port, proto, &be, &rev_nat);
	if (res != LB_XLATE)
		return res;
	sk6_remember(ctx, &be.address, be.port, addr, *port, rev_nat);
	v6_copy(addr, &be.address);
	*port = be.port;
	return LB_XLATE;
}

static __always_inline void sk6_rev(void *ctx, union v6addr *addr, __be16 *port)
{
	struct sk6_rev_key key = {};
	const struct sk6_rev_value *val;
	const struct lb6_reverse_nat *rn;
	union v6addr rn_addr = {};
	__be16 idx;

	key.cookie = bpf_get_socket_cookie(ctx);
	v6_copy(&key.address, addr);
	key.port = *port;

	val = bpf_map_lookup_elem(&lb6_reverse_sk, &key);
	if (!val)
		return;
	idx = val->rev_nat_index;
	rn = bpf_map_lookup_elem(&lb6_reverse_nat, &idx);
	if (rn)
		__builtin_memcpy(&rn_addr, rn, sizeof(rn_addr)); /* address is at offset 0 */
	if (!rn || (!v6_equal(&rn_addr, &val->address) && !v6_is_zero(&rn_addr)) || rn->port != val->port) {
		bpf_map_delete_elem(&lb6_reverse_sk, &key);
		return;
	}
	v6_copy(addr, &val->address);
	*port = val->port;
}

/* An IPv6 socket may name an IPv4 destination as ::ffff:a.b.c.d; such a
 * destination is an IPv4 service and is looked up in the IPv4 maps. */

static __always_inline int sock6_fwd(struct bpf_sock_addr *ctx)
{
	__be16 port = (__be16)ctx->user_port;
	__be16 oport = port;
	int res;

	if (is_v4_mapped(ctx)) {
		__be32 addr = ctx->user_ip6[3];
		__be32 oaddr = addr;

		res = sk4_fwd(ctx, (__u8)ctx->protocol, &addr, &port);
		if (addr != oaddr || port != oport) {
			ctx->user_ip6[3] = addr;
			ctx->user_port = (__u32)port;
		}
		return res;
	}

	union v6addr addr, orig;

	addr.p[0] = ctx->user_ip6[0];
	addr.p[1] = ctx->user_ip6[1];
	addr.p[2] = ctx->user_ip6[2];
	addr.p[3] = ctx->user_ip6[3];
	v6_copy(&orig, &addr);
	res = sk6_fwd(ctx, (__u8)ctx->protocol, &addr, &port);
	if (!v6_equal(&addr, &orig) || port != oport) {
		ctx->user_ip6[0] = addr.p[0];
		ctx->user_ip6[1] = addr.p[1];
		ctx->user_ip6[2] = addr.p[2];
		ctx->user_ip6[3] = addr.p[3];
		ctx->user_port = (__u32)port;
	}
	return res;
}

static __always_inline void sock6_rev(struct bpf_sock_addr *ctx)
{
	__be16 port = (__be16)ctx->user_port;
	__be16 oport = port;

	if (is_v4_mapped(ctx)) {
		__be32 addr = ctx->user_ip6[3];
		__be32 oaddr = addr;

		sk4_rev(ctx, &addr, &port);
		if (addr != oaddr || port != oport) {
			ctx->user_ip6[3] = addr;
			ctx->user_port = (__u32)port;
		}
		return;
	}

	union v6addr addr, orig;

	addr.p[0] = ctx->user_ip6[0];
	addr.p[1] = ctx->user_ip6[1];
	addr.p[2] = ctx->user_ip6[2];
	addr.p[3] = ctx->user_ip6[3];
	v6_copy(&orig, &addr);
	sk6_rev(ctx, &addr, &port);
	if (!v6_equal(&addr, &orig) || port != oport) {
		ctx->user_ip6[0] = addr.p[0];
		ctx->user_ip6[1] = addr.p[1];
		ctx->user_ip6[2] = addr.p[2];
		ctx->user_ip6[3] = addr.p[3];
		ctx->user_port = (__u32)port;
	}
}

SEC("cgroup/connect6")
int sock6_connect(struct bpf_sock_addr *ctx)
{
	return sock6_fwd(ctx) == LB_REFUSE ? SYS_REJECT : SYS_PROCEED;
}

SEC("cgroup/sendmsg6")
int sock6_sendmsg(struct bpf_sock_addr *ctx)
{
	return sock6_fwd(ctx) == LB_REFUSE ? SYS_REJECT : SYS_PROCEED;
}

SEC("cgroup/recvmsg6")
int sock6_recvmsg(struct bpf_sock_addr *ctx)
{
	sock6_rev(ctx);
	return SYS_PROCEED;
}

SEC("cgroup/getpeername6")
int sock6_getpeername(struct bpf_sock_addr *ctx)
{
	sock6_rev(ctx);
	return SYS_PROCEED;
}
