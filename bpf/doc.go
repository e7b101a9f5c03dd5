// Package bpf is actorlb's datapath: a socket load balancer made of eight
// BPF programs at the cgroup socket-address hooks (connect4/6, sendmsg4/6,
// recvmsg4/6, getpeername4/6), their C source (socklb.c), the objects and
// Go bindings generated from it by bpf2go (committed, so building needs no
// clang; regenerate with `go generate ./bpf`), and the loader that attaches
// them.
//
// What the programs do: on connect (TCP, connected UDP) and on an
// unconnected UDP send to a service frontend, they look up the master entry
// of (VIP, port, protocol) in actorlb's service map, falling back to
// protocol "any"; when the destination has no frontend and is a local
// address (127.0.0.0/8, ::1, or a node address set by SetNodeAddresses in
// lb4_node_addrs / lb6_node_addrs), the surrogate frontend 0.0.0.0 or ::
// of that port, used only if it is a NodePort or HostPort service. They
// pick one of the master's count active slots at random (weighted when the
// service has a weight summary in lb_members: up to 16 draws kept with
// probability w/W, then a weighted scan of every slot; weight 0 takes no
// new connection, and a service whose weights are all 0 refuses); read
// the backend and rewrite the destination to it. With session affinity
// (the master's AFFINITY flag, timeout in its low 24 bits), the client is
// the socket's network namespace cookie: the backend recorded for it in
// lb4_affinity / lb6_affinity within the timeout is used again if its
// lb_affinity_match entry exists and it is active; otherwise the choice is
// made as above and recorded. A service whose master counts no
// slot (no usable backend, e.g. a Local traffic policy with no local
// backend) refuses the call: connect and sendmsg fail with EPERM rather
// than reach the VIP untranslated. They remember, per socket
// cookie, which VIP each backend stands for (lb4_reverse_sk, lb6_reverse_sk,
// LRU), so that recvmsg (the source of a UDP reply) and getpeername show the
// VIP while the service's revNAT entry still names it. IPv4-mapped IPv6
// destinations (::ffff:a.b.c.d) use the IPv4 maps. Terminating backends get
// new connections only when no backend is active (the master counts them
// only then); quarantined and maintenance backends never do. A slot or
// backend that vanishes mid-lookup (the engine deletes old slots after
// writing the new master) is retried. Every other call proceeds,
// translated or not. Maglev and source ranges are not implemented.
//
// Maps: the six LB maps, lb_members, lb_affinity_match, lb4_affinity and
// lb6_affinity are the engine's (maps.Open creates them; Attach hands the
// pinned ones in and fails with ErrMapsNotPinned without them); the
// reverse socket maps and the node address maps are the datapath's own.
//
// UDP socket termination: a connected UDP socket keeps the backend it was
// given at connect time, even after that backend left the service.
// TerminateUDPSockets (and TerminateUDPSocketsOf, per service) destroy such
// sockets with a second object, sockterm.c: a BPF iterator over the UDP
// sockets of the caller's network namespace that calls the
// bpf_sock_destroy kfunc (Linux 6.5 or later) on every connected socket
// (IPv4, IPv6, or dual-stack to an IPv4-mapped address) whose peer is a
// listed backend and whose cookie has an lb4_reverse_sk/lb6_reverse_sk
// entry for that backend, i.e. that reached it through a VIP; sockets
// connected straight to the backend are left alone. The owner gets
// ECONNABORTED on its next receive and the socket is disconnected, so
// connecting again goes through the socket LB. The object is loaded once
// per process on the pinned reverse maps (again when they are re-pinned)
// and calls take turns on it; without the reverse maps (datapath not
// attached) there is nothing to do.
//
// Lifecycle: Attach loads the programs on the maps pinned under the bpffs
// root (it never creates LB maps: they are the engine's) and attaches them
// through BPF links pinned in <root>/links, so they keep running after the
// process exits and across agent restarts. A second Attach updates the
// pinned links to the new programs in place (no gap for connections) or,
// for another cgroup, moves them. Detach removes them and the datapath's
// own maps (reverse socket maps, node addresses); Status reports them.
// SetNodeAddresses replaces the node address set, before or after Attach.
// Attach and Detach serialize on a lock of <root>/links.
//
// Error contract: errors are prefixed with the operation ("attach socket
// lb: ", "detach socket lb: ", "socket lb status: ") and name the hook and
// program, map or path concerned. errors.Is reports ErrMapsNotPinned (no LB
// maps under the root), ErrIncompatible (a pinned map of another shape),
// ErrNoCgroup2 and ErrNotCgroup2 (no cgroup v2, or a path that is not a
// cgroup v2 directory), ErrLinkNotSupported (kernel without cgroup BPF
// links, before 5.7) and ErrSockDestroyNotSupported (UDP socket
// termination on a kernel before 6.5). A verifier rejection is returned
// with its log. Termination errors are prefixed "terminate udp sockets: "
// and name the bad entry (backends[i] or targets[i]).
package bpf
