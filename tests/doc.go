// Package tests holds actorlb's integration, chaos, crash-restore and
// end-to-end tests and its benchmarks.
//
// Lifecycle: every test pins its maps under its own bpffs directory and
// removes it when done.
//
// Error contract: tests that need privileges fail, rather than skip, when
// ACTORLB_REQUIRE_PRIVILEGED=1.
package tests
