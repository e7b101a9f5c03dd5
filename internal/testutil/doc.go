// Package testutil holds test helpers shared by actorlb's packages: the
// privilege gate for tests on real kernel objects, the choice between kernel
// and in-memory maps for tests that can run on either (KernelMaps), per-test
// bpffs pin directories, seeded randomness, and backend addresses of every
// layout for the indexes by address (BackendAddrs).
//
// Lifecycle: every helper takes a testing.TB and registers its own cleanup.
//
// Error contract: helpers never return errors; they fail or skip the test.
// When ACTORLB_REQUIRE_PRIVILEGED=1, a test that would skip for missing
// privileges, or fall back to in-memory maps, fails instead.
package testutil
