// Package agent holds the end-to-end tests of the actorlb binary: they
// build it once, run `actorlb agent` as a subprocess on real BPF maps pinned
// under its own bpffs directory with its own unix socket, and drive it over
// the socket with the api client, with raw HTTP and through the CLI.
//
// Lifecycle: every agent a test starts is stopped with SIGTERM when the test
// ends, must exit 0, and its pin directory is removed.
//
// Error contract: tests that need privileges fail, rather than skip, when
// ACTORLB_REQUIRE_PRIVILEGED=1.
package agent
