// Package maglev computes Maglev lookup tables (Eisenbud et al., "Maglev:
// A Fast and Reliable Software Network Load Balancer", NSDI 2016): for a
// service, a table of M entries (M prime) that names a backend in each, so
// that a packet datapath picks the backend of a flow as
// table[hash(5-tuple) % M] without per-flow state shared between nodes.
//
// Two properties make it useful in front of a fleet:
//
//   - Consistency across nodes: the table is a function of the backends'
//     addresses (not of their node-local IDs), their weights, M and a
//     seed only, not of the order they are given in. Two nodes with the
//     same backends and seed pick the same backend for a flow.
//   - Minimal disruption: removing one of N backends changes its own
//     entries (about M/N) and few others, so established flows of the
//     other backends mostly keep their backend even without connection
//     tracking.
//
// Weights are honoured: a backend of weight w gets about w/Σw of the
// entries; weight 0 gets none (maintenance).
//
// The table is computed without Maglev's permutation matrix (N×M, 1.3 GB
// for M = 131071 and 10,000 backends): each backend's next position is
// computed from its offset and skip as the fill goes, so the scratch
// memory is O(N) besides the table itself.
//
// # Lifecycle
//
// Plain functions of their arguments: no state, no goroutines, safe for
// concurrent use. A Builder keeps scratch buffers between calls and is
// not safe for concurrent use (one owner).
//
// # Error contract
//
// Build refuses bad input with an error wrapping ErrInvalidTableSize or
// ErrInvalidBackend that names the field and the reason, and returns no
// table. It never panics.
package maglev
