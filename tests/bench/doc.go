// Command bench measures actorlb against real pinned BPF maps and writes
// bench-results.json. Every machine-dependent figure is also given as a
// ratio against a floor measured in the same run: a plain loop writing the
// same map entries, one bpf() update per entry with pre-marshalled keys and
// values, and the same with BatchUpdate.
//
// Scenarios: bulk-10k-x10 (10,000 services of 10 backends by 8 callers,
// through UpsertBatch, then again with one Upsert each while the latency
// probes run: upsert-latency), memory-10k-x10 (heap retained by the
// single-call engine), restore-10k-x10 (three warm restarts on its maps,
// against a raw and a typed dump, with the phases of each restore),
// reconcile-10k-x10 (one drift check of the restored maps after each
// restart, nothing to repair: wall and CPU time, against the raw dump) and
// insert-50k-x1 (50,000 single-backend services inserted and deleted, in
// batches and one call each).
//
// Run it as root: go run ./tests/bench (or make bench); --help lists the
// sizes and the profile flags (--cpuprofile and friends, --heapprofile).
//
// Lifecycle: it pins everything under a fresh directory on bpffs and
// removes it when done.
//
// Error contract: any failure ends the run with a message on stderr and
// exit status 1; no partial results file is written.
package main
