// Package datapath holds the end-to-end tests of actorlb's socket load
// balancer: a real kernel, the programs of package bpf attached to a child
// cgroup the test creates, real TCP and UDP sockets. Clients run in a helper
// process (the test binary, re-executed) placed in that cgroup; backends are
// echo servers on 127.0.0.0/8 (IPv4) or on the interfaces of a network
// namespace the test creates (IPv6), so no traffic leaves the machine.
//
// The Kubernetes-mode tests (kube_*_test.go, named TestKube...) run the
// engine with the Kubernetes source (k8s/source) against a real
// kube-apiserver and etcd (tests/kube/cluster; one cluster shared by the
// package, started on first use and stopped by TestMain, except for the
// test that stops the apiserver, which starts its own). The apiserver
// refuses loopback endpoints, so backends and node addresses live on the
// loopback of the helper's network namespace, in the cluster's endpoint
// ranges; ClusterIPs have no route there, so a VIP the maps do not serve
// fails at once. Each test checks the maps (against the translation of the
// cluster's objects, and IDs, slots and write counters) and real connects.
//
// Lifecycle: every test makes its own bpffs pin directory, engine, cgroup,
// helper and (for IPv6 and Kubernetes mode) network namespace, and removes
// them when it ends; the namespace dies with the helper. Kubernetes-mode
// tests work in a namespace of their own and stop their source before
// their engine.
//
// Error contract: tests that need privileges (root, bpffs, cgroup v2,
// iproute2) or the kube-apiserver and etcd binaries (make kube-tools, or
// ACTORLB_KUBE_BIN_DIR) skip without them, and fail instead when
// ACTORLB_REQUIRE_PRIVILEGED=1.
package datapath
