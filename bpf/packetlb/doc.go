// Package packetlb is actorlb's north-south datapath: an XDP program and
// a tc ingress program (one C body, packetlb.c, built by bpf2go; the
// object is committed) that load-balance packets arriving from other
// hosts on the same service, backend and membership maps as the socket
// LB, plus the loader that attaches them.
//
// What the programs do, per packet received on an attached device:
//   - a reply of a SNAT connection (backend -> node address:NAT port, found
//     in the reverse conntrack map) is translated back, so the client sees
//     the frontend, and sent to the client;
//   - a packet of a tracked connection (forward conntrack map) goes to the
//     backend it was given, as long as that backend exists with the same
//     address and port, whatever its state or weight now: established
//     connections survive backend changes and draining;
//   - a packet to a frontend (the destination address, port and protocol
//     or protocol "any"; or, addressed to the device's own address, the
//     NodePort surrogate 0.0.0.0 / ::) opens a connection: the source
//     ranges are checked (LPM maps lb4_source_range / lb6_source_range,
//     allow or deny list), a backend is picked (the service's Maglev table
//     when its algorithm is maglev and lb4_maglev / lb6_maglev has it;
//     else a weighted pick when lb_members holds weights; else a uniform
//     random slot among the master's count, which covers terminating
//     backends only when no backend is active) and tracked;
//   - an ICMP error quoting a packet of a tracked connection is translated
//     like that packet's answer would be: an error about a packet sent to
//     a backend goes to the client, quoting the client's packet to the
//     frontend; an error about a reply goes to the backend, quoting its
//     packet to the node (outer and quoted headers, IP and ICMP checksums;
//     the quoted L4 checksum is left alone, receivers do not check it);
//   - anything else (no frontend, fragments, IPv6 extension headers, other
//     ICMP, truncated or malformed headers) passes to the stack untouched.
//
// Forwarding, per service: SNAT/DNAT (default) rewrites the destination to
// the backend and the source to the node's address on the egress device
// (the client's port when free for that backend, else a random one),
// fixing the checksums incrementally (by hand in XDP; with the kernel's
// helpers in tc, which also handle a checksum still to be completed by
// the device); L2 DSR (the service's DSR flag, Flag2FwdModeDSR) changes
// only the Ethernet addresses: the backend holds the VIP on its loopback
// and answers the client directly. The frame leaves through the FIB's
// next hop (XDP_TX or a redirect). When the next hop's neighbour is not
// resolved, XDP passes the packet to the tc program, which sends it with
// bpf_redirect_neigh.
//
// Maps: the engine's (lb4/lb6_services, lb4/lb6_backends, lb_members)
// must be pinned under the root (ErrMapsNotPinned); its Maglev and
// source-range maps are used when pinned. The datapath's own maps are
// created and pinned there by Attach and kept by later Attaches:
// conntrack (lb4_ct, lb4_ct_rev, lb6_ct, lb6_ct_rev: LRU hashes, whose
// expired entries the agent's conntrack GC removes), the device addresses
// (packetlb_devices) and the counters (packetlb_counters,
// packetlb_svc_stats, packetlb_backend_stats; ReadStats).
//
// Lifecycle: Attach loads the programs and attaches them to each device
// through BPF links pinned in <root>/links (packetlb_xdp_<dev>,
// packetlb_tc_<dev>), so they keep running after the process exits; a
// second Attach updates the pinned links in place (no packet sees a gap)
// and keeps the conntrack. Modes: auto (XDP in the driver, else generic),
// native, generic, or tc (tc ingress alone). Detach removes every link and
// the datapath's own maps. Attach, Detach and the socket LB's loader
// serialize on a lock of <root>/links. Attach runs in the caller's network
// namespace (device names and addresses are resolved there). Forwarding
// must be on for the FIB lookup (net.ipv4.conf.all.forwarding=1 and the
// IPv6 one).
//
// Error contract: errors are prefixed with the operation ("attach packet
// lb: ", "detach packet lb: ", "packet lb status: ", "packet lb stats: ")
// and name the device, map or path concerned; errors.Is reports the
// sentinels of errors.go. A verifier rejection is returned with its log.
package packetlb
