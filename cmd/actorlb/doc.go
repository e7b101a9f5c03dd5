// Command actorlb is the actorlb binary: `actorlb agent` runs the engine on
// the pinned BPF maps and serves the REST API on a unix socket; every other
// command is a client: `actorlb service ...` talks to the agent's API,
// `actorlb bpf lb ...` reads the pinned maps directly (no agent needed), and
// `actorlb status` shows the agent's health and figures.
//
// Lifecycle: the agent restores from the pinned maps before it serves,
// prints one line saying where it listens and what it restored, and stops
// cleanly on SIGINT or SIGTERM; the maps stay pinned. Client commands run
// once and exit.
//
// Error contract: errors go to stderr as one line prefixed with "actorlb:",
// and the exit status is 1 (2 for a command line that cannot be parsed).
// `actorlb bpf lb verify` exits 1 when it finds a violation.
package main
