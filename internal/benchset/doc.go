// Package benchset makes the service sets actorlb's benchmarks measure:
// the harness's (tests/bench) and the engine core's Go benchmarks use the
// same ones, so that a figure of one reads against the other.
//
// Two address layouts: Sequential, every service's backends one run of
// consecutive addresses and the frontends consecutive too (the layout the
// paged indexes favour most), and Spread, the layout of a cluster (each
// service's backends pods on as many of 200 nodes, each node's pods
// numbered in order, the frontends drawn at random from a /16).
//
// Lifecycle: each call returns new services the caller owns; nothing is
// kept between calls. Error contract: none (the sets are fixed by their
// arguments; Spread is the same for the same arguments).
package benchset
