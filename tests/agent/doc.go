// Package agent holds the end-to-end tests of the actorlb binary: they
// build it once, run `actorlb agent` as a subprocess on real BPF maps pinned
// under its own bpffs directory with its own unix socket, and drive it over
// the socket with the api client, with raw HTTP and through the CLI.
//
// Lifecycle: every agent a test starts is stopped with SIGTERM when the test
// ends, must exit 0, and its pin directory is removed. Whatever happens, an
// agent still running when its test ends (the test failed, or forgot it) is
// killed and waited for, and TestMain fails the run if any process the
// tests started outlives them.
//
// Readiness: an agent is ready when it has printed its ready line. The
// tests hold it to its contract: /v1/healthz answers 200 at the first call
// after the line, and never before the line (stdout and stderr are files
// the agent writes directly, so the test reads what it wrote before any
// answer; a pipe would add a copying goroutine's delay).
// TestNothingAnswersBeforeTheReadyLine checks it deterministically: the
// agent's stdout is a full pipe, so the line cannot be printed until the
// test reads it.
//
// Error contract: tests that need privileges fail, rather than skip, when
// ACTORLB_REQUIRE_PRIVILEGED=1.
package agent
