// Package bpf holds actorlb's datapath programs (socket load balancing at
// the cgroup hooks) with their generated Go bindings and objects.
//
// Lifecycle: the loader attaches programs through pinned links, so they
// outlive the agent process.
//
// Error contract: load and attach errors name the program and the hook.
package bpf
