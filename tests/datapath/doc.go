// Package datapath holds the end-to-end tests of actorlb's socket load
// balancer: a real kernel, the programs of package bpf attached to a child
// cgroup the test creates, real TCP and UDP sockets. Clients run in a helper
// process (the test binary, re-executed) placed in that cgroup; backends are
// echo servers on 127.0.0.0/8 (IPv4) or on the interfaces of a network
// namespace the test creates (IPv6), so no traffic leaves the machine.
//
// Lifecycle: every test makes its own bpffs pin directory, engine, cgroup,
// helper and (for IPv6) network namespace, and removes them when it ends;
// the namespace dies with the helper.
//
// Error contract: tests that need privileges (root, bpffs, cgroup v2,
// iproute2) skip without them, and fail instead when
// ACTORLB_REQUIRE_PRIVILEGED=1.
package datapath
