// Command bench measures actorlb against real pinned BPF maps and writes
// bench-results.json. Every machine-dependent figure is also given as a
// ratio against a floor measured in the same run: a plain loop writing the
// same map entries, one bpf() update per entry with pre-marshalled keys and
// values, and the same with BatchUpdate.
//
// Run it as root: go run ./tests/bench (or make bench); --cpuprofile
// writes a CPU profile of the run.
//
// Lifecycle: it pins everything under a fresh directory on bpffs and
// removes it when done.
//
// Error contract: any failure ends the run with a message on stderr and
// exit status 1; no partial results file is written.
package main
