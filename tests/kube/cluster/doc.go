// Package cluster runs a real Kubernetes control plane for actorlb's
// Kubernetes-mode tests and benchmarks: an etcd server and a kube-apiserver,
// each a separate process built from the Go module proxy by `make
// kube-tools` (the tools modules under tests/kube/tools, kept out of the
// main module) into bin/kube/, or into the directory named by
// ACTORLB_KUBE_BIN_DIR.
//
// Both listen on free ports of 127.0.0.1 and keep their state in a
// temporary directory. Clients authenticate with tokens: the admin
// (system:masters) behind Config, Client and Kubeconfig, and actorlb-agent,
// with no rights until a test binds some, behind AgentConfig and
// AgentKubeconfig. The apiserver refuses loopback endpoint addresses, so
// tests put endpoints in EndpointCIDRv4 and EndpointCIDRv6; ClusterIPs are
// allocated from ServiceCIDRv4 and ServiceCIDRv6 (dual-stack services work).
//
// Lifecycle: New starts etcd, then the apiserver, and returns once /readyz
// answers; Close stops both (SIGTERM, then SIGKILL) and removes the
// directory. StopAPIServer, KillAPIServer and StartAPIServer take the
// apiserver down and bring it back on the same address while etcd keeps
// its data, for outage tests; clients made from Config keep working across
// it. The processes get SIGKILL if the process that started them dies, so
// a test binary killed by its timeout leaves none behind (its temporary
// directory stays). In tests, Start wraps New with t.Cleanup; Shared gives
// every test of a package one cluster, started on first use and stopped by
// RunShared from TestMain (startup takes seconds: see README). Tests on a
// shared cluster work in their own Namespace and leave the apiserver
// running; a test that stops it starts its own cluster.
//
// Error contract: New, Close and the Stop/Start methods return errors
// prefixed with the operation; an error of New wraps ErrNoBinaries when the
// tools are not built, and the log tail of a process that failed to start.
// Start, Shared and Namespace never return errors: they fail the test, or
// skip it when the tools are not built, unless ACTORLB_REQUIRE_PRIVILEGED=1
// (as in CI), which turns that skip into a failure.
package cluster
