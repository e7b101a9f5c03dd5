// Package actors holds actorlb's actors: the supervisor (engine), the ID
// allocator, the service and backend map owners per IP family and the
// revNAT owner. Each owns one piece of state; they talk only by messages.
//
// Lifecycle: the supervisor spawns its children and restarts them when they
// fail; every map owner rebuilds its mirror from its map when it starts.
//
// Error contract: every request gets a typed reply whose Err says which step
// failed; nothing is left half-applied.
package actors
